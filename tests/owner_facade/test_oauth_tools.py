"""The owner door's OAuth slice on a real host (real PostgreSQL, a real SDK client): the clients
let in by OAuth listed (the owner door's and the visitor sessions'), one revoked by id and
audited, a grant not the owner's refused as unknown, and `session_end` ending a session's grants."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_host.oauth import owner_subject
from owner_facade import OWNER_PATH
from tests.hosting import host_settings, running_host
from tests.oauth.conftest import granted
from tests.owner_facade.test_door import audit, call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

UNKNOWN = "unknown"


async def test_the_owner_lists_and_revokes_the_clients_let_in_by_oauth(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, [])) as running:
        oauth, owner_id = running.oauth, running.owner_id
        door = f"{running.url}{OWNER_PATH}"
        session = await running.new_session()
        at_door = await granted(oauth, owner_subject(owner_id), resource=door, client_name="Cursor")
        visiting = await granted(oauth, session["session_id"], client_name="Claude")
        strangers = await granted(oauth, "owner:somebody-else", resource=door)
        async with owner_client(running) as client:
            listed = await call(client, "oauth_grants_list")
            cursor_id = next(g["id"] for g in listed[1]["grants"] if g["client_name"] == "Cursor")
            revoked = await call(client, "oauth_grant_revoke", id=cursor_id)
            stranger = await oauth.load_access_token(strangers.access_token)
            assert stranger is not None
            refused = await call(client, "oauth_grant_revoke", id=stranger.grant_id)
            trail = await audit(client)
        door_token = await oauth.load_access_token(at_door.access_token)
        visitor_token = await oauth.load_access_token(visiting.access_token)

    assert listed[0] is False
    shown = [(g["client_name"], g["subject_kind"], g["session_id"], g["resource"]) for g in listed[1]["grants"]]
    assert sorted(shown) == [
        ("Claude", "visitor", session["session_id"], f"{running.url}/mcp"),
        ("Cursor", "owner", None, door),
    ]
    assert revoked[0] is False and revoked[1]["grant"]["id"] == cursor_id
    assert revoked[1]["grant"]["revoked_at"] is not None and revoked[1]["grant"]["expires_at"] is None
    assert refused == (True, {"code": UNKNOWN, "message": f"no OAuth grant of yours has the id {stranger.grant_id!r}"})
    assert (door_token, visitor_token is not None) == (None, True)
    assert trail[-3:] == [("oauth_grants_list", "ok"), ("oauth_grant_revoke", "ok"), ("oauth_grant_revoke", UNKNOWN)]


async def test_ending_a_visitor_session_ends_the_grants_of_its_clients(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, [])) as running:
        oauth = running.oauth
        ended, kept = await running.new_session(), await running.new_session()
        ended_grant = await granted(oauth, ended["session_id"])
        kept_grant = await granted(oauth, kept["session_id"])
        async with owner_client(running) as client:
            answer = await call(client, "session_end", session_id=ended["session_id"])
            listed = await call(client, "oauth_grants_list")
        alive = [await oauth.load_access_token(g.access_token) is not None for g in (ended_grant, kept_grant)]

    assert answer == (False, {"ended": True})
    assert alive == [False, True]
    assert [(g["session_id"], g["revoked_at"] is None) for g in listed[1]["grants"]] == [
        (kept["session_id"], True),
        (ended["session_id"], False),
    ]
