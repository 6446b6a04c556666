"""Claude Code (`@anthropic-ai/claude-code`, pinned by scripts/install-oauth-clients) adds the
host by its URL and signs in through the front desk (issue 28, "Proof with clients nobody here
wrote"), with a throwaway HOME and nothing but loopback: no Anthropic account or API key.

`claude mcp add --transport http NAME URL`; `claude mcp list` shows it as needing
authentication (the door's 401 and its metadata); `claude mcp login NAME` registers, opens
the authorize URL with `$BROWSER` (the headless browser, which fills the desk's form) and
takes the code on its loopback callback; `claude mcp list` then shows it Connected. Claude Code
2.1.332 refuses `mcp login` off a terminal ("this isn't an interactive terminal"), so it runs
on a pseudo-terminal (`script`).
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from owner_facade import OWNER_PATH
from tests.ecosystem.support import owner_token
from tests.hosting import RunningHost, host_fixture
from tests.oauth.headless import DeskAnswers
from tests.oauth.proof_clients import ClaudeCode, Desk, access_code, missing_claude_code, session_of
from tests.processes import needs_bwrap

pytestmark = [
    pytest.mark.anyio,
    needs_bwrap,
    pytest.mark.skipif(missing_claude_code() is not None, reason=str(missing_claude_code())),
]


async def _echo_started(running: RunningHost) -> None:
    """The echo child up before Claude Code asks: `claude mcp list` gives a server's tools/list
    5 s, hard-coded, and a child's first start on a loaded machine can take longer (the list
    then says "Connected · tools fetch failed"). Echo is one shared instance for all sessions."""
    async with running.client(await running.new_session()) as visitor:
        await visitor.call_tool("echo", {"text": "warm"})


# Offered client ID metadata documents, Claude Code names its own at claude.ai, which a host with
# only loopback cannot fetch: these hosts offer none, as an offline host should
# (`MCP_HOST_OAUTH_CLIENT_DOCUMENTS=false`), and Claude Code registers (RFC 7591).
host = host_fixture(["echo"], scope="module", ready=_echo_started, oauth_client_documents=False)
offering_documents = host_fixture(["echo"], name="offering_documents")


def _claude(tmp_path: Path) -> ClaudeCode:
    home = tmp_path / "home"
    home.mkdir()
    return ClaudeCode(home, Desk.in_folder(tmp_path / "desk"))


@pytest.mark.parametrize("with_code", [True, False], ids=["with-code", "public"])
async def test_claude_code_adds_the_visitor_url_signs_in_and_connects(
    host: RunningHost, tmp_path: Path, with_code: bool
) -> None:
    claude = _claude(tmp_path)
    name = f"Claude visitor {secrets.token_hex(3)}"
    answers = DeskAnswers(name=name, code=await access_code(host, "friends") if with_code else None)

    await claude.run("mcp", "add", "--transport", "http", "host", f"{host.url}/mcp")
    before = await claude.run("mcp", "list")
    signed_in = await claude.run("mcp", "login", "host", answers=answers, terminal=True)
    after = await claude.run("mcp", "list")

    assert f"host: {host.url}/mcp (HTTP) - ! Needs authentication" in before, before
    assert 'Authenticated with "host"' in signed_in, signed_in
    assert f"host: {host.url}/mcp (HTTP) - ✔ Connected" in after, after
    (visit,) = claude.desk.visits()
    assert "error" not in visit and visit["callback_status"] == 200, visit
    assert visit["visited"][0].startswith(f"{host.url}/authorize?")
    assert visit["landed"].startswith("http://localhost:")  # Claude Code's loopback callback
    assert (await session_of(host, name))["role"] == ("friends" if with_code else "public")


async def test_claude_code_signs_in_at_the_owner_door_with_the_owner_token(host: RunningHost, tmp_path: Path) -> None:
    claude = _claude(tmp_path)

    await claude.run("mcp", "add", "--transport", "http", "owner", f"{host.url}{OWNER_PATH}")
    before = await claude.run("mcp", "list")
    await claude.run("mcp", "login", "owner", answers=DeskAnswers(owner_token=owner_token(host)), terminal=True)
    after = await claude.run("mcp", "list")

    assert "owner: " in before and "Needs authentication" in before, before
    assert f"owner: {host.url}{OWNER_PATH} (HTTP) - ✔ Connected" in after, after
    (visit,) = claude.desk.visits()
    assert list(visit["form"]["fields"]) == ["request", "owner_token"], visit


async def test_offered_client_documents_claude_code_names_its_own_and_an_offline_host_refuses_it(
    offering_documents: RunningHost, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Why the other tests' hosts offer no documents: offered them, Claude Code signs in as the
    client its claude.ai document describes (no registration), and a host that cannot reach
    the internet refuses that client, saying why; the sign-in does not end (killed after 20 s)."""
    claude = _claude(tmp_path)
    await claude.run("mcp", "add", "--transport", "http", "host", f"{offering_documents.url}/mcp")
    with caplog.at_level(logging.WARNING, "mcp_host.oauth.client_documents"), pytest.raises(TimeoutError):
        await claude.run("mcp", "login", "host", answers=DeskAnswers(), terminal=True, within_s=20)

    (visit,) = claude.desk.visits()
    (client_id,) = parse_qs(urlsplit(visit["url"]).query)["client_id"]
    assert client_id.startswith("https://claude.ai/"), visit
    assert "error" in visit, visit  # /authorize refused the client: no desk page
    refused = [r.getMessage() for r in caplog.records if client_id in r.getMessage()]
    assert refused and "could not be fetched" in refused[0], refused
