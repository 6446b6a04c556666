"""A node and its parent (issue 17, item 2): two real hosts on loopback, each with its own
database. The node (`parent_url` + `parent_token`, as `serve --parent URL` with
MCP_HOST_PARENT_TOKEN) shows the parent's granted capabilities as remote capabilities of its
own, which its visitors call (per the node's own roles); a capability not granted is unknown
on the node; one request id names the call in both hosts' audits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import fresh_database
from tests.hosting import RunningHost, host_settings, refusal, running_host
from tests.owner_facade.test_door import call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]


@asynccontextmanager
async def parent_and_node(
    tmp_path: Path,
    database_url: str,
    postgres_server: str,
    capabilities: list[str],
    node_plugins: tuple[str, ...] = (),
    calls: int = 50,
    **node_overrides: Any,
) -> AsyncIterator[tuple[RunningHost, RunningHost, Client, str]]:
    """The parent (echo, vault) with a grant of `capabilities`, and a node started with its token
    (and `node_overrides` to its settings)."""
    parent_settings = host_settings(tmp_path / "parent", database_url, ["echo", "vault"], child_start_timeout_s=30.0)
    async with running_host(parent_settings) as parent, owner_client(parent) as owner:
        failed, grant = await call(
            owner, "grant_create", capabilities=capabilities, budget={"calls": calls}, note="node test"
        )
        assert not failed, grant
        async with fresh_database(postgres_server) as node_database:
            node_settings = host_settings(
                tmp_path / "node",
                node_database,
                list(node_plugins),
                parent_url=parent.url,
                parent_token=grant["token"],
                **node_overrides,
            )
            async with running_host(node_settings) as node:
                yield parent, node, owner, grant["grant"]["id"]


async def _visitor_of(node: RunningHost, capabilities: list[str]) -> dict[str, Any]:
    """A public session on the node once the node's owner lets its public role use `capabilities`."""
    async with owner_client(node) as node_owner:
        failed, answer = await call(node_owner, "role_put", id="public", capabilities=capabilities)
        assert not failed, answer
        _, listed = await call(node_owner, "capabilities_list")
    assert {c["id"] for c in listed["capabilities"]} >= set(capabilities)
    lent = {c["id"]: (c["kind"], c["title"]) for c in listed["capabilities"] if c["id"] in capabilities}
    assert lent == dict.fromkeys(capabilities, ("remote", ""))  # the parent's, shown as kind remote
    return await node.new_session()


async def test_a_node_lists_and_calls_a_granted_capability(
    tmp_path: Path, database_url: str, postgres_server: str
) -> None:
    async with parent_and_node(tmp_path, database_url, postgres_server, ["test.echo"]) as (parent, node, owner, grant):
        assert node.loaded is not None
        session = await _visitor_of(node, ["test.echo"])
        async with node.client(session) as visitor:
            names = sorted(t.name for t in (await visitor.list_tools()).tools)
            echoed = await visitor.call_tool("echo", {"text": "from the node"})
            peek = refusal(await visitor.call_tool("peek", {"target": "x"}))
        _, trail = await call(owner, "audit_list", limit=50)
        async with owner_client(node) as node_owner:
            _, node_trail = await call(node_owner, "audit_list", limit=50)
    assert names == ["die", "echo", "sleep", "whoami"]
    assert not echoed.is_error and (echoed.structured_content or {}).get("text") == "from the node"
    assert peek is not None and peek["code"] == "unknown"
    rows = [r for r in trail["entries"] if r["tool"] == "node_call"]
    assert [r["outcome"] for r in rows] == ["ok"] and rows[0]["arguments"]["grant"] == grant
    assert rows[0]["arguments"]["capability"] == "test.echo"
    (sent,) = [r for r in node_trail["entries"] if r["tool"] == "parent_call"]
    assert sent["arguments"] == {
        "capability": "test.echo",
        "tool": "echo",
        "request_id": rows[0]["arguments"]["request_id"],
    }
    assert sent["arguments"]["request_id"].startswith("node-")


async def test_a_node_plugin_calls_the_parent_through_parent_invoke(
    tmp_path: Path, database_url: str, postgres_server: str
) -> None:
    async with parent_and_node(tmp_path, database_url, postgres_server, ["test.echo"], ("asker",)) as (
        parent,
        node,
        owner,
        grant,
    ):
        session = await node.new_session()  # test.asker is acl: always; test.echo is not the public role's
        async with node.client(session) as visitor:
            names = sorted(t.name for t in (await visitor.list_tools()).tools)
            asked = await visitor.call_tool("ask", {"text": "via parent.invoke"})
        _, trail = await call(owner, "audit_list", limit=50)
        async with owner_client(node) as node_owner:
            _, node_trail = await call(node_owner, "audit_list", limit=50)
    assert names == ["ask"]
    assert not asked.is_error, asked
    assert (asked.structured_content or {}).get("text") == "via parent.invoke"
    (row,) = [r for r in trail["entries"] if r["tool"] == "node_call"]
    (sent,) = [r for r in node_trail["entries"] if r["tool"] == "parent_call"]
    assert row["outcome"] == "ok" and row["arguments"]["grant"] == grant
    assert sent["arguments"]["request_id"] == row["arguments"]["request_id"]


async def test_budget_and_revoke_through_the_node(tmp_path: Path, database_url: str, postgres_server: str) -> None:
    """Budget 3: of 10 concurrent calls by the node's visitors, exactly 3 run, the rest are
    refused; after a revoke the next call is refused too. The node's visitor learns only that
    it was denied: the node's own refusal (code `denied`, in `_meta["mcp-host/error"]`), saying
    the parent refused, and nothing of why."""
    async with parent_and_node(tmp_path, database_url, postgres_server, ["test.echo"], calls=3) as (
        parent,
        node,
        owner,
        grant,
    ):
        session = await _visitor_of(node, ["test.echo"])
        results: list[Any] = []
        async with node.client(session) as visitor:
            await visitor.list_tools()

            async def one(n: int) -> None:
                results.append(await visitor.call_tool("echo", {"text": f"call {n}"}))

            async with anyio.create_task_group() as tg:
                for n in range(10):
                    tg.start_soon(one, n)
            failed, _ = await call(owner, "grant_revoke", id=grant)
            assert not failed
            after = await visitor.call_tool("echo", {"text": "after the revoke"})
        _, trail = await call(owner, "audit_list", limit=100)
    ok = [r for r in results if not r.is_error]
    refused = [r for r in results if r.is_error]
    assert len(ok) == 3 and len(refused) == 7
    denied = {"code": "denied", "message": "the parent host refused this call"}
    assert [refusal(r) for r in refused] == [denied] * 7 and refusal(after) == denied
    assert {_text(r) for r in [*refused, after]} == {"denied: the parent host refused this call"}
    rows = [r for r in trail["entries"] if r["tool"] == "node_call"]
    assert sorted(r["outcome"] for r in rows) == ["denied"] * 8 + ["ok"] * 3
    assert rows[0]["arguments"]["why"] == "the grant is revoked"


def _text(result: Any) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_spent_budget_refuses_the_nodes_visitor_with_the_nodes_own_refusal(
    tmp_path: Path, database_url: str, postgres_server: str, mode: str
) -> None:
    """Budget 2, three calls one after another in one era, on a node that pins its tools (as
    `serve` does): the third answer is the node's own refusal, whole, as any refusal of the host
    (defect 8: the parent's bare `denied: denied`, without `_meta["mcp-host/error"]`, when the
    owner's review listed the parent's capability before the node's link to it was complete)."""
    async with parent_and_node(tmp_path, database_url, postgres_server, ["test.echo"], calls=2, pin_tools=True) as (
        _,
        node,
        _,
        _,
    ):
        async with owner_client(node) as node_owner:
            failed, pending = await call(node_owner, "tools_pending")
            assert not failed and ("test.echo", "echo") in {(p["capability"], p["tool"]) for p in pending["pending"]}
            failed, approved = await call(node_owner, "tool_approve", capability="test.echo", tool="echo")
            assert not failed, approved
        session = await _visitor_of(node, ["test.echo"])
        async with node.client(session, mode=mode) as visitor:
            answers = [await visitor.call_tool("echo", {"text": f"call {n}"}) for n in range(3)]
    assert [a.is_error for a in answers] == [False, False, True]
    denied = {"code": "denied", "message": "the parent host refused this call"}
    stamp = {} if mode == "legacy" else {"io.modelcontextprotocol/serverInfo": {"name": "mcp-host", "version": "0.1.0"}}
    assert answers[-1].model_dump(by_alias=True, exclude_none=True) == {
        "_meta": {"mcp-host/error": denied, **stamp},
        "content": [{"type": "text", "text": "denied: the parent host refused this call"}],
        "structuredContent": denied,
        "isError": True,
        "resultType": "complete",
    }
