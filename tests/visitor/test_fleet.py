"""Two replicas on one database: a retry parked on one and sent to the other is forwarded to
it; a state naming a replica that is gone is refused; a forged forward is refused 403; a
list change on one replica's child reaches listeners on the other (issue 16)."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.client.context import ClientRequestContext

from mcp_host.children import ListChange, ResourceContentChanged, ToolsChanged
from mcp_host.settings import Settings
from mcp_host.store import load_host_key, open_database
from mcp_host.visitor import Fleet
from mcp_host.visitor.replica_forward import FORWARD_HEADER, forward_key, sign
from mcp_host_kit.contract import Refusal, refusal_of
from tests.hosting import RunningHost, free_port, host_settings, running_host, wait_until

pytestmark = pytest.mark.anyio

SHARED_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()  # MCP_HOST_SECRET_KEY of both
REFUSED = Refusal(code="invalid_arguments", message="requestState is unknown, expired, or not for this call")
QUESTION = {"question": "Which day?"}


def _settings(tmp_path: Path, database_url: str, name: str) -> Any:
    return host_settings(tmp_path / name, database_url, ["relay"], secret_key=SHARED_KEY)


@asynccontextmanager
async def _replica(tmp_path: Path, database_url: str, name: str) -> AsyncIterator[RunningHost]:
    async with running_host(_settings(tmp_path, database_url, name)) as running:
        yield running


def _on(running: RunningHost, session: dict[str, Any]) -> dict[str, Any]:
    """The same visitor session, reached through `running`'s address."""
    return {**session, "mcp_url": f"{running.url}/v1/sessions/{session['session_id']}/mcp"}


async def _never_asked(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    raise AssertionError("the input round is driven by hand in these tests")


async def _parked(running: RunningHost, session: dict[str, Any]) -> types.InputRequiredResult:
    async with running.client(session, "auto", elicitation_callback=_never_asked) as client:
        first = await client.session.call_tool("ask", QUESTION, allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult)
    return first


async def _retry(running: RunningHost, session: dict[str, Any], state: str, keys: list[str]) -> types.CallToolResult:
    answers: dict[str, types.InputResponse] = {
        key: types.ElicitResult(action="accept", content={"reply": "Tuesday"}) for key in keys
    }
    async with running.client(_on(running, session), "auto", elicitation_callback=_never_asked) as client:
        assert client.protocol_version == "2026-07-28"
        done = await client.session.call_tool(
            "ask", QUESTION, input_responses=answers, request_state=state, allow_input_required=True
        )
    assert isinstance(done, types.CallToolResult)
    return done


async def test_a_parked_elicitation_is_answered_through_another_replica(tmp_path: Path, database_url: str) -> None:
    async with _replica(tmp_path, database_url, "a") as a, _replica(tmp_path, database_url, "b") as b:
        ids = {r["id"] for r in await a.sql.fetch("SELECT id FROM mcp_host.replicas")}
        session = await a.new_session()
        first = await _parked(a, session)
        assert first.request_state is not None
        done = await _retry(b, session, first.request_state, list(first.input_requests or {}))
        parked_after = a.parked_rounds()
    assert len(ids) == 2 and first.request_state.partition(".")[0] in ids
    assert done.is_error is False
    assert done.structured_content == {"asked": True, "action": "accept", "reply": "Tuesday"}
    assert parked_after == 0


async def test_a_state_naming_a_stopped_replica_is_refused_as_unknown(tmp_path: Path, database_url: str) -> None:
    async with _replica(tmp_path, database_url, "b") as b:
        async with _replica(tmp_path, database_url, "a") as a:
            session = await a.new_session()
            first = await _parked(a, session)
        assert first.request_state is not None
        started = time.monotonic()
        done = await _retry(b, session, first.request_state, list(first.input_requests or {}))
        took = time.monotonic() - started
    assert (done.is_error, refusal_of(done)) == (True, REFUSED)
    assert took < 5


async def test_a_state_naming_an_unreachable_replica_is_refused_within_the_connect_timeout(
    tmp_path: Path, database_url: str
) -> None:
    async with _replica(tmp_path, database_url, "b") as b:
        # A replica whose row is fresh but whose address refuses connections.
        await b.sql.execute(
            "INSERT INTO mcp_host.replicas (id, url) VALUES ($1, $2)",
            "00000000deadbeef",
            f"http://127.0.0.1:{free_port()}",
        )
        session = await b.new_session()
        started = time.monotonic()
        done = await _retry(b, session, "00000000deadbeef." + "x" * 43, ["input-1"])
        took = time.monotonic() - started
    assert (done.is_error, refusal_of(done)) == (True, REFUSED)
    assert took < 5


async def test_a_forged_or_stale_forward_header_is_refused_403(tmp_path: Path, database_url: str) -> None:
    async with _replica(tmp_path, database_url, "b") as b:
        session = await b.new_session()
        path = f"/v1/sessions/{session['session_id']}/mcp"
        body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask","requestState":"x.y"}}'
        key = forward_key(load_host_key(b.settings.data_dir, SHARED_KEY))
        headers = {
            "Authorization": f"Bearer {session['token']}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
        }
        answers = []
        for forged in (
            f"{int(time.time())}.{'0' * 64}",  # a made-up MAC
            sign(b"another-key", "POST", path, body),  # signed with another key
            sign(key, "POST", path, body, now=time.time() - 120),  # stale
            sign(key, "POST", path, body + b" "),  # another body
            "not-a-signature",
        ):
            response = await b.http.post(f"{b.url}{path}", content=body, headers={**headers, FORWARD_HEADER: forged})
            answers.append((response.status_code, response.json().get("error")))
    assert answers == [(403, "denied")] * 5


async def test_a_list_change_on_one_replica_reaches_listeners_on_the_other(tmp_path: Path, database_url: str) -> None:
    legacy_heard = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            legacy_heard.set()

    async with _replica(tmp_path, database_url, "a") as a, _replica(tmp_path, database_url, "b") as b:
        # The relay plugin runs an instance per visitor session: its changes are its session's,
        # heard by that session's listeners whichever replica they are connected to.
        caller = await a.new_session()
        listener = _on(b, caller)
        async with (
            b.client(listener, "auto") as modern,
            b.client(listener, "legacy", message_handler=on_message) as legacy,
            modern.listen(tools_list_changed=True) as subscription,
        ):
            assert modern.protocol_version == "2026-07-28"
            await legacy.list_tools()  # its connection is remembered for change notices
            async with a.client(caller, "auto") as calling:
                await calling.call_tool("grow", {"name": "grown_on_a"})
            with anyio.fail_after(10):
                async for event in subscription:
                    assert type(event).__name__ == "ToolsListChanged"
                    break
                await legacy_heard.wait()


async def test_a_notice_reaches_the_other_replicas_not_its_origin_and_an_oversize_one_is_skipped(
    tmp_path: Path, database_url: str
) -> None:
    heard_a: list[ListChange] = []
    heard_b: list[ListChange] = []
    huge = ListChange("test.relay", ResourceContentChanged("relay://" + "x" * 9000))
    sent = [
        ListChange("test.relay", ToolsChanged()),
        ListChange("test.relay", ResourceContentChanged("relay://note"), "s1"),
    ]
    async with (
        open_database(Settings(data_dir=tmp_path, database_url=database_url)) as database,
        anyio.create_task_group() as tg,
    ):
        a = Fleet(database.pool, url="http://127.0.0.1:1", host_key=b"k" * 32, task_group=tg)
        b = Fleet(database.pool, url="http://127.0.0.1:2", host_key=b"k" * 32, task_group=tg)
        for fleet, heard in ((a, heard_a), (b, heard_b)):
            await fleet.register()
            await tg.start(fleet.run, heard.append)
        a.relay(huge)
        for change in sent:
            a.relay(change)
            await anyio.sleep(0.05)  # relay sends in a task of its own: keep the order to compare
        await database.pool.execute("SELECT pg_notify('mcp_host_changes', 'not a notice')")
        await wait_until(lambda: len(heard_b) >= len(sent))
        rows = await database.pool.fetchval("SELECT count(*) FROM mcp_host.replicas")
        await a.stop()
        await b.stop()
        left = await database.pool.fetchval("SELECT count(*) FROM mcp_host.replicas")
    assert heard_b == sent and heard_a == []
    assert (rows, left) == (2, 0)
