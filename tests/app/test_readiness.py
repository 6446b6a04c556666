"""`/readyz` waits for the first tool lists at start (issue 31: the first visitor a load balancer
sends finds warm children), at most `ready_lists_wait_s`."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import pytest

from tests.hosting import RunningHost, host_settings, running_host

pytestmark = pytest.mark.anyio


async def _ready(running: RunningHost, within_s: float) -> tuple[float, list[dict[str, object]]]:
    """Poll `/readyz` until 200; the seconds it took and every 503 body seen."""
    started = time.monotonic()
    refused: list[dict[str, object]] = []
    with anyio.fail_after(within_s):
        while (ready := await running.http.get(f"{running.url}/readyz")).status_code != 200:
            assert ready.status_code == 503, ready.text
            refused.append(ready.json())
            await anyio.sleep(0.05)
    assert ready.json()["checks"]["lists"] == "ok", ready.json()
    return time.monotonic() - started, refused


async def test_ready_only_once_every_capability_is_listed_so_the_first_list_starts_no_child(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["slow_start", "echo"], pin_tools=True)
    async with running_host(settings) as running:
        _, refused = await _ready(running, within_s=60)
        assert refused, "ready at once, before the slow child was listed"
        assert {"ready": False, "failed": ["lists"]}.items() <= refused[0].items(), refused[0]
        assert refused[0]["checks"] == {"database": "ok", "children": "ok", "lists": "starting"}
        started = list(running.spawned)
        assert len(started) == 2, started  # the owner's review started both children
        assert running.pins is not None
        assert await running.pins.approve("test.slow_start", "hello", None) is not None
        session = await running.new_session()
        async with running.client(session) as client:
            listed = await client.list_tools()
        assert "hello" in {t.name for t in listed.tools}
        assert list(running.spawned) == started, "the first visitor's list started a child"


async def test_a_child_slower_than_the_wait_does_not_hold_readiness(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_host.app.shared")
    settings = host_settings(tmp_path, database_url, ["slow_start"], pin_tools=True, ready_lists_wait_s=0.2)
    async with running_host(settings) as running:
        await _ready(running, within_s=1.5)  # the child takes 2 s to start
        assert "the first tool lists took over 0.2 s" in caplog.text


async def test_without_a_review_or_prestart_there_is_nothing_to_wait_for(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["slow_start"])  # pin_tools and prestart off
    async with running_host(settings) as running:
        _, refused = await _ready(running, within_s=5)
        assert refused == []
        assert running.spawned == []
