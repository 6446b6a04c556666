"""What the owner sees of each OAuth grant and how grants end, on real PostgreSQL: the owner's
list (owner door and visitor sessions), revoking one, rotating the owner token (the serve and
the CLI wiring), a session's end, and the sweep's backstop for ended sessions."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import pytest
from pydantic import SecretStr

from mcp_host.access import Owner
from mcp_host.access.sessions import PostgresSessionStore, Visitor, public_role
from mcp_host.app.cli import _rotate_owner_token
from mcp_host.app.shared import owner_store
from mcp_host.oauth import AuthorizationServer, OAuthGrant, owner_subject
from mcp_host.settings import Settings
from mcp_host.store import PgPool

from .conftest import DOOR, OWNER_DOOR, DecidingDesk, client_auth, refresh, register, signed_in

pytestmark = pytest.mark.anyio


async def _visitor_session(pool: PgPool, owner_id: str, visitor: Visitor | None = None) -> str:
    session, _ = await PostgresSessionStore(pool).open(
        owner_id=owner_id, mode="public", visitor=visitor, role=public_role()
    )
    return session.id


async def _at_owner_door(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> tuple[Owner, dict[str, Any], dict[str, Any]]:
    """The owner, a client, and that client's tokens at the owner door."""
    owner = await owner_store(pool).ensure_single_owner()
    client = await register(http)
    tokens = await signed_in(http, server, desk, client, subject=owner_subject(owner.id), resource=OWNER_DOOR)
    return owner, client, tokens


def _recent(at: datetime | None) -> bool:
    return at is not None and abs(at - datetime.now(at.tzinfo)) < timedelta(minutes=1)


async def test_the_owner_sees_each_clients_grant_door_subject_and_times(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    owner = await owner_store(pool).ensure_single_owner()
    session_id = await _visitor_session(pool, owner.id, Visitor(name="Ada"))
    cursor = await register(http, client_name="Cursor")
    claude = await register(http, client_name="Claude")
    await signed_in(http, server, desk, cursor, subject=owner_subject(owner.id), resource=OWNER_DOOR)
    visitor = await signed_in(http, server, desk, claude, subject=session_id)
    assert (await refresh(http, claude, visitor["refresh_token"])).status_code == 200
    await signed_in(http, server, desk, claude, subject="owner:somebody-else", resource=OWNER_DOOR)

    listed = await server.grants.of_owner(owner.id)
    of_session = await server.grants.of_session(session_id)

    shown = [(g.client_name, g.client_id, g.resource, g.subject_kind, g.session_id, g.visitor_name) for g in listed]
    assert shown == [
        ("Claude", claude["client_id"], DOOR, "visitor", session_id, "Ada"),
        ("Cursor", cursor["client_id"], OWNER_DOOR, "owner", None, None),
    ]
    visitor_grant, owner_grant = listed
    assert of_session == [visitor_grant]
    assert _recent(visitor_grant.refreshed_at) and owner_grant.refreshed_at is None
    assert all(_recent(g.created_at) and g.revoked_at is None for g in listed)
    assert all(g.expires_at is not None and g.expires_at - g.created_at > timedelta(days=29) for g in listed)


async def test_revoking_a_grant_ends_its_tokens_and_lists_it_last_as_revoked(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    owner, client, first = await _at_owner_door(pool, http, server, desk)
    await signed_in(http, server, desk, client, subject=owner_subject(owner.id), resource=OWNER_DOOR)
    other = await signed_in(http, server, desk, client, subject="owner:somebody-else", resource=OWNER_DOOR)
    first_grant = await _grant_of(server, first["access_token"])
    others_grant = await _grant_of(server, other["access_token"])

    revoked = await server.grants.revoke_owned(owner.id, first_grant)
    again = await server.grants.revoke_owned(owner.id, first_grant)
    not_ours = await server.grants.revoke_owned(owner.id, others_grant)
    listed = await server.grants.of_owner(owner.id)

    assert revoked is not None and revoked.id == first_grant
    assert _recent(revoked.revoked_at) and revoked.expires_at is None
    assert again == revoked  # revoked once: the same moment
    assert not_ours is None
    assert [(g.id == first_grant, g.revoked_at is None) for g in listed] == [(False, True), (True, False)]
    assert await server.load_access_token(first["access_token"]) is None
    assert (await refresh(http, client, first["refresh_token"])).status_code == 400
    assert await server.load_access_token(other["access_token"]) is not None


async def _grant_of(server: AuthorizationServer, access_token: str) -> str:
    found = await server.load_access_token(access_token)
    assert found is not None
    return found.grant_id


async def test_rotating_the_owner_token_ends_every_owner_grant_and_no_visitor_grant(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    owner, client, door = await _at_owner_door(pool, http, server, desk)
    visitor = await signed_in(http, server, desk, client, subject=await _visitor_session(pool, owner.id))

    await owner_store(pool).issue_token(owner.id)

    assert await server.load_access_token(door["access_token"]) is None
    assert (await refresh(http, client, door["refresh_token"])).status_code == 400
    assert await server.load_access_token(visitor["access_token"]) is not None
    assert [(g.subject_kind, g.revoked_at is None) for g in await server.grants.of_owner(owner.id)] == [
        ("visitor", True),
        ("owner", False),
    ]


async def test_mcp_host_owner_token_rotate_ends_the_owner_grants(
    pool: PgPool,
    database_url: str,
    tmp_path: Path,
    http: httpx2.AsyncClient,
    server: AuthorizationServer,
    desk: DecidingDesk,
) -> None:
    owner, client, door = await _at_owner_door(pool, http, server, desk)
    settings = Settings(data_dir=tmp_path / "data", database_url=SecretStr(database_url))

    written = await _rotate_owner_token(settings)  # what `mcp-host owner token --rotate` runs

    assert written.read_text().strip()
    assert await server.load_access_token(door["access_token"]) is None


async def test_a_rotation_that_fails_ends_no_grant(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    owner, client, door = await _at_owner_door(pool, http, server, desk)
    await pool.execute("ALTER TABLE mcp_host.owner_tokens ADD CONSTRAINT no_more CHECK (false) NOT VALID")

    with pytest.raises(asyncpg.CheckViolationError):
        await owner_store(pool).issue_token(owner.id)

    assert await server.load_access_token(door["access_token"]) is not None


async def test_the_sweep_ends_the_grants_of_ended_and_vanished_sessions(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    owner = await owner_store(pool).ensure_single_owner()
    sessions = PostgresSessionStore(pool)
    ended, live = await _visitor_session(pool, owner.id), await _visitor_session(pool, owner.id)
    client = await register(http)
    tokens = {
        subject: (await signed_in(http, server, desk, client, subject=subject))["access_token"]
        for subject in (ended, live, "0" * 32, owner_subject(owner.id))  # "0"*32: a session that is gone
    }
    await sessions.end(ended)

    assert await server.sweep() == 2
    alive = {subject: await server.load_access_token(token) is not None for subject, token in tokens.items()}
    assert alive == {ended: False, live: True, "0" * 32: False, owner_subject(owner.id): True}


async def test_revoke_subject_ends_that_sessions_grants_only(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    owner = await owner_store(pool).ensure_single_owner()
    one, two = await _visitor_session(pool, owner.id), await _visitor_session(pool, owner.id)
    client = await register(http)
    first = await signed_in(http, server, desk, client, subject=one)
    second = await signed_in(http, server, desk, client, subject=two)

    assert await server.revoke_subject(one) == 1
    assert await server.revoke_subject(one) == 0
    assert await server.load_access_token(first["access_token"]) is None
    assert await server.load_access_token(second["access_token"]) is not None
    gone = await http.post("/revoke", data={"token": first["refresh_token"], **client_auth(client)})
    assert gone.status_code == 200
    assert [g.revoked_at is not None for g in await server.grants.of_session(one)] == [True]
    assert all(isinstance(g, OAuthGrant) for g in await server.grants.of_session(two))
