"""calendar.book's slot picker (issue 30, item 3) through a running host: a visitor session
sees the booking tools naming the app, reads the app as the plugin's file holds it, and the
calls the app makes — `tools/call` on the same session, as the visitor's client forwards them
— list the slots and book one in a real calendar (Radicale on loopback, the builtin `caldav`
connector) with the name and email typed into the app. The claim gate still holds the agent
to what the app booked: a claim is held unless a successful calendar_book, the app's included,
backs it in the same turn. Real host with tool pins on, real sandboxed builtins, real PostgreSQL,
real SDK clients in both eras."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import MCPError

from mcp_host.wire import APP_MIME_TYPE
from tests.apps.support import ERAS, app_bytes, tool_metas, wire
from tests.capabilities.test_calendar_book import _connect, _events, _post, _visitor
from tests.hosting import BUILTINS, RunningHost, host_fixture
from tests.peers import Radicale, running_radicale
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

APP = "ui://calendar.book/slot-picker.html"
HTML = BUILTINS / "calendar_book" / "slot_picker.html"
NAMING_TOOLS = ["calendar_book", "calendar_list_slots"]
NO_NETWORK: dict[str, list[str]] = {
    "connectDomains": [],
    "resourceDomains": [],
    "frameDomains": [],
    "baseUriDomains": [],
}
# What the app sends (slot_picker.html: listSlots and book), as the client forwards it.
LIST_CALL: dict[str, Any] = {}
BOOKER = {"name": "Grace Hopper", "email": "grace@navy.example.org", "topic": "Compilers"}

# Builtins are approved with their apps the first time the host sees them (policy/pins.py):
# with pins on, the app is served only because it is the approved one.
host = host_fixture([], builtin_dir=BUILTINS, child_start_timeout_s=60.0, pin_tools=True)


@pytest.fixture(scope="module")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Radicale]:
    with running_radicale(tmp_path_factory.mktemp("radicale")) as server:
        yield server


async def app_book(client: Any) -> tuple[dict[str, Any], types.CallToolResult]:
    """What the app does: list the slots, then book the first with the form's values."""
    listed = await client.call_tool("calendar_list_slots", LIST_CALL)
    assert not listed.is_error, listed.structured_content
    slots = dict(listed.structured_content or {})
    booked = await client.call_tool("calendar_book", {"start": slots["slots"][0]["start"], **BOOKER})
    return slots, booked


@needs_bwrap
@pytest.mark.parametrize("mode", ERAS)
async def test_a_visitor_reads_the_slot_picker_and_books_through_it(
    host: RunningHost, radicale: Radicale, mode: str
) -> None:
    url = await _connect(host, radicale)
    async with host.client(await _visitor(host), mode) as client:
        metas = tool_metas((await client.list_tools()).tools)
        listed = wire((await client.list_resources()).resources)
        read = await client.read_resource(APP)
        slots, booked = await app_book(client)
    async with host.client(await host.new_session(), mode) as stranger:  # a role that does not grant it
        with pytest.raises(MCPError) as refused:
            await stranger.read_resource(APP)

    assert refused.value.error.message == f"no resource {APP!r} is available in this session"
    assert {name: metas[name] for name in NAMING_TOOLS} == {name: {"ui": {"resourceUri": APP}} for name in NAMING_TOOLS}
    assert [(r["uri"], r["mimeType"]) for r in listed if r["uri"].startswith("ui://")] == [(APP, APP_MIME_TYPE)]
    (content,) = read.contents
    assert isinstance(content, types.TextResourceContents)
    assert (content.uri, content.mime_type) == (APP, APP_MIME_TYPE)
    assert content.text.encode("utf-8") == HTML.read_bytes()
    assert content.meta == {"ui": {"csp": NO_NETWORK, "prefersBorder": True}}
    assert len(app_bytes(read)) == 1
    start = slots["slots"][0]["start"]
    assert not booked.is_error, booked.structured_content
    assert (booked.structured_content or {})["booking"]["start"] == start
    assert _events(radicale, url) == [(f"Meeting with {BOOKER['name']}: {BOOKER['topic']}", start)]


@needs_bwrap
async def test_the_claim_gate_holds_the_agent_until_the_app_has_booked(host: RunningHost, radicale: Radicale) -> None:
    await _connect(host, radicale)
    session = await _visitor(host)
    claim = {"text": "You're booked for the first slot."}
    async with host.client(session) as client:
        opened = [await _post(host, session, "/turns", {"message": "Show me the free slots"})]
        early = await _post(host, session, "/turns/1/answer", claim)  # nothing booked yet
        opened.append(await _post(host, session, "/turns", {"message": "(books in the app)"}))
        rendered = await client.read_resource(APP)  # the client renders the app, which books
        listed, booked = await app_book(client)
        backed = await _post(host, session, "/turns/2/answer", claim)
        opened.append(await _post(host, session, "/turns", {"message": "And one more?"}))
        stale = await _post(host, session, "/turns/3/answer", claim)  # a receipt backs its own turn only

    assert opened == [{"turn": 1}, {"turn": 2}, {"turn": 3}]
    assert listed["slots"] and not booked.is_error
    assert [c.uri for c in rendered.contents] == [APP]
    held = {
        "ok": False,
        "violations": [{"capability": "calendar.book", "tool": "calendar_book", "phrase": "you're booked"}],
    }
    assert (early, backed, stale) == (held, {"ok": True}, held)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: it checks the app's script")
async def test_the_apps_inline_script_parses(tmp_path: Path) -> None:
    scripts = re.findall(r"<script>(.*?)</script>", HTML.read_text(encoding="utf-8"), re.DOTALL)
    (script,) = scripts
    (tmp_path / "app.js").write_text(script, encoding="utf-8")
    with anyio.fail_after(60):
        done = await anyio.run_process(["node", "--check", str(tmp_path / "app.js")], check=False)

    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_the_app_is_self_contained() -> None:
    """No script, style, font, image or frame from anywhere: its csp declares no domain."""
    html = HTML.read_text(encoding="utf-8")

    assert re.findall(r"""\b(?:src|href)\s*=|@import|url\(|https?://|fetch\(|XMLHttpRequest|WebSocket""", html) == []
    assert all(f'id="{name}"' in html for name in ("name", "email", "topic", "book", "status"))
    assert all(f'<label for="{name}"' in html for name in ("name", "email", "topic"))
