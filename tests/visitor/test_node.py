"""The parent's side of a node (issue 17, item 2): node grants minted on the owner door and the
node endpoint `/v1/node/mcp`, reached by an SDK client holding the grant's token, as a node
host does: only granted capabilities are listed and callable, each call decided when it is made
(budget spent exactly under concurrency, revoke, the owner's rules and holds), the node's
request id in the parent's audit."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import asyncpg
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_host.errors import DatabaseUnavailable
from mcp_host.visitor import NODE_PATH
from mcp_host.visitor.node import NodeDoor
from mcp_host_kit.contract import REQUEST_ID_KEY
from tests.hosting import RunningHost, host_settings, refusal, running_host
from tests.owner_facade.test_door import call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

HOLD_ID = re.compile(r"h_[0-9a-f]{16}")


@asynccontextmanager
async def _parent(tmp_path: Path, database_url: str) -> AsyncIterator[RunningHost]:
    settings = host_settings(tmp_path / "parent", database_url, ["echo", "vault"], child_start_timeout_s=30.0)
    async with running_host(settings) as running:
        yield running


@asynccontextmanager
async def node_client(url: str, token: str, capability: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    path = NODE_PATH if capability is None else f"{NODE_PATH}/{capability}"
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        async with Client(streamable_http_client(f"{url}{path}", http_client=http), cache=None) as client:
            yield client


async def _grant(owner: Client, *capabilities: str, calls: int = 100, note: str = "ci") -> tuple[str, str]:
    failed, answer = await call(
        owner, "grant_create", capabilities=list(capabilities), budget={"calls": calls}, note=note
    )
    assert not failed, answer
    return answer["token"], answer["grant"]["id"]


async def _echo(node: Client, text: str, request_id: str | None = None) -> dict[str, Any]:
    meta: Any = {REQUEST_ID_KEY: request_id} if request_id else None
    result = await node.call_tool("echo", {"text": text}, meta=meta)
    found = refusal(result)
    return found if found is not None else {"ok": dict(result.structured_content or {})}


async def test_a_node_sees_and_calls_only_what_is_granted(tmp_path: Path, database_url: str) -> None:
    async with _parent(tmp_path, database_url) as parent, owner_client(parent) as owner:
        token, grant_id = await _grant(owner, "test.echo")
        async with node_client(parent.url, token) as node:
            tools = (await node.list_tools()).tools
            echoed = await _echo(node, "hi", "node-req-1")
            peek = refusal(await node.call_tool("peek", {"target": "x"}))
        async with node_client(parent.url, token, "test.vault") as scoped:
            scoped_tools = (await scoped.list_tools()).tools
        _, listed = await call(owner, "grants_list")
        _, trail = await call(owner, "audit_list", limit=50)
    assert sorted(t.name for t in tools) == ["die", "echo", "sleep", "whoami"]
    assert all((t.meta or {}).get("mcp-host/capability") == "test.echo" for t in tools)
    assert echoed["ok"]["text"] == "hi"
    assert peek is not None and peek["code"] == "unknown"
    assert scoped_tools == []
    (shown,) = listed["grants"]
    assert shown["id"] == grant_id and shown["budget"] == {"calls": 100, "used": 1, "remaining": 99}
    assert "token" not in shown
    rows = [r for r in trail["entries"] if r["tool"] == "node_call"]
    assert rows[0]["outcome"] == "ok" and rows[0]["arguments"]["request_id"] == "node-req-1"
    assert rows[0]["arguments"]["grant"] == grant_id


async def test_a_wrong_token_is_refused_at_the_edge(tmp_path: Path, database_url: str) -> None:
    async with _parent(tmp_path, database_url) as parent:
        answer = await parent.http.post(
            f"{parent.url}{NODE_PATH}", json={}, headers={"Authorization": "Bearer mcpn_nothing"}
        )
    assert answer.status_code == 401


async def test_the_budget_is_spent_exactly_under_concurrency(tmp_path: Path, database_url: str) -> None:
    async with _parent(tmp_path, database_url) as parent, owner_client(parent) as owner:
        token, _ = await _grant(owner, "test.echo", calls=3)
        answers: list[dict[str, Any]] = []
        async with node_client(parent.url, token) as node:
            await node.list_tools()

            async def one(n: int) -> None:
                answers.append(await _echo(node, f"call {n}", f"req-{n}"))

            async with anyio.create_task_group() as tg:
                for n in range(10):
                    tg.start_soon(one, n)
            after = await _echo(node, "one more")
        _, listed = await call(owner, "grants_list")
        _, trail = await call(owner, "audit_list", limit=100)
    assert sum("ok" in a for a in answers) == 3
    assert [a for a in answers if "ok" not in a] == [{"code": "denied", "message": "denied"}] * 7
    assert after == {"code": "denied", "message": "denied"}
    assert listed["grants"][0]["budget"]["used"] == 3 and listed["grants"][0]["status"] == "spent"
    denied = [r for r in trail["entries"] if r["tool"] == "node_call" and r["outcome"] == "denied"]
    assert len(denied) == 8 and all("budget" in r["arguments"]["why"] for r in denied)


async def test_revoke_refuses_the_next_call(tmp_path: Path, database_url: str) -> None:
    async with _parent(tmp_path, database_url) as parent, owner_client(parent) as owner:
        token, grant_id = await _grant(owner, "test.echo")
        async with node_client(parent.url, token) as node:
            first = await _echo(node, "before")
            failed, _ = await call(owner, "grant_revoke", id=grant_id)
            assert not failed
            second = await _echo(node, "after", "req-after")
        _, trail = await call(owner, "audit_list", limit=50)
        async with node_client(parent.url, token) as again:
            relisted = (await again.list_tools()).tools
    assert "ok" in first
    assert second == {"code": "denied", "message": "denied"}
    row = next(r for r in trail["entries"] if r["tool"] == "node_call" and r["outcome"] == "denied")
    assert row["arguments"]["why"] == "the grant is revoked" and row["arguments"]["request_id"] == "req-after"
    assert relisted == []


async def test_a_rule_holds_a_node_call_until_the_owner_approves(tmp_path: Path, database_url: str) -> None:
    async with _parent(tmp_path, database_url) as parent, owner_client(parent) as owner:
        failed, answer = await call(
            owner,
            "rules_set",
            rules=[{"when": 'session.kind == "node" && grant.note == "laptop" && tool == "peek"', "effect": "hold"}],
        )
        assert not failed, answer
        token, _ = await _grant(owner, "test.vault", note="laptop", calls=10)
        async with node_client(parent.url, token) as node:
            held = refusal(await node.call_tool("peek", {"target": "x"}))
            assert held is not None and held["code"] == "held", held
            found = HOLD_ID.search(held["message"])
            assert found is not None
            failed, _ = await call(owner, "hold_decide", id=found.group(0), approve=True)
            assert not failed
            ran = await node.call_tool("peek", {"target": "x"})
            again = refusal(await node.call_tool("peek", {"target": "x"}))
            counts = await node.call_tool("calls", {})
        _, listed = await call(owner, "grants_list")
    assert not ran.is_error and ran.structured_content == {"peeked": "x"}
    assert again is not None and again["code"] == "held"
    assert counts.structured_content == {"wipe": 0, "peek": 1}
    assert listed["grants"][0]["budget"]["used"] == 2  # the approved peek and calls; held ones spend nothing


async def test_a_destructive_tool_is_held_by_default_for_a_node(tmp_path: Path, database_url: str) -> None:
    async with _parent(tmp_path, database_url) as parent, owner_client(parent) as owner:
        token, _ = await _grant(owner, "test.vault", calls=10)
        async with node_client(parent.url, token) as node:
            wipe = refusal(await node.call_tool("wipe", {"target": "x"}))
            counts = await node.call_tool("calls", {})
        _, listed = await call(owner, "grants_list")
    assert wipe is not None and wipe["code"] == "held"
    assert counts.structured_content == {"wipe": 0, "peek": 0}
    assert listed["grants"][0]["budget"]["used"] == 1  # the held wipe spent nothing


class _DatabaseAway:
    """Node grants whose database is away (a connection-class failure, as asyncpg raises it)."""

    async def genuine(self, token: str) -> None:
        raise asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation")


async def test_a_database_outage_at_the_node_door_answers_unavailable_like_the_visitor_door(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The node door's boundary is every door's (`errors.at_boundary`): an outage is answered
    `unavailable` with the outage's message and no traceback (the database watch logs it once)."""
    away: Any = _DatabaseAway()
    door = NodeDoor(
        cast(Any, None), cast(Any, None), cast(Any, None), grants=cast(Any, None), node_grants=away, call_timeout_s=5.0
    )
    with caplog.at_level(logging.DEBUG, logger="mcp_host.visitor.node"):
        result = await door.call_tool("token", None, "echo", {"text": "hi"}, None)
    assert refusal(result) == {"code": "unavailable", "message": DatabaseUnavailable().message}
    assert [r.getMessage() for r in caplog.records if r.name == "mcp_host.visitor.node"] == []
