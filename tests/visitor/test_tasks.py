"""MCP tasks through a visitor session (`visitor.tasks`).

Real host, the sandboxed `tasker` child (raw JSON-RPC: the SDK's server has no tasks), a
2025-11-25 client speaking raw JSON-RPC over streamable HTTP (the SDK's client cannot receive a
`CreateTaskResult`): create, poll, result, cancel, list, and another session's task is `not
found`. A 2026-07-28 session (the SDK's client) is not offered the task-required tool.
Last, server-everything's `simulate-research-query` when the ecosystem is installed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.hosting import PLUGINS, host_settings, running_host

pytestmark = pytest.mark.anyio

ECOSYSTEM = Path(__file__).resolve().parents[2] / ".cache" / "ecosystem" / "plugins" / "everything"


class Legacy:
    """A 2025-11-25 client of one visitor session, in raw JSON-RPC."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self._http, self._url, self._next = http, url, 0
        self._headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

    async def open(self) -> dict[str, Any]:
        init = await self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        )
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self._headers["mcp-protocol-version"] = "2025-11-25"
        return dict(init["result"])

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next += 1
        return await self._post({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params or {}})

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


async def _legacy(host: Any, session: dict[str, Any], http: httpx2.AsyncClient) -> tuple[Legacy, dict[str, Any]]:
    http.headers["authorization"] = f"Bearer {session['token']}"
    client = Legacy(http, session["mcp_url"])
    return client, await client.open()


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


async def test_a_2026_session_is_not_offered_a_task_required_tool(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["tasker"])) as host:
        async with host.client(await host.new_session(), "auto") as client:
            names = [t.name for t in (await client.list_tools()).tools]
    assert names == ["plain"]
    assert any("requires MCP tasks" in r.getMessage() for r in caplog.records)


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
