"""The direct 2026-07-28 `tools/list` (`visitor.tools_list`) answers exactly what `serve_one`
answers, through a real host, for sessions that list differently; the child's raw list is checked
as the SDK's client checks it (`children.tool_pages`), and a changed list is never served stale.

The same session asks twice: a plain `tools/list` (the direct answer) and the same request with a
`cursor` (declined by the direct answerer, so the SDK's `serve_one` answers it; the host has no
pages and ignores it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import anyio
import mcp.types as types
import pytest
from inline_snapshot import snapshot
from mcp.server.connection import Connection
from pydantic import ValidationError

from mcp_host.children.tool_pages import ToolPages
from mcp_host.visitor.door import VisitorDoor
from mcp_host.visitor.server import SCOPE_KEY
from mcp_host.visitor.tool_search import CALL_TOOL, FIND_TOOLS
from mcp_host.visitor.tools_list import ToolsListAnswer
from tests.hosting import RunningHost, host_settings, modern_request, running_host
from tests.owner_facade.test_door import call, owner_client
from tests.processes import needs_bwrap
from tests.visitor.test_tool_search import _session as session_for_search

pytestmark = pytest.mark.anyio

_PLUGINS = ["echo", "guarded", "dialects", "tasker", "liar", "wont_start", "malformed", "shifty"]
_SERVE_ONE = {"cursor": "any"}  # what the direct answerer declines


async def _list(running: RunningHost, session: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
    body, headers = modern_request("tools/list", params or {})
    headers = {**headers, "Authorization": f"Bearer {session['token']}"}
    answer = await running.http.post(session["mcp_url"], content=json.dumps(body), headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    return dict(answer.json())


async def _direct_and_serve_one(running: RunningHost, session: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The direct answer (twice: the second from the kept serialisation) and serve_one's."""
    direct = await _list(running, session)
    again = await _list(running, session)
    sdk = await _list(running, session, _SERVE_ONE)
    assert again == direct
    return direct, sdk


def _names(answer: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in answer["result"]["tools"]]


async def _approve_all_but(running: RunningHost, held: tuple[str, str]) -> None:
    """Approve every tool the pins await but `held` (capability id, tool name)."""
    pins = running.pins
    assert pins is not None
    for pending in await pins.pending():
        if (pending.plugin_id, pending.tool) != held:
            await pins.approve(pending.plugin_id, pending.tool)


@needs_bwrap
async def test_the_direct_list_is_serve_ones_for_every_kind_of_session(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, _PLUGINS, pin_tools=True)
    async with running_host(settings) as running:
        public = await running.new_session()
        await _list(running, public)  # the pins see every list once
        await _approve_all_but(running, ("test.echo", "die"))
        access, owner = running.access, running.owner_id
        await access.put_role(owner, "guarded", ["test.guarded"])
        code, _ = await access.create_code(owner, "guarded")
        granted = await running.new_session({"code": code})
        await _list(running, granted)
        await _approve_all_but(running, ("test.echo", "die"))
        answers = {
            "public": await _direct_and_serve_one(running, public),
            "granted": await _direct_and_serve_one(running, granted),
        }
        async with owner_client(running) as owner_door:
            failed, _ = await call(owner_door, "host_settings_set", tool_search_threshold=3)
        assert not failed
        with anyio.fail_after(10):  # the door reads the owner's threshold at most once a second
            while _names(await _list(running, public)) != [FIND_TOOLS, CALL_TOOL]:  # noqa: ASYNC110 - no event
                await anyio.sleep(0.1)
        answers["searching"] = await _direct_and_serve_one(running, public)
        async with running.client(public, "auto") as client:
            found = await client.call_tool(FIND_TOOLS, {"query": "echo back some text", "limit": 1})
        assert not found.is_error
        answers["searching, found"] = await _direct_and_serve_one(running, public)

    for case, (direct, sdk) in answers.items():
        assert direct == sdk, case
    assert {case: _names(direct) for case, (direct, _) in answers.items()} == snapshot(
        {
            "public": ["ts_style", "echo", "whoami", "sleep", "lie", "alpha", "shift"],
            "granted": [
                "ts_style",
                "echo",
                "whoami",
                "sleep",
                "guarded_hello",
                "guarded_scope",
                "lie",
                "alpha",
                "shift",
            ],
            "searching": [FIND_TOOLS, CALL_TOOL],
            "searching, found": ["echo", FIND_TOOLS, CALL_TOOL],
        }
    )


@needs_bwrap
async def test_a_changed_child_list_is_listed_at_once(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["shifty"])) as running:
        session = await running.new_session()
        before = await _list(running, session)
        child = running.child("test.shifty")
        assert child is not None
        kept = child.tools
        same = await _list(running, session)
        unchanged = child.tools
        async with running.client(session, "auto") as client:
            await client.call_tool("shift", {})
        after = await _list(running, session)
        sdk = await _list(running, session, _SERVE_ONE)
    assert unchanged is kept  # an equal raw list gives the very same tools: nothing above re-checks it
    assert same == before
    assert (_names(before), _names(after)) == (["alpha", "shift"], ["beta", "shift"])
    assert after == sdk


_PAGES: dict[str, list[dict[str, Any]]] = {
    "sound": [{"tools": [{"name": "a", "inputSchema": {"type": "object"}}], "nextCursor": "2"}, {"tools": []}],
    "schema not an object": [{"tools": [{"name": "a", "inputSchema": "x"}]}],
    "no input schema": [{"tools": [{"name": "a"}]}],
    "name not a string": [{"tools": [{"name": 5, "inputSchema": {"type": "object"}}]}],
    "tools not a list": [{"tools": {"name": "a"}}],
    "negative ttl (floored)": [{"tools": [], "ttlMs": -5, "cacheScope": "private"}],
    "bad annotations": [{"tools": [{"name": "a", "inputSchema": {"type": "object"}, "annotations": []}]}],
}


@pytest.mark.parametrize("case", list(_PAGES))
@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18"])
def test_raw_pages_are_refused_where_the_clients_models_refuse_them(case: str, version: str) -> None:
    pages = _PAGES[case]
    try:
        got: list[types.Tool] | str = list(ToolPages().tools(version, pages))
    except ValidationError:
        got = "refused"
    try:
        expected: list[types.Tool] | str = [
            tool for page in pages for tool in types.ListToolsResult.model_validate(_floored(page)).tools
        ]
    except ValidationError:
        expected = "refused"
    assert got == expected


def _floored(page: dict[str, Any]) -> dict[str, Any]:
    ttl = page.get("ttlMs")
    return {**page, "ttlMs": 0} if isinstance(ttl, int) and ttl < 0 else page


def test_equal_pages_give_the_very_same_tools_and_changed_ones_new_tools() -> None:
    pages = ToolPages()
    first = pages.tools("2025-11-25", [{"tools": [{"name": "a", "inputSchema": {"type": "object"}}]}])
    again = pages.tools("2025-11-25", [{"tools": [{"name": "a", "inputSchema": {"type": "object"}}]}])
    changed = pages.tools("2025-11-25", [{"tools": [{"name": "a", "inputSchema": {"type": "object"}, "title": "A"}]}])
    assert again is first
    assert changed is not first and [t.title for t in changed] == ["A"]


@needs_bwrap
async def test_the_direct_list_carries_the_quota_meta_as_serve_one_does(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["notes"])) as running:
        config = {"notes": {"max_notes": 2}}
        code, _ = await running.access.create_code(running.owner_id, "public", config)
        session = await running.new_session({"code": code})
        direct, sdk = await _direct_and_serve_one(running, session)
    assert direct == sdk
    assert direct["result"]["_meta"]["mcp-host/quota"] == {"notes": {"limit": 2, "used": 0, "remaining": 2}}


_SESSION = session_for_search()
_ENVELOPE = modern_request("tools/list", {})[0]["params"]
_DECLINED = {
    "a cursor": ({SCOPE_KEY: _SESSION}, {**_ENVELOPE, "cursor": "x"}, "2026-07-28"),
    "another param": ({SCOPE_KEY: _SESSION}, {**_ENVELOPE, "other": 1}, "2026-07-28"),
    "no session": ({}, _ENVELOPE, "2026-07-28"),
    "the handshake era": ({SCOPE_KEY: _SESSION}, _ENVELOPE, "2025-11-25"),
}


@pytest.mark.parametrize("case", list(_DECLINED))
async def test_what_serve_one_would_check_differently_is_declined_before_the_door_is_asked(case: str) -> None:
    scope, params, version = _DECLINED[case]
    answer = ToolsListAnswer(cast(VisitorDoor, object()))  # never reached: any use of it would raise
    connection = Connection.from_envelope(version, None, None)
    assert await answer(scope, params, connection) is None
