"""The console's connected-clients page over plain HTTP against a real host: every client let in
by OAuth shown (the owner door's and a visitor session's), revoked by its button (an owner tool
call, audited; the client's token refused at once), the revoke refused without the CSRF token,
a stranger's grant refused as unknown; and in a real Chromium, the page read and a client
revoked by a click."""

from __future__ import annotations

import re

import pytest

from mcp_host.oauth import owner_subject
from owner_facade import OWNER_PATH
from tests.hosting import RunningHost, host_fixture
from tests.oauth.conftest import granted
from tests.owner_console.browser import Browser, needs_chromium
from tests.owner_console.test_browser import _sign_in
from tests.owner_console.test_http import _forget_cookies, _signed_in
from tests.owner_facade.test_door import audit, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

host = host_fixture([], ready=_forget_cookies)
GRANT_ROW = re.compile(r'<tr data-grant="([0-9a-f]{32})" class="(live|revoked)">')


async def _two_clients(host: RunningHost) -> tuple[str, str]:
    """A client at the owner door (Cursor) and one of a visitor session (Claude): their access tokens."""
    oauth = host.oauth
    session = await host.new_session({"visitor": {"name": "Ada"}})
    door = await granted(oauth, owner_subject(host.owner_id), resource=f"{host.url}{OWNER_PATH}", client_name="Cursor")
    visiting = await granted(oauth, session["session_id"], client_name="Claude <b>Desktop</b>")
    return door.access_token, visiting.access_token


async def test_the_clients_page_shows_each_client_and_revokes_one_by_its_button(host: RunningHost) -> None:
    door_token, visitor_token = await _two_clients(host)
    grant = await host.oauth.load_access_token(door_token)
    assert grant is not None
    headers, csrf = await _signed_in(host)
    page = await host.http.get(f"{host.url}/owner/clients", headers=headers)
    stale = await host.http.post(f"{host.url}/owner/clients/revoke", headers=headers, data={"id": grant.grant_id})
    revoked = await host.http.post(
        f"{host.url}/owner/clients/revoke", headers=headers, data={"id": grant.grant_id, "csrf": csrf}
    )
    after = await host.http.get(f"{host.url}{revoked.headers['location']}", headers=headers)
    unknown = await host.http.post(
        f"{host.url}/owner/clients/revoke", headers=headers, data={"id": "0" * 32, "csrf": csrf}
    )
    async with owner_client(host) as owner:
        trail = await audit(owner)

    assert page.status_code == 200
    assert sorted(state for _, state in GRANT_ROW.findall(page.text)) == ["live", "live"]
    assert "Cursor" in page.text and "Claude &lt;b&gt;Desktop&lt;/b&gt;" in page.text  # a client's name is text
    assert 'action="/owner/clients/revoke"' in page.text
    assert "Ada, session <code>" in page.text  # whom a visitor's client stands for
    assert stale.status_code == 403
    assert (revoked.status_code, revoked.headers["location"]) == (303, "/owner/clients?done=revoked")
    assert "Revoked." in after.text
    assert dict(GRANT_ROW.findall(after.text))[grant.grant_id] == "revoked"
    assert unknown.status_code == 400 and "no OAuth grant of yours has the id" in unknown.text
    assert await host.oauth.load_access_token(door_token) is None
    assert await host.oauth.load_access_token(visitor_token) is not None
    assert ("oauth_grant_revoke", "ok") in trail and ("oauth_grant_revoke", "unknown") in trail


@needs_chromium
async def test_in_chromium_the_owner_revokes_a_client_with_a_click(host: RunningHost) -> None:
    door_token, visitor_token = await _two_clients(host)
    grant = await host.oauth.load_access_token(visitor_token)
    assert grant is not None
    with Browser.window() as browser:
        browser.base_url = host.url
        await _sign_in(browser, host)
        await browser.get("/owner/clients")
        before = await browser.count("#clients tr.live")
        await browser.screenshot("clients-before-revoke")
        await browser.click(f"tr[data-grant='{grant.grant_id}'] button")
        await browser.wait_for("p.done")
        done = await browser.text("p.done")
        after = (await browser.count("#clients tr.live"), await browser.count("#clients tr.revoked"))
        await browser.screenshot("clients-after-revoke")

    assert (before, done, after) == (2, "Revoked.", (1, 1))
    assert await host.oauth.load_access_token(visitor_token) is None
    assert await host.oauth.load_access_token(door_token) is not None
