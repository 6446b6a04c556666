"""SIGTERM drains a real `mcp-host serve` (app/drain.py): the call in flight finishes, readiness
and new requests answer 503 meanwhile, standing streams end, and the process exits 0 with no
child left behind; a call still running when the drain times out gets a JSON-RPC answer
(`unavailable`, with a retry hint) in both eras rather than a cut connection."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost

from mcp_host.app.host_file import HOST_FILE
from tests.hosting import PLUGINS, free_port, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("host_environment")]

MCP_HOST = Path(sys.executable).parent / "mcp-host"
DRAIN_TIMEOUT_S = 10


@asynccontextmanager
async def serving(
    tmp_path: Path, database_url: str, *, drain_timeout_s: float = DRAIN_TIMEOUT_S
) -> AsyncIterator[tuple[anyio.abc.Process, str]]:
    """`mcp-host serve` with the echo plugin, sandboxed, as a process; its base URL once ready."""
    port = free_port()
    data = tmp_path / "data"
    env = {
        **os.environ,
        "MCP_HOST_DATABASE_URL": database_url,
        "MCP_HOST_PRESTART_CHILDREN": "false",
        "MCP_HOST_PIN_TOOLS": "false",
        "MCP_HOST_DRAIN_TIMEOUT_S": str(drain_timeout_s),
    }
    argv = [str(MCP_HOST), "serve", "--port", str(port), "--data-dir", str(data), "--plugins", str(PLUGINS / "echo")]
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        process = await anyio.open_process(argv, env=env, stdout=sink, stderr=sink)
    try:

        def ready() -> bool:
            assert process.returncode is None, log.read_text()
            return (data / HOST_FILE).exists()

        await wait_until(ready, within_s=60)
        yield process, f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.fail_after(30):
            await process.wait()
        await process.aclose()


@asynccontextmanager
async def visitor(http: httpx2.AsyncClient, url: str, mode: str) -> AsyncIterator[Client]:
    response = await http.post(f"{url}/v1/sessions", json={})
    assert response.status_code == 201, response.text
    session = response.json()
    headers = {"Authorization": f"Bearer {session['token']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as own:
        async with Client(streamable_http_client(session["mcp_url"], http_client=own), mode=mode, cache=None) as client:
            yield client


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (its children, theirs, …), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_sigterm_lets_the_call_in_flight_finish_refuses_new_work_and_exits_0_with_no_child_left(
    tmp_path: Path, database_url: str
) -> None:
    outcome: dict[str, Any] = {}
    calling = anyio.Event()
    async with (
        serving(tmp_path, database_url) as (process, url),
        httpx2.AsyncClient(timeout=10) as http,
        visitor(http, url, "auto") as caller,
        visitor(http, url, "legacy") as legacy,  # holds a 2025-11-25 GET stream open
        anyio.create_task_group() as tg,
    ):
        assert caller.protocol_version == "2026-07-28"
        # The client checks a result against the tool's output schema, listing tools first if it
        # has not: a new request, which a draining replica refuses. Listed before the drain.
        await caller.list_tools()
        await legacy.list_tools()

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            calling.set()

        async def slow_call() -> None:
            outcome["result"] = await caller.call_tool("sleep", {"seconds": 1.5}, progress_callback=progress)
            outcome["finished"] = time.monotonic()

        async def listening() -> None:
            async with caller.listen(tools_list_changed=True) as subscription:
                outcome["listening"] = True
                try:
                    async for _ in subscription:
                        pass
                    outcome["listen"] = "closed"
                except SubscriptionLost:
                    outcome["listen"] = "lost"

        tg.start_soon(listening)
        await wait_until(lambda: "listening" in outcome, within_s=10)
        tg.start_soon(slow_call)
        with anyio.fail_after(10):
            await calling.wait()
        below = descendants(process.pid)
        assert below, "the echo child runs (in bwrap)"

        process.send_signal(signal.SIGTERM)
        ready = await draining(http, url)
        during = {
            "readyz": (ready.status_code, ready.json()),
            "healthz": (await http.get(f"{url}/healthz")).status_code,
        }
        new_session = await http.post(f"{url}/v1/sessions", json={})
        during["new session"] = (new_session.status_code, new_session.headers.get("retry-after"), new_session.json())
        with pytest.raises(Exception) as refused:  # noqa: B017 - the SDK's error for a 503 is a transport error
            await legacy.call_tool("echo", {"text": "late"})
        during["new call refused"] = refused.value is not None
        assert "result" not in outcome, "the slow call was still in flight while all this was checked"

        with anyio.fail_after(DRAIN_TIMEOUT_S):
            code = await process.wait()
        stopped = time.monotonic()
        tg.cancel_scope.cancel()

    result = outcome["result"]
    assert (result.is_error, result.structured_content) == (False, {"slept": 1.5})
    assert outcome["finished"] <= stopped
    assert outcome["listen"] == "lost"  # the stream ended: the client re-listens (elsewhere)
    assert during == {
        "readyz": (503, {"ready": False, "failed": ["drain"], "checks": {"drain": "draining"}}),
        "healthz": 200,
        "new session": (
            503,
            "2",
            {"error": "unavailable", "message": "this replica is shutting down; retry (another replica will answer)"},
        ),
        "new call refused": True,
    }
    assert code == 0
    log = (tmp_path / "serve.log").read_text()
    # The open streams did not hold the drain to its timeout: it ended when the call did.
    assert "drained: nothing in flight; stopping" in log and "drain timeout" not in log
    await wait_until(lambda: not any(alive(pid) for pid in below), within_s=5)


async def test_a_new_mcp_request_while_draining_gets_a_json_rpc_503(tmp_path: Path, database_url: str) -> None:
    calling = anyio.Event()
    async with (
        serving(tmp_path, database_url) as (process, url),
        httpx2.AsyncClient(timeout=10) as http,
        visitor(http, url, "auto") as caller,
        anyio.create_task_group() as tg,
    ):

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            calling.set()

        await caller.list_tools()  # as above: the result's check lists no tools during the drain
        tg.start_soon(lambda: caller.call_tool("sleep", {"seconds": 1.0}, progress_callback=progress))
        with anyio.fail_after(10):
            await calling.wait()
        session = (await http.post(f"{url}/v1/sessions", json={})).json()
        process.send_signal(signal.SIGTERM)
        await draining(http, url)
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
        headers = {
            "Authorization": f"Bearer {session['token']}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        refused = await http.post(session["mcp_url"], json=body, headers=headers)
        with anyio.fail_after(DRAIN_TIMEOUT_S):
            code = await process.wait()

    assert (refused.status_code, refused.headers["retry-after"], refused.json()) == (
        503,
        "2",
        {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {
                "code": -32603,
                "message": "this replica is shutting down; retry (another replica will answer)",
                "data": {"code": "unavailable", "retry_after_s": 2},
            },
        },
    )
    assert code == 0


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_a_call_still_running_at_the_drain_timeout_is_answered_unavailable_with_a_retry_hint(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    calling, answered = anyio.Event(), anyio.Event()
    outcome: dict[str, Any] = {}
    async with (
        serving(tmp_path, database_url, drain_timeout_s=1) as (process, url),
        httpx2.AsyncClient(timeout=10) as http,
        visitor(http, url, mode) as caller,
        anyio.create_task_group() as tg,
    ):

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            calling.set()

        async def slow_call() -> None:
            try:
                outcome["result"] = await caller.call_tool("sleep", {"seconds": 25}, progress_callback=progress)
            except MCPError as exc:
                outcome["error"] = exc.error
            finally:
                answered.set()

        await caller.list_tools()  # as above: the result's check lists no tools during the drain
        tg.start_soon(slow_call)
        with anyio.fail_after(10):
            await calling.wait()
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):  # the drain timeout (1 s), and a little
            await answered.wait()
            code = await process.wait()

    error = outcome.get("error")
    assert error is not None, outcome
    assert (error.code, error.message, error.data) == (
        -32603,
        "this replica is shutting down; retry (another replica will answer)",
        {"code": "unavailable", "retry_after_s": 2},
    )
    assert code == 0
    log = (tmp_path / "serve.log").read_text()
    assert "drain timeout (1 s): stopping with 1 request(s) in flight" in log


async def draining(http: httpx2.AsyncClient, url: str) -> httpx2.Response:
    """The first `/readyz` answer that is not 200: the drain starts at uvicorn's next tick (0.1 s)."""
    with anyio.fail_after(2):
        while True:
            ready = await http.get(f"{url}/readyz")
            if ready.status_code != 200:
                return ready
            await anyio.sleep(0.02)
