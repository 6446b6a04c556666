"""The console over plain HTTP against a real host: sign-in, the cookie, CSRF and Origin
refusals, sign-out, the headers, changes landing in the owner door's audit (and the console's
own reads kept off the audit page), a capability's cause, sessions in words, a role edited."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx2
import pytest

from owner_console.pages import PAGES
from owner_console.views import READS
from tests.hosting import BUILTINS, RunningHost, host_fixture
from tests.owner_facade.test_door import call, owner_client, owner_token
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio


async def _forget_cookies(host: RunningHost) -> None:
    # The tests send the cookie themselves: the shared client must keep none between requests.
    async def forget(response: httpx2.Response) -> None:
        host.http.cookies.clear()

    host.http.event_hooks["response"].append(forget)


host = host_fixture(["echo", "guarded"], ready=_forget_cookies)
builtins_host = host_fixture([], name="builtins_host", ready=_forget_cookies, builtin_dir=BUILTINS)
CSRF = re.compile(r'<meta name="csrf-token" content="([0-9a-f]{64})">')


def _cookie(response: httpx2.Response) -> str:
    value = response.headers["set-cookie"].split(";", 1)[0]
    name, _, cookie = value.partition("=")
    assert name == "mcp_host_console"
    return cookie


async def _signed_in(host: RunningHost) -> tuple[dict[str, str], str]:
    """Headers carrying a fresh session's cookie, and its CSRF token (read from a page)."""
    signed = await host.http.post(f"{host.url}/owner/login", data={"token": owner_token(host)})
    headers = {"Cookie": f"mcp_host_console={_cookie(signed)}"}
    page = await host.http.get(f"{host.url}/owner/access", headers=headers)
    found = CSRF.search(page.text)
    assert found is not None
    return headers, found.group(1)


async def test_sign_in_trades_the_owner_token_for_a_strict_cookie(host: RunningHost) -> None:
    anonymous = await host.http.get(f"{host.url}/owner/")
    wrong = await host.http.post(f"{host.url}/owner/login", data={"token": "not-the-token"})
    right = await host.http.post(f"{host.url}/owner/login", data={"token": owner_token(host)})
    headers = {"Cookie": f"mcp_host_console={_cookie(right)}"}
    page = await host.http.get(f"{host.url}/owner/", headers=headers)
    bare = await host.http.get(f"{host.url}/owner")

    assert (anonymous.status_code, anonymous.headers["location"]) == (303, "/owner/login")
    assert wrong.status_code == 401 and "That is not the owner token." in wrong.text
    assert "set-cookie" not in wrong.headers
    assert right.status_code == 303 and right.headers["location"] == "/owner/"
    attributes = right.headers["set-cookie"].split("; ")[1:]
    assert attributes == ["Path=/owner/", "Max-Age=43200", "HttpOnly", "SameSite=Strict"]  # plain http: no Secure
    assert page.status_code == 200 and "test.echo" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'; script-src 'self';")
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "same-origin"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert (bare.status_code, bare.headers["location"]) == (308, "/owner/")


async def test_behind_a_trusted_tls_proxy_the_cookie_is_secure(host: RunningHost) -> None:
    # uvicorn believes X-Forwarded-Proto from loopback (FORWARDED_ALLOW_IPS' default).
    right = await host.http.post(
        f"{host.url}/owner/login", data={"token": owner_token(host)}, headers={"X-Forwarded-Proto": "https"}
    )
    assert right.headers["set-cookie"].endswith("; HttpOnly; SameSite=Strict; Secure")


async def test_a_change_needs_the_sessions_csrf_token_and_our_origin(host: RunningHost) -> None:
    headers, csrf = await _signed_in(host)
    other_headers, other_csrf = await _signed_in(host)
    url = f"{host.url}/owner/codes/create"
    missing = await host.http.post(url, headers=headers, data={"role": "public"})
    another_sessions = await host.http.post(url, headers=headers, data={"role": "public", "csrf": other_csrf})
    foreign = await host.http.post(
        url, headers={**headers, "Origin": "http://evil.example"}, data={"role": "public", "csrf": csrf}
    )
    sibling = await host.http.post(
        url, headers={**headers, "Sec-Fetch-Site": "same-site"}, data={"role": "public", "csrf": csrf}
    )
    misdirected = await host.http.get(f"{host.url}/owner/", headers={**headers, "Host": "evil.example"})
    no_session = await host.http.post(url, data={"role": "public", "csrf": csrf})
    codes_before = (await host.http.get(f"{host.url}/owner/access", headers=headers)).text.count("data-code=")
    made = await host.http.post(url, headers=headers, data={"role": "public", "csrf": csrf})
    by_header = await host.http.post(url, headers={**headers, "X-CSRF-Token": csrf}, data={"role": "public"})

    assert [r.status_code for r in (missing, another_sessions, foreign, sibling, misdirected, no_session)] == [
        403,
        403,
        403,
        403,
        421,
        401,
    ]
    assert "did not come from this console" in missing.text
    assert codes_before == 0
    assert made.status_code == 200 and "shown this once" in made.text
    assert re.search(r'<pre class="secret-text" id="secret-text">[A-Za-z0-9_-]{16,}</pre>', made.text)
    assert by_header.status_code == 200
    assert other_headers != headers


async def test_sign_out_ends_the_session_everywhere(host: RunningHost, tmp_path: Path) -> None:
    headers, csrf = await _signed_in(host)
    out = await host.http.post(f"{host.url}/owner/logout", headers=headers, data={"csrf": csrf})
    after = await host.http.get(f"{host.url}/owner/", headers=headers)
    poll = await host.http.get(f"{host.url}/owner/holds.json", headers=headers)
    assert out.status_code == 303 and out.headers["set-cookie"].startswith("mcp_host_console=; Path=/owner/; Max-Age=0")
    assert (after.status_code, after.headers["location"]) == (303, "/owner/login")
    assert poll.status_code == 401
    rows = await host.sql.fetchval("SELECT count(*) FROM mcp_host.console_sessions")
    assert rows == 0


async def test_every_change_is_an_owner_tool_call_in_the_audit(host: RunningHost) -> None:
    headers, csrf = await _signed_in(host)
    made = await host.http.post(
        f"{host.url}/owner/codes/create", headers=headers, data={"role": "public", "csrf": csrf}
    )
    code_id = re.search(r'data-code="(c_[0-9a-f]+)"', made.text)
    assert code_id is not None
    revoked = await host.http.post(
        f"{host.url}/owner/codes/revoke", headers=headers, data={"code": code_id.group(1), "csrf": csrf}
    )
    bad = await host.http.post(
        f"{host.url}/owner/codes/revoke", headers=headers, data={"code": "c_0000000000000000", "csrf": csrf}
    )
    audit = await host.http.get(f"{host.url}/owner/audit?tool=code&limit=50", headers=headers)
    assert revoked.status_code == 303 and revoked.headers["location"] == "/owner/access?done=revoked"
    assert bad.status_code == 400 and "(unknown)" in bad.text
    outcomes = re.findall(r'<code>(code_\w+)</code></td><td[^>]* class="outcome outcome-(\w+)"', audit.text)
    assert outcomes == [("code_revoke", "unknown"), ("code_revoke", "ok"), ("code_create", "ok")]


@needs_bwrap
async def test_a_connectors_secret_setting_is_never_echoed_back(builtins_host: RunningHost) -> None:
    running = builtins_host
    headers, csrf = await _signed_in(running)
    url = f"{running.url}/owner/connectors"
    page = await running.http.get(url, headers=headers)
    secret = "hunter2-never-shown"
    form = {"csrf": csrf, "connector": "smtp", "host": "127.0.0.1", "port": "1", "password": secret}
    connected = await running.http.post(f"{url}/connect", headers=headers, data=form)
    again = await running.http.get(url, headers=headers)
    _, connections = await _owner_call(running, "connectors_list")
    disconnected = await running.http.post(
        f"{url}/disconnect", headers=headers, data={"csrf": csrf, "category": "mail"}
    )

    assert '<input type="password" id="smtp-password" name="password" autocomplete="new-password">' in page.text
    assert connected.status_code == 200 and "Connected <code>smtp</code>" in connected.text
    assert secret not in connected.text and secret not in again.text
    assert "secrets set: <code>password</code>" in again.text
    assert '<input type="password" id="smtp-password" name="password" autocomplete="new-password">' in again.text
    [smtp] = [c for c in connections["connectors"] if c["id"] == "smtp"]
    assert smtp["connection"]["settings"] == {"host": "127.0.0.1", "port": 1}
    assert smtp["connection"]["secrets_set"] == ["password"]
    assert disconnected.status_code == 303 and disconnected.headers["location"] == "/owner/connectors?done=disconnected"


async def _owner_call(running: RunningHost, name: str) -> tuple[bool, dict[str, Any]]:
    async with owner_client(running) as owner:
        return await call(owner, name)


AUDIT_TOOLS = re.compile(r'<code>(\w+)</code></td><td[^>]* class="outcome ')


async def test_the_audit_page_shows_the_owners_changes_not_the_consoles_reads(host: RunningHost) -> None:
    headers, csrf = await _signed_in(host)
    for path in PAGES:
        assert (await host.http.get(f"{host.url}{path}", headers=headers)).status_code == 200
    await host.http.get(f"{host.url}/owner/holds.json", headers=headers)
    code_form = {"role": "public", "csrf": csrf}
    made = await host.http.post(f"{host.url}/owner/codes/create", headers=headers, data=code_form)
    shown = await host.http.get(f"{host.url}/owner/audit", headers=headers)
    with_reads = await host.http.get(f"{host.url}/owner/audit?reads=on", headers=headers)
    async with owner_client(host) as owner:
        _, trail = await call(owner, "audit_list", limit=500)
    written = {e["tool"] for e in trail["entries"]}

    assert made.status_code == 200
    assert AUDIT_TOOLS.findall(shown.text) == ["code_create"]
    assert 'id="f-reads" name="reads" value="on">' in shown.text  # the toggle, off
    assert written - {"code_create"} <= READS  # every row a page view wrote is one the page hides
    assert len(written) > 5
    assert set(AUDIT_TOOLS.findall(with_reads.text)) == written


async def test_sessions_show_their_subject_and_visitor_as_words(host: RunningHost) -> None:
    async with owner_client(host) as owner:
        _, code = await call(owner, "code_create", role="public")
    coded = await host.new_session({"code": code["code"], "visitor": {"name": "Ada", "email": "ada@example.org"}})
    public = await host.new_session({"visitor": {"name": "Grace <3"}})
    headers, _ = await _signed_in(host)
    page = await host.http.get(f"{host.url}/owner/sessions", headers=headers)
    rows = re.findall(
        r'<tr data-session="(\w+)">.*?<td data-label="Subject" class="subject">(.*?)</td>\s*'
        r'<td data-label="Visitor" class="visitor">(.*?)</td>',
        page.text,
        re.S,
    )

    assert {sid: (subject, visitor) for sid, subject, visitor in rows} == {
        coded["session_id"]: (f"access code {code['id']}", "Ada &lt;ada@example.org&gt;"),
        public["session_id"]: ("", "Grace &lt;3"),
    }


ROLE_URL = "/owner/roles/put"
GREETING, MAX_ITEMS = "role_config:test.guarded:greeting", "role_config:test.guarded:max_items"


async def test_a_role_is_edited_on_the_access_page_capabilities_and_config(host: RunningHost) -> None:
    headers, csrf = await _signed_in(host)
    url = f"{host.url}{ROLE_URL}"
    granted = {"csrf": csrf, "id": "friends", "capabilities": "test.guarded"}
    made = await host.http.post(url, headers=headers, data=granted)
    form = await host.http.get(f"{host.url}/owner/access?role=friends", headers=headers)
    edited = await host.http.post(
        url,
        headers=headers,
        data={**granted, GREETING: "hi there", MAX_ITEMS: "3"},
    )
    _, after_edit = await _owner_call(host, "roles_list")
    refused = await host.http.post(
        url,
        headers=headers,
        data={**granted, GREETING: "typed", MAX_ITEMS: "-1"},
    )
    emptied = await host.http.post(url, headers=headers, data={"csrf": csrf, "id": "friends", GREETING: "unsent"})
    _, after_emptying = await _owner_call(host, "roles_list")

    assert made.status_code == 303 and made.headers["location"] == "/owner/access?done=role"
    assert "Edit role <code>friends</code>" in form.text
    assert '<input type="hidden" name="id" value="friends">' in form.text
    assert re.search(r'name="capabilities" value="test\.guarded" checked>', form.text)
    assert re.search(r'name="capabilities" value="test\.echo">', form.text)  # not granted: unchecked
    assert f'<input id="{GREETING}" name="{GREETING}" value="hello">' in form.text  # its default
    assert edited.status_code == 303
    friends = next(r for r in after_edit["roles"] if r["id"] == "friends")
    assert (friends["capabilities"], friends["config"]) == (
        ["test.guarded"],
        {"test.guarded": {"greeting": "hi there", "max_items": 3}},
    )
    assert refused.status_code == 400 and "max_items" in refused.text
    assert f'<input id="{GREETING}" name="{GREETING}" value="typed">' in refused.text  # as the owner typed it
    assert emptied.status_code == 303
    friends = next(r for r in after_emptying["roles"] if r["id"] == "friends")
    assert (friends["capabilities"], friends["config"]) == ([], {})


@needs_bwrap
async def test_a_capability_that_waits_for_a_connector_says_which(builtins_host: RunningHost) -> None:
    headers, _ = await _signed_in(builtins_host)
    page = await builtins_host.http.get(f"{builtins_host.url}/owner/", headers=headers)
    causes = dict(
        re.findall(r'<tr data-id="([\w.]+)">.*?<td data-label="Cause" class="cause">(.*?)</td>', page.text, re.S)
    )

    assert causes["calendar.book"] == (
        '<a href="/owner/connectors">needs a calendar connector — connect one on Connectors</a>'
    )
    assert causes["mail.send"] == '<a href="/owner/connectors">needs a mail connector — connect one on Connectors</a>'
    assert causes["summarize_conversation"] == "not started yet: it starts when first used"


async def test_the_catalogue_shows_each_plugins_network_and_the_hosts_the_owner_gave_it(host: RunningHost) -> None:
    headers, _ = await _signed_in(host)
    async with owner_client(host) as owner:
        failed, _ = await call(
            owner, "plugin_egress_allow", plugin_id="test.echo", host="db.internal:5432", private=True
        )
        assert not failed
        given = (await host.http.get(f"{host.url}/owner/", headers=headers)).text
        failed, _ = await call(owner, "plugin_egress_remove", plugin_id="test.echo", host="db.internal:5432")
        assert not failed
    none = (await host.http.get(f"{host.url}/owner/", headers=headers)).text

    def network(page: str) -> str:
        row = re.search(r'<tr data-id="test\.echo">.*?</tr>', page, re.S)
        cell = re.search(r'<td data-label="Network" class="egress">(.*?)</td>', row.group(0) if row else "", re.S)
        return " ".join(re.sub(r"<[^>]+>", " ", cell.group(1)).split()) if cell else ""

    assert network(given) == "db.internal:5432 (yours) also at a private address: db.internal"
    assert network(none) == "none ( mcp-host plugin allow test.echo HOST )"
