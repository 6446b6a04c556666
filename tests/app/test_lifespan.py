"""The host's start (`app/lifespan.py`): probes made once, before any child starts."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from mcp_host.app import early, lifespan
from mcp_host.backchannel import BackChannel, ServesOps
from mcp_host.sandbox import overlay
from tests.conftest import _host_tasks
from tests.hosting import host_settings, running_host
from tests.processes import needs_bwrap


@needs_bwrap
@pytest.mark.anyio
async def test_the_writable_plugin_layer_is_probed_at_start_not_by_the_first_child(
    tmp_path: Path, database_url: str
) -> None:
    # `overlay.available` is the probe's once-per-process answer: each of its cache misses is one probe.
    overlay.available.cache_clear()
    async with running_host(host_settings(tmp_path, database_url, [])):
        assert overlay.available.cache_info().misses == 1  # at start, with no child started yet
        overlay.available()  # as the first launch asks: it reads the answer, probing nothing
        assert overlay.available.cache_info()[:2] == (1, 1)  # (hits, misses)
    assert overlay.available.cache_info().misses == 1


class _Refused(Exception):
    """A failure: the back-channel's start (the host's last part) or the code using the host."""


@asynccontextmanager
async def _refusing_channel() -> AsyncIterator[None]:
    raise _Refused
    yield  # pragma: no cover - an async generator that never yields


@pytest.mark.anyio
@pytest.mark.parametrize("fails", ["start", "while serving"])
async def test_a_host_that_fails_leaves_no_loop_running_into_its_closed_pool(
    fails: str, tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The replica heartbeat, the change channel and the records' keep-alive end before the pool
    # closes: none holds a connection the close would wait 10 s for, none logs a closed pool.
    serves_ops: ServesOps = (lambda *_: _refusing_channel()) if fails == "start" else BackChannel
    settings = host_settings(tmp_path, database_url, ["echo"])
    before = _host_tasks()
    began = anyio.current_time()
    with pytest.RaisesGroup(_Refused, allow_unwrapped=True, flatten_subgroups=True):
        async with lifespan.running_host(settings, early.security(settings), serves_ops=serves_ops):
            assert fails == "while serving", "the host started"
            await anyio.sleep(0.2)  # the loops run
            raise _Refused
    assert anyio.current_time() - began < 6  # the pool's close waited for no loop's connection
    assert _host_tasks() - before == set()
    await anyio.sleep(0.1)  # a loop left running would try its closed pool now
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
