"""The owner's console in a real headless Chromium against a real host: sign-in, approving a
pending tool, deciding a hold while a visitor's call waits, an access code created and
revoked, CSRF attempts refused, hostile plugin and visitor text rendered inert; every page at a
phone's width. Each page's screenshot goes to `$MCP_HOST_ARTIFACTS` (default
`.artifacts/console/`, not committed): see `tests/owner_console/browser.py`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.hosting import RunningHost, free_port, host_fixture, host_settings, running_host
from tests.owner_console.browser import PHONE, Browser, needs_chromium
from tests.owner_facade.test_door import call, owner_client, owner_token
from tests.policy.test_pins import _morph_plugin
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_chromium, needs_bwrap]

host = host_fixture(["vault", "hostile", "notes"], pin_tools=True)

HOSTILE_ARGUMENT = '</pre><img src=x onerror="window.__pwned=9"><script>alert(10)</script>'
# What no page may hold: an element a hostile text would have made, or a script not our own.
INJECTED = "img, svg, iframe, object, embed, a[href^='javascript'], [onerror], [onload]"
OWN_SCRIPTS = "return [...document.scripts].map(s => s.getAttribute('src'))"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with Browser.window() as browser:
        yield browser


@pytest.fixture
def browser(chromium: Browser, host: RunningHost) -> Browser:
    chromium.base_url = host.url
    return chromium


async def _sign_in(browser: Browser, host: RunningHost) -> None:
    await browser.get("/owner/login")
    await browser.sign_out_everything()
    await browser.get("/owner/login")
    await browser.fill("#token", owner_token(host))
    await browser.click("#login button")
    await browser.wait_for("#catalogue")


async def _inert(browser: Browser) -> None:
    """Nothing a hostile text held became markup or ran."""
    assert await browser.count(INJECTED) == 0
    assert await browser.script(OWN_SCRIPTS) == ["/owner/static/console.js"]
    assert await browser.script("return window.__pwned === undefined") is True
    assert await browser.alert_open() is False


async def _approve(browser: Browser, tool: str) -> None:
    await browser.get("/owner/tools")
    await browser.click(f"section[data-tool='{tool}'] form.approve button")
    await browser.wait_for("p.done")


async def test_sign_in_takes_the_owner_token_and_refuses_another(browser: Browser, host: RunningHost) -> None:
    await browser.get("/owner/")
    redirected = await browser.path()
    await browser.fill("#token", "not-the-owner-token")
    await browser.click("#login button")
    refused = await browser.text("p.error")
    await browser.screenshot("01-sign-in-refused")
    await browser.fill("#token", owner_token(host))
    await browser.click("#login button")
    await browser.wait_for("#catalogue")
    cookies = await browser.run(browser.driver.get_cookies)
    readable = await browser.script("return document.cookie")
    await browser.screenshot("02-catalogue")
    listed = await browser.text("#catalogue")

    assert redirected == "/owner/login"
    assert refused == "That is not the owner token."
    [cookie] = cookies
    assert (cookie["name"], cookie["path"], cookie["httpOnly"], cookie["sameSite"]) == (
        "mcp_host_console",
        "/owner/",
        True,
        "Strict",
    )
    assert readable == ""  # HttpOnly: no script reads it
    assert "test.vault" in listed and "notes" in listed


async def test_approving_a_pending_tool_shows_it_to_visitors(browser: Browser, host: RunningHost) -> None:
    session = await host.new_session()
    async with host.client(session) as visitor:
        before = [t.name for t in (await visitor.list_tools()).tools]
    await _sign_in(browser, host)
    await browser.get("/owner/tools")
    await browser.wait_for("section[data-tool='test.vault/peek'] table.diff")
    live_side = await browser.text("section[data-tool='test.vault/peek'] table.diff")
    await browser.screenshot("03-pending-tools")
    await _approve(browser, "test.vault/peek")
    done = await browser.text("p.done")
    still_pending = await browser.count("section[data-tool='test.vault/peek']")
    async with host.client(await host.new_session()) as visitor:
        after = [t.name for t in (await visitor.list_tools()).tools]
    async with owner_client(host) as owner:
        _, trail = await call(owner, "audit_list", limit=20)

    assert "peek" not in before
    assert '"name": "peek"' in live_side and "readOnlyHint" in live_side
    assert done == "Tool approved: visitors who may use it see it now."
    assert still_pending == 0
    assert after == ["peek"]
    approved = [e["arguments"] for e in trail["entries"] if e["tool"] == "tool_approve" and e["outcome"] == "ok"]
    assert [(a["capability"], a["tool"]) for a in approved] == [("test.vault", "peek")]


async def test_a_hold_decided_in_the_console_lets_the_waiting_visitors_repeat_run(
    browser: Browser, host: RunningHost
) -> None:
    await _sign_in(browser, host)
    await _approve(browser, "test.vault/wipe")
    await browser.get("/owner/holds")
    empty = await browser.count("tr[data-hold]")
    session = await host.new_session()
    async with host.client(session) as visitor:
        held = await visitor.call_tool("wipe", {"target": HOSTILE_ARGUMENT})
        await browser.wait_for("tr[data-hold]")  # the page shows it by itself (console.js)
        shown = await browser.text("tr[data-hold] pre.arguments")
        await _inert(browser)
        await browser.screenshot("04-holds-live")
        await browser.click("tr[data-hold] button[value='approve']")
        await browser.wait_for("p.done")
        decided = await browser.text("p.done")
        repeated = await visitor.call_tool("wipe", {"target": HOSTILE_ARGUMENT})

    assert empty == 0
    assert held.is_error and (held.structured_content or {})["code"] == "held"
    assert json.dumps(HOSTILE_ARGUMENT) in shown  # the visitor's words, as text (JSON)
    assert decided == "Decision recorded."
    assert not repeated.is_error and repeated.structured_content == {"wiped": HOSTILE_ARGUMENT}


async def test_an_access_code_is_shown_once_and_dead_once_revoked(browser: Browser, host: RunningHost) -> None:
    await _sign_in(browser, host)
    await browser.get("/owner/access")
    await browser.click("#code-create button")
    await browser.wait_for("#secret-text")
    code = await browser.text("#secret-text")
    code_id = await browser.script("return document.querySelector('#codes tr[data-code]').dataset.code")
    await browser.screenshot("05-access-code-created")
    opened = await host.http.post(f"{host.url}/v1/sessions", json={"code": code})
    await browser.get("/owner/access")
    shown_again = await browser.count("#secret-text")
    await browser.click(f"tr[data-code='{code_id}'] button")
    await browser.wait_for("p.done")
    status = await browser.text(f"tr[data-code='{code_id}'] td.status")
    await browser.screenshot("06-access-code-revoked")
    refused = await host.http.post(f"{host.url}/v1/sessions", json={"code": code})

    assert len(code) >= 16
    assert opened.status_code == 201
    assert shown_again == 0
    assert status == "revoked"
    assert refused.status_code == 401


class _Attacker(BaseHTTPRequestHandler):
    """Another origin's page that posts a form to the console as soon as it loads."""

    target = ""

    def do_GET(self) -> None:
        page = (
            f'<form id="f" method="post" action="{self.target}/owner/codes/create">'
            '<input name="role" value="public"><input name="csrf" value="guessed"></form>'
            '<script>document.getElementById("f").submit()</script>'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def attacker(host: RunningHost) -> Iterator[str]:
    port = free_port()
    handler = type("Attacker", (_Attacker,), {"target": host.url})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_form_from_another_origin_or_without_the_token_is_refused(
    browser: Browser, host: RunningHost, attacker: str
) -> None:
    await _sign_in(browser, host)
    await browser.get(attacker)  # its script posts to the console with the browser's cookie
    await browser.run(lambda: None)
    await browser.wait_for("body")
    cross_origin = await browser.text()
    landed = await browser.path()
    await browser.screenshot("07-csrf-cross-origin-refused")
    await browser.get("/owner/access")
    await browser.script("document.querySelector('#code-create input[name=csrf]').remove()")
    await browser.click("#code-create button")
    await browser.wait_for("p.error")
    no_token = await browser.text("p.error")
    await browser.screenshot("08-csrf-missing-token-refused")
    async with owner_client(host) as owner:
        _, codes = await call(owner, "codes_list")

    assert landed == "/owner/codes/create"
    assert "requests from this Origin are not accepted" in cross_origin
    assert no_token == "This form is stale or did not come from this console; reload the page."
    assert codes == {"codes": []}


async def test_hostile_plugin_text_is_shown_as_text(browser: Browser, host: RunningHost) -> None:
    await _sign_in(browser, host)
    catalogue = await browser.text("tr[data-id='test.hostile']")
    await _inert(browser)
    await browser.get("/owner/tools")
    await browser.wait_for("section[data-tool='test.hostile/lookup']")
    tool = await browser.text("section[data-tool='test.hostile/lookup'] table.diff")
    await _inert(browser)
    await browser.screenshot("09-hostile-tool-pending")

    assert '<script>window.__pwned=2;alert(2)</script>"><img src=x onerror=alert(3)>' in catalogue
    assert 'Hostile "><img src=x onerror="window.__pwned=1">' in catalogue
    assert "{{ 7*7 }}" in catalogue  # no template ran over it either
    assert "<svg onload=alert(7)></svg>" in tool


async def test_every_other_page_renders(browser: Browser, host: RunningHost) -> None:
    session = await host.new_session()
    await _sign_in(browser, host)
    await browser.get("/owner/sessions")
    sessions = await browser.text("#sessions")
    await browser.screenshot("10-sessions")
    await browser.get("/owner/connectors")
    await browser.screenshot("11-connectors")
    await browser.get("/owner/config?capability=notes&scope=owner")
    await browser.fill("#cfg-page_size", "1000")
    await browser.click("#config-set button")
    await browser.wait_for("tr.invalid")
    invalid = await browser.text("tr[data-key='page_size'] .field-error")
    await browser.screenshot("12-config-invalid")
    await browser.fill("#cfg-page_size", "25")
    await browser.click("#config-set button")
    await browser.wait_for("p.done")
    saved = await browser.run(
        lambda: browser.driver.find_element("css selector", "#cfg-page_size").get_attribute("value")
    )
    await browser.screenshot("13-config-saved")
    await browser.get("/owner/rules")
    await browser.fill("#rules-text", '[{"name": "night", "when": "true", "effect": "hold"}]')
    await browser.click("#rules-set button")
    await browser.wait_for("p.done")
    rules = await browser.text("#rules")
    await browser.screenshot("14-rules-and-grants")
    await browser.get("/owner/audit?tool=config")
    audit = await browser.text("#audit")
    await browser.screenshot("15-audit-filtered")
    await browser.get("/owner/holds")
    await browser.screenshot("16-holds-empty")
    # Eleven minutes later (the page's clock moved on): the poll pauses until a key is pressed.
    await browser.script("const now = Date.now; Date.now = () => now() + 11 * 60 * 1000;")
    await browser.wait_for_text("#holds-state", "Paused while you are away")
    paused = await browser.text("#holds-state")
    await browser.script("document.dispatchEvent(new KeyboardEvent('keydown'))")
    resumed = await browser.text("#holds-state")

    assert session["session_id"] in sessions
    assert invalid == "page_size: 1000 is above max (100)"
    assert saved == "25"
    assert "night" in rules and "hold" in rules
    assert "config_set" in audit and "rules_set" not in audit
    assert paused == "Paused while you are away; touch the page or press a key to resume."
    assert resumed == ""


async def test_a_changed_definition_shows_approved_and_live_side_by_side(
    chromium: Browser, tmp_path: Path, database_url: str
) -> None:
    # The morphed schema lives in the child's memory: its start gets all the time it takes.
    settings = host_settings(tmp_path, database_url, [], pin_tools=True, child_start_timeout_s=60.0)
    settings = settings.model_copy(update={"plugins": [_morph_plugin(tmp_path / "morph")]})
    async with running_host(settings) as host:
        chromium.base_url = host.url
        pins = host.pins
        assert pins is not None
        async with host.client(await host.new_session()) as visitor:
            before = [t.name for t in (await visitor.list_tools()).tools]
            await pins.approve("test.morph", "target")
            await pins.approve("test.morph", "morph")
            approved = [t.name for t in (await visitor.list_tools()).tools]
            morphed = await visitor.call_tool("morph", {})
            hidden = [t.name for t in (await visitor.list_tools()).tools]
            await _sign_in(chromium, host)
            await chromium.get("/owner/tools")
            section = "section[data-tool='test.morph/target']"
            await chromium.wait_for(section)
            tag = await chromium.text(f"{section} h2 .tag")
            added = await chromium.text(f"{section} tr.diff-added")
            same = await chromium.count(f"{section} tr.diff-same")
            await chromium.screenshot("17-changed-tool-diff")
            async with chromium.phone():
                unified = await chromium.script(DIFF_CELLS, section)
                await chromium.screenshot("phone-17-changed-tool-diff")
            await chromium.click(f"{section} form.approve button")
            await chromium.wait_for("p.done")
            shown = [t.name for t in (await visitor.list_tools()).tools]

    assert (before, approved, morphed.is_error) == ([], ["target", "morph"], False)
    assert hidden == ["morph"]
    assert tag == "changed"
    assert '"to": {' in added  # the new property, on the live side only
    assert same > 5  # the rest of the definition lines up unchanged
    # On a phone, one unified diff: an unchanged or new line once (never beside itself or an empty
    # twin), a changed line as its approved (−) and its live (+) self.
    assert sorted(set(map(tuple, unified))) == [("added", 1), ("changed", 2), ("same", 1)]
    assert shown == ["target", "morph"]


PAGES = {
    "01-catalogue": "/owner/",
    "02-pending-tools": "/owner/tools",
    "03-holds": "/owner/holds",
    "04-sessions": "/owner/sessions",
    "05-access": "/owner/access?role=public",
    "06-connectors": "/owner/connectors",
    "07-config": "/owner/config?capability=notes&scope=owner",
    "08-audit": "/owner/audit",
    "09-rules": "/owner/rules",
    "10-clients": "/owner/clients",
}
# What a phone shows of a page: whether it scrolls sideways, how tall the nav is, and every
# button or link-button cut off by the screen's edge or too narrow for its own text.
LAYOUT = """
const shown = e => e.getClientRects().length > 0;
const cut = [...document.querySelectorAll('button')].filter(shown).filter(b => {
  const r = b.getBoundingClientRect();
  return r.left < 0 || r.right > window.innerWidth || b.scrollWidth > b.clientWidth;
}).map(b => b.textContent.trim());
return {
  width: window.innerWidth,
  sideways: document.scrollingElement.scrollWidth > window.innerWidth,
  nav_height: Math.round(document.querySelector('header nav').getBoundingClientRect().height),
  cut: cut,
};
"""
# Each diff row's visible cells: a unified diff shows a line once, a changed line twice (- and +).
DIFF_CELLS = """
return [...document.querySelectorAll(arguments[0] + ' table.diff tbody tr')].map(row => [
  row.className.replace('diff-', ''), [...row.cells].filter(c => c.getClientRects().length > 0).length,
]);
"""
TAPPABLE = """
return [...document.querySelectorAll(arguments[0])].map(b => {
  const r = b.getBoundingClientRect();
  const whole = r.left >= 0 && r.right <= window.innerWidth && b.scrollWidth <= b.clientWidth;
  return [b.textContent.trim(), whole, r.height >= 44];
});
"""
NAV_MAX_PX = 56
"""One line of tappable links (the nav scrolls sideways on a phone; nine links wrapped to seven lines)."""


async def test_every_page_reads_and_taps_on_a_phone(browser: Browser, host: RunningHost) -> None:
    async with owner_client(host) as owner:
        await call(owner, "tools_pending")  # waits for the review at start: wipe is seen
        await call(owner, "tool_approve", capability="test.vault", tool="wipe")
        _, code = await call(owner, "code_create", role="public")
    session = await host.new_session({"code": code["code"], "visitor": {"name": "Ada", "email": "ada@example.org"}})
    layouts: dict[str, Any] = {}
    async with host.client(session) as visitor:
        held = await visitor.call_tool("wipe", {"target": "a-long-target-" * 12})
        await _sign_in(browser, host)
        async with browser.phone():
            for name, path in PAGES.items():
                await browser.get(path)
                layouts[name] = await browser.script(LAYOUT)
                await browser.screenshot(f"phone-{name}")
                if name == "02-pending-tools":
                    diff = await browser.script(DIFF_CELLS, "section[data-tool='test.vault/peek']")
                    approve = await browser.script(TAPPABLE, "form.approve button")
                if name == "03-holds":
                    decide = await browser.script(TAPPABLE, "tr[data-hold] button")
        for name, path in PAGES.items():
            await browser.get(path)
            await browser.screenshot(f"desktop-{name}")
        async with browser.phone():
            await browser.get("/owner/holds")
            await browser.click("tr[data-hold] button[value='deny']")
            await browser.wait_for("p.done")
            denied = await browser.text("p.done")
            left = await browser.count("tr[data-hold]")

    assert held.is_error and (held.structured_content or {})["code"] == "held"
    fitting = {"width": PHONE[0], "sideways": False, "cut": []}
    assert {n: {k: v for k, v in shown.items() if k != "nav_height"} for n, shown in layouts.items()} == dict.fromkeys(
        PAGES, fitting
    )
    assert {n: shown["nav_height"] <= NAV_MAX_PX for n, shown in layouts.items()} == dict.fromkeys(PAGES, True)
    assert set(map(tuple, diff)) == {("added", 1)}  # a new tool: each line once, never beside an empty twin
    assert approve and all(whole and tall for _, whole, tall in approve)
    assert decide == [["Approve", True, True], ["Deny", True, True]]
    assert (denied, left) == ("Decision recorded.", 0)
