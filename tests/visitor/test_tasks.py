"""MCP tasks through a visitor session (`visitor.tasks`).

Real host, the sandboxed `tasker` child (raw JSON-RPC: the SDK's server has no tasks; one
shared child, so the host alone keeps sessions apart), a 2025-11-25 client speaking raw
JSON-RPC over streamable HTTP (the SDK's client cannot receive a `CreateTaskResult`): create,
poll, result, cancel, list, and another session's task is `not found`; each session hears the
status notifications of its own tasks only, on its standalone stream; a task's elicitation
reaches the visitor awaiting that task's result, and no other; a task's result is a turn
receipt. A 2026-07-28 session (the SDK's client) is neither offered the task-required tool nor
let call it. What the host remembers is shared between principals (issue 26, defect 4): one
principal's flood is refused past its share and makes the host forget no other's task, and a
task the host forgets at its ttl's end is cancelled in its child. Last, server-everything's
`simulate-research-query` when the ecosystem is installed, plain and with its elicitation.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.types import TextContent

from mcp_host.errors import Unavailable, UnknownTool
from mcp_host.policy import PostgresTurns
from mcp_host.policy.turns import Receipt
from mcp_host.principal import Principal
from mcp_host.visitor import TaskBook
from mcp_host_kit.contract import ERROR_KEY
from tests.hosting import PLUGINS, RunningHost, host_settings, refusal, running_host, wait_until

pytestmark = pytest.mark.anyio

ECOSYSTEM = Path(__file__).resolve().parents[2] / ".cache" / "ecosystem" / "plugins" / "everything"


class Legacy:
    """A 2025-11-25 client of one visitor session, in raw JSON-RPC."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self._http, self._url, self._next = http, url, 0
        self._headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

    async def open(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        init = await self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities or {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        )
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self._headers["mcp-protocol-version"] = "2025-11-25"
        return dict(init["result"])

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next += 1
        return await self._post({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params or {}})

    async def listen(self, heard: list[dict[str, Any]], changed: Callable[[], None]) -> None:
        """Keep the session's standalone stream open, each notification into `heard`."""
        async with self._http.stream("GET", self._url, headers=self._headers) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    heard.append(json.loads(line[5:]))
                    changed()

    async def answering(
        self, method: str, params: dict[str, Any], answer: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """Send a request; each request the server puts on its stream meanwhile is answered
        with `answer(request)`. The request's own answer."""
        self._next += 1
        own = self._next
        message = {"jsonrpc": "2.0", "id": own, "method": method, "params": params}
        async with self._http.stream("POST", self._url, json=message, headers=self._headers) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                got = json.loads(line[5:])
                if got.get("id") == own and "method" not in got:
                    return dict(got)
                if "method" in got and "id" in got:
                    reply = {"jsonrpc": "2.0", "id": got["id"], "result": await answer(got)}
                    await self._post(reply)
        raise AssertionError("the stream ended without an answer")

    async def _post(self, message: dict[str, Any]) -> dict[str, Any]:
        response = await self._http.post(self._url, json=message, headers=self._headers)
        assert response.status_code in (200, 202), response.text
        if "mcp-session-id" in response.headers:
            self._headers["mcp-session-id"] = response.headers["mcp-session-id"]
        if response.status_code == 202:
            return {}
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            answers = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
            answers = [a for a in answers if "id" in a]
            assert answers, response.text
            return dict(answers[-1])
        return dict(response.json())


async def _legacy(
    host: Any, session: dict[str, Any], http: httpx2.AsyncClient, capabilities: dict[str, Any] | None = None
) -> tuple[Legacy, dict[str, Any]]:
    http.headers["authorization"] = f"Bearer {session['token']}"
    client = Legacy(http, session["mcp_url"])
    return client, await client.open(capabilities)


class Heard:
    """What one session's standalone stream brought, and a way to wait for a notification."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._changed = anyio.Event()

    def changed(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def statuses(self) -> list[tuple[str, str]]:
        return [
            (m["params"]["taskId"], m["params"]["status"])
            for m in self.messages
            if m.get("method") == "notifications/tasks/status"
        ]

    async def until(self, status: tuple[str, str]) -> None:
        with anyio.fail_after(10):
            while status not in self.statuses():
                await self._changed.wait()


async def _until_done(client: Legacy, task_id: str) -> dict[str, Any]:
    with anyio.fail_after(10):
        while True:
            got = (await client.request("tasks/get", {"taskId": task_id}))["result"]
            if got["status"] != "working":
                return dict(got)
            await anyio.sleep(0.05)


async def test_a_task_passes_through_bound_to_its_session(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["tasker"])) as host:
        async with httpx2.AsyncClient(timeout=30) as http_a, httpx2.AsyncClient(timeout=30) as http_b:
            a, init = await _legacy(host, await host.new_session(), http_a)
            b, _ = await _legacy(host, await host.new_session(), http_b)
            assert init["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
            tools = {t["name"]: t for t in (await a.request("tools/list"))["result"]["tools"]}
            assert tools["research"]["execution"] == {"taskSupport": "required"}

            created = await a.request(
                "tools/call", {"name": "research", "arguments": {"topic": "owls"}, "task": {"ttl": 60_000}}
            )
            task = created["result"]["task"]
            assert task["status"] == "working"
            assert (await _until_done(a, task["taskId"]))["status"] == "completed"
            result = (await a.request("tasks/result", {"taskId": task["taskId"]}))["result"]
            assert result["structuredContent"] == {"topic": "owls"}

            slow = await a.request("tools/call", {"name": "research", "arguments": {"seconds": 30}, "task": {}})
            slow_id = slow["result"]["task"]["taskId"]
            cancelled = (await a.request("tasks/cancel", {"taskId": slow_id}))["result"]
            assert cancelled["status"] == "cancelled"

            b_task = (await b.request("tools/call", {"name": "research", "arguments": {}, "task": {}}))["result"]
            listed_a = {t["taskId"] for t in (await a.request("tasks/list"))["result"]["tasks"]}
            listed_b = {t["taskId"] for t in (await b.request("tasks/list"))["result"]["tasks"]}
            assert listed_a == {task["taskId"], slow_id}
            assert listed_b == {b_task["task"]["taskId"]}

            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                foreign = await b.request(method, {"taskId": task["taskId"]})
                assert foreign["error"]["code"] == -32602
                assert foreign["error"]["message"] == "task not found"
            unknown = await a.request("tasks/get", {"taskId": "nope"})
            assert unknown["error"]["message"] == "task not found"


async def test_a_tasks_status_notifications_reach_only_its_own_session(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["tasker"])) as host:
        async with (
            httpx2.AsyncClient(timeout=30) as http_a,
            httpx2.AsyncClient(timeout=30) as http_b,
            anyio.create_task_group() as tg,
        ):
            a, _ = await _legacy(host, await host.new_session(), http_a)
            b, _ = await _legacy(host, await host.new_session(), http_b)
            heard_a, heard_b = Heard(), Heard()
            tg.start_soon(a.listen, heard_a.messages, heard_a.changed)
            tg.start_soon(b.listen, heard_b.messages, heard_b.changed)
            await a.request("tools/list")  # the standalone streams are open before any task runs
            await b.request("tools/list")

            a_task = (await a.request("tools/call", {"name": "research", "arguments": {}, "task": {}}))["result"]
            await heard_a.until((a_task["task"]["taskId"], "completed"))
            b_task = (await b.request("tools/call", {"name": "research", "arguments": {}, "task": {}}))["result"]
            await heard_b.until((b_task["task"]["taskId"], "completed"))
            tg.cancel_scope.cancel()
    assert heard_a.statuses() == [(a_task["task"]["taskId"], "completed")]
    assert heard_b.statuses() == [(b_task["task"]["taskId"], "completed")]


async def test_a_tasks_elicitation_reaches_the_visitor_awaiting_its_result(tmp_path: Path, database_url: str) -> None:
    asked: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}

    def answer_as(who: str) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        async def answer(request: dict[str, Any]) -> dict[str, Any]:
            asked[who].append(request)
            return {"action": "accept", "content": {"kind": who}}

        return answer

    async with running_host(host_settings(tmp_path, database_url, ["tasker"])) as host:
        async with httpx2.AsyncClient(timeout=30) as http_a, httpx2.AsyncClient(timeout=30) as http_b:
            session_a = await host.new_session()
            a, _ = await _legacy(host, session_a, http_a, {"elicitation": {}})
            b, _ = await _legacy(host, await host.new_session(), http_b, {"elicitation": {}})
            opened = await host.http.post(
                f"{host.url}/v1/sessions/{session_a['session_id']}/turns",
                json={"message": "research owls"},
                headers={"Authorization": f"Bearer {session_a['token']}"},
            )
            assert opened.status_code == 201
            ask = {"name": "research", "arguments": {"topic": "owls", "ask": True}, "task": {}}
            a_id = (await a.request("tools/call", ask))["result"]["task"]["taskId"]
            b_id = (await b.request("tools/call", ask))["result"]["task"]["taskId"]
            assert (await a.request("tasks/get", {"taskId": a_id}))["result"]["status"] == "input_required"

            results: dict[str, dict[str, Any]] = {}

            async def result(who: str, client: Legacy, task_id: str) -> None:
                results[who] = await client.answering("tasks/result", {"taskId": task_id}, answer_as(who))

            async with anyio.create_task_group() as tg:  # both ask the one shared child at once
                tg.start_soon(result, "a", a, a_id)
                tg.start_soon(result, "b", b, b_id)
            # Read beside the host: its writer lands the queued receipt a moment (a batch) later.
            receipts = await _landed(PostgresTurns(host.sql), session_a["session_id"])

    for who, task_id in (("a", a_id), ("b", b_id)):
        structured = results[who]["result"]["structuredContent"]
        assert structured == {"topic": "owls", "answer": {"action": "accept", "content": {"kind": who}}}
        assert [r["params"]["_meta"] for r in asked[who]] == [
            {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
        ]
    assert receipts == [Receipt("test.tasker", "research", True)]


async def _landed(turns: PostgresTurns, session_id: str, within_s: float = 10.0) -> list[Receipt]:
    """Turn 1's receipts once there are any (or `within_s` passed)."""
    deadline = anyio.current_time() + within_s
    while True:
        receipts = await turns.receipts(session_id, 1)
        if receipts or anyio.current_time() > deadline:
            return receipts
        await anyio.sleep(0.05)


def _from(address: str) -> httpx2.AsyncClient:
    """An HTTP client whose every request comes from `address` (a loopback one: its own principal)."""
    return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(local_address=address), timeout=30)


async def _public_session(host: RunningHost, http: httpx2.AsyncClient) -> dict[str, Any]:
    response = await http.post(f"{host.url}/v1/sessions", json={})
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_one_principals_task_flood_is_refused_past_its_share_and_forgets_no_other_task(
    tmp_path: Path, database_url: str
) -> None:
    """The host remembers 8 tasks, 4 of one principal and 3 of one session. The flood, four
    public sessions at 127.0.0.1, tries 12 (past the host's 8, which used to forget the oldest
    task of anyone); the visitor at 127.0.0.2 still gets its tasks' result and cancel."""
    caps = {"session_max_tasks": 3, "principal_max_tasks": 4, "max_tasks": 8}
    slow_task = {"name": "research", "arguments": {"seconds": 30}, "task": {}}
    async with (
        running_host(host_settings(tmp_path, database_url, ["tasker"], **caps)) as host,
        AsyncExitStack() as clients,
    ):
        visitor_http = await clients.enter_async_context(_from("127.0.0.2"))
        visitor, _ = await _legacy(host, await _public_session(host, visitor_http), visitor_http)
        quick = await visitor.request("tools/call", {"name": "research", "arguments": {"topic": "owls"}, "task": {}})
        slow = await visitor.request("tools/call", slow_task)
        flooders = []
        for _ in range(4):
            flood_http = await clients.enter_async_context(_from("127.0.0.1"))
            flooders.append((await _legacy(host, await _public_session(host, flood_http), flood_http))[0])
        answers = [(await flooder.request("tools/call", slow_task))["result"] for _ in range(3) for flooder in flooders]
        result = await visitor.request("tasks/result", {"taskId": quick["result"]["task"]["taskId"]})
        cancelled = await visitor.request("tasks/cancel", {"taskId": slow["result"]["task"]["taskId"]})

    created = [a for a in answers if "task" in a]
    refused = [a["_meta"][ERROR_KEY] for a in answers if "task" not in a]
    assert (len(created), len(refused)) == (4, 8)
    share = re.compile(
        r"this visitor \(its access code, API key or address\) holds as many tasks as one may \(4\); "
        r"retry in \d+ s"
    )
    assert all(r["code"] == Unavailable.code and share.fullmatch(r["message"]) for r in refused), refused
    assert result["result"]["structuredContent"] == {"topic": "owls"}
    assert cancelled["result"]["status"] == "cancelled"


async def test_a_task_the_host_forgets_at_its_ttls_end_is_cancelled_in_its_child(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["tasker"])) as host:
        async with httpx2.AsyncClient(timeout=30) as http:
            client, _ = await _legacy(host, await host.new_session(), http)
            created = await client.request(
                "tools/call", {"name": "research", "arguments": {"seconds": 30}, "task": {"ttl": 300}}
            )
            task_id = created["result"]["task"]["taskId"]
            child = host.child("test.tasker")
            assert child is not None

            def cancelled() -> bool:
                return any(line.text == f"tasks/cancel {task_id}: was working" for line in child.log.recent(50))

            await wait_until(cancelled, within_s=10)  # the child said so on its stderr
            forgotten = await client.request("tasks/get", {"taskId": task_id})
    assert forgotten["error"] == {"code": -32602, "message": "task not found"}


def test_a_full_task_book_refuses_a_new_principal_and_forgets_nobody() -> None:
    """The book's shares alone (no child): 8 places, the last 2 only for a principal holding
    fewer than one session may (2); each refusal says when the first task that would free a
    place ends its ttl."""
    now = [0.0]
    book = TaskBook(per_session=2, per_principal=4, in_all=8, clock=lambda: now[0])
    principals = [Principal("address", f"10.0.0.{n}") for n in range(5)]

    def remember(session: str, principal: Principal, ttl_ms: int = 60_000) -> None:
        with book.place(session, principal) as place:
            place.remember("p", f"{session}-{book.count()}", ttl_ms)

    def refusal(session: str, principal: Principal) -> str:
        with pytest.raises(Unavailable) as refused, book.place(session, principal):
            pass
        return refused.value.message

    for session in ("a1", "a2"):
        remember(session, principals[0], 10_000)
        remember(session, principals[0])
    assert refusal("a3", principals[0]) == (
        "this visitor (its access code, API key or address) holds as many tasks as one may (4); retry in 10 s"
    )
    remember("b1", principals[1])
    remember("b1", principals[1], 20_000)
    assert refusal("b1", principals[1]) == "this session holds as many tasks as it may (2); retry in 20 s"
    now[0] = 5.0
    assert refusal("b2", principals[1]) == "the host holds as many tasks as it may; retry in 5 s"  # the reserve
    remember("c1", principals[2])
    remember("d1", principals[3])
    assert refusal("e1", principals[4]) == "the host holds as many tasks as it may; retry in 5 s"
    assert book.count() == 8
    now[0] = 10.0  # a's first two end their ttl: forgotten, and so room for anyone
    remember("e1", principals[4])
    assert (book.count(), book.count(principal=principals[0]), book.of_session("a1")) == (7, 2, {"p": {"a1-1"}})


async def test_a_2026_session_is_not_offered_a_task_required_tool(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["tasker"])) as host:
        async with host.client(await host.new_session(), "auto") as client:
            names = [t.name for t in (await client.list_tools()).tools]
    assert names == ["plain"]
    assert any("requires MCP tasks" in r.getMessage() for r in caplog.records)


async def test_a_2026_session_calling_a_task_required_tool_by_name_is_refused_unknown(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["tasker"])) as host:
        async with host.client(await host.new_session(), "auto") as client:
            called = await client.call_tool("research", {"topic": "owls"})
            plain = await client.call_tool("plain", {})
    # Not forwarded: the child would have refused a call without a task as a protocol error.
    assert called.is_error
    assert refusal(called) == {
        "code": UnknownTool.code,
        "message": "no tool named 'research' is available in this session",
    }
    assert plain.content == [TextContent(type="text", text="plain")]


@pytest.mark.skipif(not ECOSYSTEM.is_dir(), reason=".cache/ecosystem is missing (scripts/install-ecosystem)")
@pytest.mark.skipif(shutil.which("node") is None, reason="node is missing")
async def test_server_everythings_research_query_runs_as_a_task(tmp_path: Path, database_url: str) -> None:
    # A generous address-space limit: V8 under the default one is issue 14 item 1, not this test's.
    settings = host_settings(tmp_path, database_url, [], child_memory_bytes=16 << 30).model_copy(
        update={"plugins": [ECOSYSTEM]}
    )
    async with running_host(settings) as host, httpx2.AsyncClient(timeout=60) as http:
        client, _ = await _legacy(host, await host.new_session(), http)
        tools = {t["name"]: t for t in (await client.request("tools/list"))["result"]["tools"]}
        assert tools["simulate-research-query"]["execution"]["taskSupport"] == "required"
        created = await client.request(
            "tools/call", {"name": "simulate-research-query", "arguments": {"topic": "owls"}, "task": {"ttl": 60_000}}
        )
        task_id = created["result"]["task"]["taskId"]
        result = (await client.request("tasks/result", {"taskId": task_id}))["result"]
        assert "owls" in result["content"][0]["text"]
        assert (await client.request("tasks/get", {"taskId": task_id}))["result"]["status"] == "completed"


assert PLUGINS.is_dir()


@pytest.mark.skipif(not ECOSYSTEM.is_dir(), reason=".cache/ecosystem is missing (scripts/install-ecosystem)")
@pytest.mark.skipif(shutil.which("node") is None, reason="node is missing")
async def test_server_everythings_ambiguous_research_query_asks_its_visitor(tmp_path: Path, database_url: str) -> None:
    asked: list[dict[str, Any]] = []

    async def clarify(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        return {"action": "accept", "content": {"interpretation": "historical"}}

    settings = host_settings(tmp_path, database_url, [], child_memory_bytes=16 << 30).model_copy(
        update={"plugins": [ECOSYSTEM]}
    )
    async with running_host(settings) as host, httpx2.AsyncClient(timeout=60) as http:
        client, _ = await _legacy(host, await host.new_session(), http, {"elicitation": {}})
        created = await client.request(
            "tools/call",
            {"name": "simulate-research-query", "arguments": {"topic": "owls", "ambiguous": True}, "task": {}},
        )
        task_id = created["result"]["task"]["taskId"]
        result = (await client.answering("tasks/result", {"taskId": task_id}, clarify))["result"]
    assert [(r["method"], r["params"]["_meta"]) for r in asked] == [
        ("elicitation/create", {"io.modelcontextprotocol/related-task": {"taskId": task_id}})
    ]
    assert "# Research Report: owls (historical)" in result["content"][0]["text"]
