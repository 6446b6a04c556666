"""The official TypeScript SDK's client auth provider signs in to the host's doors headlessly
(issue 28, "Proof with clients nobody here wrote"): discovery from the door's 401, dynamic
registration as a public client, PKCE, the front desk's form filled by the headless browser
it opens, the code on its loopback redirect URI, tokens; then it lists the tools and calls one.

Three clients: `@modelcontextprotocol/sdk` 1.32.2 (speaks 2025-11-25 only) and
`@modelcontextprotocol/client` 2.3.1 in its two modes (legacy: 2025-11-25; auto: it probes
and speaks 2026-07-28 with this host), at the visitor URL `/mcp` with an access code and as a
public visitor, and at the owner door with the owner token. The script: js/sign_in.mjs.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from owner_facade import OWNER_PATH
from tests.ecosystem.support import owner_call, owner_client, owner_token
from tests.hosting import RunningHost, host_fixture
from tests.oauth.headless import DeskAnswers
from tests.oauth.proof_clients import TYPESCRIPT, Desk, access_code, missing_typescript, session_of, typescript_sign_in
from tests.processes import needs_bwrap

pytestmark = [
    pytest.mark.anyio,
    needs_bwrap,
    pytest.mark.skipif(missing_typescript() is not None, reason=str(missing_typescript())),
]

host = host_fixture(["echo"], scope="module")

ECHO = [{"name": "echo", "arguments": {"text": "through the desk"}}]


def _signed_in_through_the_desk(answer: dict[str, Any], desk: Desk, running: RunningHost, asked: list[str]) -> None:
    """One authorize URL opened, the desk's form asking `asked`, the code and `iss` back on the
    client's loopback redirect URI, and a refresh token kept."""
    (opened,) = answer["opened"]
    assert opened.startswith(f"{running.url}/authorize?")
    (visit,) = desk.visits()
    assert "error" not in visit, visit
    page = "/owner/consent" if "owner_token" in asked else "/oauth/desk"  # the owner's under the console's cookie path
    assert visit["visited"][1].startswith(f"{running.url}{page}?request=")
    assert [name for name in ("name", "email", "code", "owner_token") if name in visit["form"]["fields"]] == asked
    assert visit["callback_status"] == 200
    assert set(answer["callback"]) >= {"code", "iss"} and answer["callback"]["iss"] == running.url
    assert answer["client"]["token_endpoint_auth_method"] == "none" and answer["hasRefreshToken"]


@pytest.mark.parametrize("sdk", TYPESCRIPT)
@pytest.mark.parametrize("with_code", [True, False], ids=["with-code", "public"])
async def test_the_typescript_sdk_signs_in_at_the_visitor_url_and_calls_a_tool(
    host: RunningHost, tmp_path: Any, sdk: str, with_code: bool
) -> None:
    package, version = TYPESCRIPT[sdk]
    name = f"TS visitor {secrets.token_hex(3)}"
    code = await access_code(host, "friends") if with_code else None
    desk = Desk.in_folder(tmp_path)

    answer = await typescript_sign_in(
        package, f"{host.url}/mcp", ECHO, desk, DeskAnswers(name=name, email="ts@example.org", code=code)
    )

    _signed_in_through_the_desk(answer, desk, host, asked=["name", "email", "code"])
    assert answer["protocolVersion"] == version
    assert "echo" in answer["tools"]
    (call,) = answer["calls"]
    assert call["result"]["structuredContent"] == {"text": "through the desk"}, call
    session = await session_of(host, name)
    assert (session["role"], session["visitor"]["email"]) == ("friends" if with_code else "public", "ts@example.org")


@pytest.mark.parametrize("sdk", TYPESCRIPT)
async def test_the_typescript_sdk_signs_in_at_the_owner_door_with_the_owner_token(
    host: RunningHost, tmp_path: Any, sdk: str
) -> None:
    package, version = TYPESCRIPT[sdk]
    desk = Desk.in_folder(tmp_path)
    calls = [{"name": "roles_list", "arguments": {}}]

    answer = await typescript_sign_in(
        package, f"{host.url}{OWNER_PATH}", calls, desk, DeskAnswers(owner_token=owner_token(host))
    )

    _signed_in_through_the_desk(answer, desk, host, asked=["owner_token"])
    assert answer["protocolVersion"] == version
    assert {"roles_list", "code_create", "sessions_list"} <= set(answer["tools"])
    (call,) = answer["calls"]
    assert not call["result"].get("isError") and "roles" in call["result"]["structuredContent"], call


async def test_the_typescript_sdk_is_told_access_denied_when_the_person_declines(
    host: RunningHost, tmp_path: Any
) -> None:
    package, _ = TYPESCRIPT["client-2.x-auto"]
    desk = Desk.in_folder(tmp_path)

    answer = await typescript_sign_in(package, f"{host.url}/mcp", ECHO, desk, DeskAnswers(decision="deny"))

    assert "tools" not in answer  # it never got a token
    assert (answer["callback"]["error"], answer["callback"]["iss"]) == ("access_denied", host.url)
    assert "code" not in answer["callback"]


async def test_a_wrong_access_code_at_the_desk_sends_the_client_nothing(host: RunningHost, tmp_path: Any) -> None:
    package, _ = TYPESCRIPT["client-2.x-auto"]
    desk = Desk.in_folder(tmp_path)
    name = f"TS wrong code {secrets.token_hex(3)}"

    answer = await typescript_sign_in(package, f"{host.url}/mcp", ECHO, desk, DeskAnswers(name=name, code="not-a-code"))

    assert "tools" not in answer and answer["callback"] == {"error": "the browser program exited 1"}
    (visit,) = desk.visits()
    assert visit["error"].startswith("DeskError: the desk answered 4"), visit  # its page again, with the error
    async with owner_client(host) as owner:
        _, listed = await owner_call(owner, "sessions_list")
    assert all((s.get("visitor") or {}).get("name") != name for s in listed["sessions"])  # no session opened
