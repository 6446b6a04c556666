"""The authorization server's behaviours through the SDK's own handlers (in process, real
PostgreSQL): codes, PKCE, redirect URIs, resources, rotation, replay, revocation, storage."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import asyncpg
import httpx2
import pytest
from starlette.applications import Starlette

from mcp_host.edge import FailureThrottle, ThrottleLimits
from mcp_host.oauth import AuthorizationServer, DoorTokenVerifier, Lifetimes, digest, oauth_routes
from mcp_host.store import PgPool, SecretBox

from .conftest import (
    DOOR,
    ISSUER,
    OWNER_DOOR,
    REDIRECT,
    DecidingDesk,
    authorize,
    client_auth,
    code_for,
    pkce,
    query,
    redeem,
    refresh,
    register,
    signed_in,
)

pytestmark = pytest.mark.anyio


async def _at_most_one_wins_then_the_grant_is_revoked(
    server: AuthorizationServer, call: Callable[[], Awaitable[httpx2.Response]]
) -> None:
    """`call` twice at once: one may win before the other revokes the grant, or lose it to the
    revocation midway; either way no token of the grant works after."""
    answers: list[httpx2.Response] = []

    async def one() -> None:
        answers.append(await call())

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        tg.start_soon(one)
    assert sorted(a.status_code for a in answers) in ([200, 400], [400, 400])
    for winner in (a.json() for a in answers if a.status_code == 200):
        assert await server.load_access_token(winner["access_token"]) is None


async def _error(response: httpx2.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    return {"error": response.json()["error"]}


async def test_a_sign_in_gives_tokens_bound_to_the_door_and_the_subject(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    tokens = await signed_in(http, server, desk, client, subject="session-42")
    assert sorted(tokens) == ["access_token", "expires_in", "refresh_token", "token_type"]
    assert (tokens["token_type"], tokens["expires_in"]) == ("Bearer", 900)
    found = await server.load_access_token(tokens["access_token"])
    assert found is not None
    assert (found.client_id, found.subject, found.resource, found.claims) == (
        client["client_id"],
        "session-42",
        DOOR,
        {"iss": ISSUER},
    )
    assert desk.waiting[0].client_name == "Test client"
    assert (desk.waiting[0].resource, desk.waiting[0].scopes) == (DOOR, ())


async def test_a_token_for_one_door_is_refused_at_another(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    access = (await signed_in(http, server, desk, client))["access_token"]
    assert await DoorTokenVerifier(server, DOOR).verify_token(access) is not None
    assert await DoorTokenVerifier(server, OWNER_DOOR).verify_token(access) is None
    owner_access = (await signed_in(http, server, desk, client, resource=OWNER_DOOR))["access_token"]
    assert await DoorTokenVerifier(server, OWNER_DOOR).verify_token(owner_access) is not None
    assert await DoorTokenVerifier(server, DOOR).verify_token(owner_access) is None


async def test_the_approval_brings_back_the_code_the_state_and_the_issuer(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    response = await authorize(http, client, pkce()[1], state="xyz")
    assert (response.status_code, response.headers["location"]) == (
        302,
        f"https://desk.test/decide?request={desk.waiting[0].request_id}",
    )
    back = await server.approve(desk.waiting[0].request_id, "session-1")
    assert back is not None and back.startswith(REDIRECT + "?")
    assert sorted(query(back).items())[1:] == [("iss", ISSUER), ("state", "xyz")]
    assert await server.approve(desk.waiting[0].request_id, "session-1") is None  # decided once


async def test_a_denied_request_answers_access_denied_with_state_and_issuer(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    await authorize(http, client, pkce()[1])
    back = await server.deny(desk.waiting[0].request_id)
    assert back is not None
    assert query(back) == {"error": "access_denied", "state": "st-1", "iss": ISSUER}
    assert await server.approve(desk.waiting[0].request_id, "session-1") is None


async def test_a_code_is_used_once_and_shown_again_revokes_its_grant(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    verifier, challenge = pkce()
    code = await code_for(http, server, desk, client, challenge)
    first = await redeem(http, client, code, verifier)
    assert first.status_code == 200
    assert await _error(await redeem(http, client, code, verifier)) == {"error": "invalid_grant"}
    assert await server.load_access_token(first.json()["access_token"]) is None
    assert await _error(await refresh(http, client, first.json()["refresh_token"])) == {"error": "invalid_grant"}


async def test_a_code_verifier_that_does_not_match_is_refused(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    verifier, challenge = pkce()
    code = await code_for(http, server, desk, client, challenge)
    assert await _error(await redeem(http, client, code, pkce()[0])) == {"error": "invalid_grant"}
    assert (await redeem(http, client, code, verifier)).status_code == 200  # the refusal spent nothing


async def test_pkce_plain_is_refused_with_an_error_redirect_that_names_the_issuer(
    http: httpx2.AsyncClient, desk: DecidingDesk
) -> None:
    client = await register(http)
    response = await authorize(http, client, "a" * 43, code_challenge_method="plain")
    assert response.status_code == 302
    assert {key: value for key, value in query(response.headers["location"]).items() if key != "error_description"} == {
        "error": "invalid_request",
        "state": "st-1",
        "iss": ISSUER,
    }
    assert desk.waiting == []


@pytest.mark.parametrize("challenge", ["", "a" * 42, "a" * 44, "a" * 42 + "="])
async def test_a_code_challenge_that_is_not_s256_shaped_is_refused(
    http: httpx2.AsyncClient, desk: DecidingDesk, challenge: str
) -> None:
    client = await register(http)
    response = await authorize(http, client, challenge)
    assert query(response.headers["location"])["error"] == "invalid_request"
    assert desk.waiting == []


async def test_a_redirect_uri_the_client_did_not_register_is_refused_without_a_redirect(
    http: httpx2.AsyncClient, desk: DecidingDesk
) -> None:
    client = await register(http)
    for other in ("http://127.0.0.1:5173/callback/", "http://127.0.0.1:5174/callback", "https://evil.example/cb"):
        response = await authorize(http, client, pkce()[1], redirect_uri=other)
        assert (response.status_code, response.json()["error"]) == (400, "invalid_request"), other
    assert desk.waiting == []


async def test_a_redirect_uri_that_differs_at_the_token_endpoint_is_refused(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http, redirect_uris=[REDIRECT, "http://127.0.0.1:5174/callback"])
    verifier, challenge = pkce()
    code = await code_for(http, server, desk, client, challenge)
    response = await redeem(http, client, code, verifier, redirect_uri="http://127.0.0.1:5174/callback")
    assert await _error(response) == {"error": "invalid_request"}


async def test_authorize_needs_an_explicit_redirect_uri(http: httpx2.AsyncClient, desk: DecidingDesk) -> None:
    client = await register(http)
    response = await authorize(http, client, pkce()[1], redirect_uri=None)
    assert query(response.headers["location"])["error"] == "invalid_request"
    assert desk.waiting == []


@pytest.mark.parametrize("resource", ["http://127.0.0.1:8931/mcp/other", "https://elsewhere.example/mcp", None])
async def test_a_resource_that_is_not_a_door_is_refused(
    http: httpx2.AsyncClient, desk: DecidingDesk, resource: str | None
) -> None:
    client = await register(http)
    response = await authorize(http, client, pkce()[1], resource=resource)
    found = query(response.headers["location"])
    assert (found["error"], found["state"], found["iss"]) == ("invalid_target", "st-1", ISSUER)
    assert desk.waiting == []


async def test_a_refresh_rotates_both_tokens_and_keeps_the_subject_and_the_door(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    first = await signed_in(http, server, desk, client, subject="session-7")
    response = await refresh(http, client, first["refresh_token"])
    assert response.status_code == 200, response.text
    second = response.json()
    assert second["access_token"] != first["access_token"]
    assert second["refresh_token"] != first["refresh_token"]
    assert await server.load_access_token(first["access_token"]) is None
    found = await server.load_access_token(second["access_token"])
    assert found is not None and (found.subject, found.resource) == ("session-7", DOOR)
    third = await refresh(http, client, second["refresh_token"])
    assert third.status_code == 200


async def test_a_replayed_refresh_token_revokes_the_whole_grant(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    first = await signed_in(http, server, desk, client)
    second = (await refresh(http, client, first["refresh_token"])).json()
    assert await _error(await refresh(http, client, first["refresh_token"])) == {"error": "invalid_grant"}
    assert await server.load_access_token(second["access_token"]) is None
    assert await _error(await refresh(http, client, second["refresh_token"])) == {"error": "invalid_grant"}
    other = await signed_in(http, server, desk, client, subject="session-2")  # other grants live on
    assert await server.load_access_token(other["access_token"]) is not None


@pytest.mark.parametrize("which", ["access_token", "refresh_token"])
async def test_revoking_either_token_ends_both(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk, which: str
) -> None:
    client = await register(http)
    tokens = await signed_in(http, server, desk, client)
    response = await http.post("/revoke", data={"token": tokens[which], **client_auth(client)})
    assert response.status_code == 200
    assert await server.load_access_token(tokens["access_token"]) is None
    assert await _error(await refresh(http, client, tokens["refresh_token"])) == {"error": "invalid_grant"}


async def test_another_client_cannot_revoke_or_redeem_a_clients_tokens(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client, other = await register(http), await register(http)
    tokens = await signed_in(http, server, desk, client)
    assert (await http.post("/revoke", data={"token": tokens["access_token"], **client_auth(other)})).status_code == 200
    assert await server.load_access_token(tokens["access_token"]) is not None
    assert await _error(await refresh(http, other, tokens["refresh_token"])) == {"error": "invalid_grant"}
    assert (await refresh(http, client, tokens["refresh_token"])).status_code == 200


async def test_ending_a_subject_ends_its_grants(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    mine = [await signed_in(http, server, desk, client, subject="session-9") for _ in range(2)]
    theirs = await signed_in(http, server, desk, client, subject="session-10")
    assert await server.revoke_subject("session-9") == 2
    assert [await server.load_access_token(t["access_token"]) for t in mine] == [None, None]
    assert await server.load_access_token(theirs["access_token"]) is not None


async def test_an_expired_code_is_refused(pool: PgPool, http: httpx2.AsyncClient, desk: DecidingDesk) -> None:
    client = await register(http)
    hasty = AuthorizationServer(
        pool, SecretBox(secrets.token_bytes(32)), issuer=ISSUER, resources=[DOOR], desk=desk,
        lifetimes=Lifetimes(code_s=0.0),
    )  # fmt: skip
    verifier, challenge = pkce()
    code = await code_for(http, hasty, desk, client, challenge)
    assert await _error(await redeem(http, client, code, verifier)) == {"error": "invalid_grant"}


async def test_the_tables_hold_digests_never_a_code_a_token_or_a_secret(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    assert client["client_secret"]
    verifier, challenge = pkce()
    code = await code_for(http, server, desk, client, challenge)
    first = (await redeem(http, client, code, verifier)).json()
    second = (await refresh(http, client, first["refresh_token"])).json()
    await authorize(http, client, challenge)  # one request left waiting
    shown = [code, desk.waiting[-1].request_id, client["client_secret"], *first.values(), *second.values()]
    shown = [value for value in shown if isinstance(value, str) and len(value) > 20]
    assert len(shown) == 7
    stored = " ".join(
        [
            str(await pool.fetchval(f"SELECT coalesce(string_agg(t::text, ' '), '') FROM mcp_host.{table} t"))
            for table in ("oauth_clients", "oauth_requests", "oauth_grants", "oauth_codes", "oauth_tokens")
        ]
    )
    assert [value for value in shown if value in stored] == []
    digests = {bytes(r["token_sha256"]) for r in await pool.fetch("SELECT token_sha256 FROM mcp_host.oauth_tokens")}
    assert digest(second["access_token"]) in digests


async def test_a_token_issued_by_one_replica_is_valid_on_another(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    tokens = await signed_in(http, server, desk, client)
    other = AuthorizationServer(
        pool, SecretBox(secrets.token_bytes(32)), issuer=ISSUER, resources=[DOOR], desk=DecidingDesk()
    )
    found = await other.load_access_token(tokens["access_token"])
    assert found is not None and found.subject == "session-1"


@pytest.mark.parametrize(
    "redirect_uri", ["http://evil.example/cb", "javascript:alert(1)", "https://app.example/cb#frag"]
)
async def test_registration_refuses_a_redirect_uri_the_host_does_not_allow(
    http: httpx2.AsyncClient, redirect_uri: str
) -> None:
    response = await http.post("/register", json={"redirect_uris": [redirect_uri]})
    assert (response.status_code, response.json()["error"]) == (400, "invalid_redirect_uri")


@pytest.mark.parametrize(
    "redirect_uri", ["https://app.example/cb", "http://localhost:33418/cb", "http://[::1]:9/cb", "cursor://x/cb"]
)
async def test_registration_allows_https_loopback_and_private_use_redirect_uris(
    http: httpx2.AsyncClient, server: AuthorizationServer, redirect_uri: str
) -> None:
    client = await register(http, redirect_uris=[redirect_uri], token_endpoint_auth_method="none")
    assert "client_secret" not in client
    kept = await server.get_client(client["client_id"])
    assert kept is not None and [str(u) for u in kept.redirect_uris or []] == [redirect_uri]


async def test_the_metadata_documents_name_the_issuer_the_doors_and_iss_support(http: httpx2.AsyncClient) -> None:
    server_meta = (await http.get("/.well-known/oauth-authorization-server")).json()
    assert server_meta == {
        "issuer": ISSUER,
        "authorization_endpoint": f"{ISSUER}/authorize",
        "token_endpoint": f"{ISSUER}/token",
        "registration_endpoint": f"{ISSUER}/register",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic", "none"],
        "revocation_endpoint": f"{ISSUER}/revoke",
        "revocation_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
        "client_id_metadata_document_supported": True,
    }
    door_meta = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert (door_meta["resource"], door_meta["authorization_servers"]) == (DOOR, [ISSUER])
    owner_meta = (await http.get("/.well-known/oauth-protected-resource/owner/mcp")).json()
    assert owner_meta["resource"] == OWNER_DOOR


async def test_registrations_from_one_address_past_its_free_ones_are_answered_429(server: AuthorizationServer) -> None:
    now = [1000.0]
    limits = ThrottleLimits(free_failures=2, window_s=3600.0, base_delay_s=30.0, max_delay_s=60.0)
    app = Starlette(routes=oauth_routes(server, registrations=FailureThrottle(limits, clock=lambda: now[0])))

    async def statuses(address: str, times: int) -> list[int]:
        transport = httpx2.ASGITransport(app=app, client=(address, 40000))
        async with httpx2.AsyncClient(transport=transport, base_url=ISSUER) as http:
            body = {"redirect_uris": [REDIRECT]}
            return [(await http.post("/register", json=body)).status_code for _ in range(times)]

    assert await statuses("192.0.2.1", 4) == [201, 201, 201, 429]
    assert await statuses("192.0.2.2", 1) == [201]
    now[0] += 31.0
    assert await statuses("192.0.2.1", 2) == [201, 429]


async def test_the_sweep_deletes_what_can_no_longer_be_used_and_keeps_live_grants(
    pool: PgPool, http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    await signed_in(http, server, desk, client, subject="expired")
    await pool.execute(
        "UPDATE mcp_host.oauth_tokens SET expires_at = now() - interval '1 second' WHERE grant_id = "
        "(SELECT id FROM mcp_host.oauth_grants WHERE subject = 'expired')"
    )
    revoked = await signed_in(http, server, desk, client, subject="revoked")
    await http.post("/revoke", data={"token": revoked["access_token"], **client_auth(client)})
    live = await signed_in(http, server, desk, client, subject="live")
    await authorize(http, client, pkce()[1])  # a request left waiting, not yet expired
    await pool.execute("UPDATE mcp_host.oauth_grants SET created_at = now() - interval '1 hour'")
    await pool.execute("UPDATE mcp_host.oauth_codes SET expires_at = now() - interval '1 second'")

    assert await server.sweep(revoked_kept_s=0.0) == 2 + 2 + 2  # codes, expired tokens, grants
    subjects = await pool.fetch("SELECT subject FROM mcp_host.oauth_grants")
    assert [r["subject"] for r in subjects] == ["live"]
    assert await pool.fetchval("SELECT count(*) FROM mcp_host.oauth_tokens") == 2
    assert await pool.fetchval("SELECT count(*) FROM mcp_host.oauth_requests") == 1
    assert await server.load_access_token(live["access_token"]) is not None


async def test_a_refresh_token_shown_twice_at_once_refreshes_at_most_once_and_revokes_the_grant(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    tokens = await signed_in(http, server, desk, client)
    await _at_most_one_wins_then_the_grant_is_revoked(server, lambda: refresh(http, client, tokens["refresh_token"]))


async def test_a_code_redeemed_twice_at_once_gives_tokens_at_most_once_and_revokes_the_grant(
    http: httpx2.AsyncClient, server: AuthorizationServer, desk: DecidingDesk
) -> None:
    client = await register(http)
    verifier, challenge = pkce()
    code = await code_for(http, server, desk, client, challenge)
    await _at_most_one_wins_then_the_grant_is_revoked(server, lambda: redeem(http, client, code, verifier))


async def test_while_the_database_is_away_the_routes_answer_503_and_the_metadata_still_200(
    database_url: str, desk: DecidingDesk
) -> None:
    gone = await asyncpg.create_pool(database_url, min_size=1, max_size=1)
    await gone.close()
    away = AuthorizationServer(gone, SecretBox(secrets.token_bytes(32)), issuer=ISSUER, resources=[DOOR], desk=desk)
    app = Starlette(routes=oauth_routes(away))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=ISSUER) as http:
        answers = [
            await http.post("/register", json={"redirect_uris": [REDIRECT]}),
            await http.post("/token", data={"grant_type": "refresh_token", "refresh_token": "x", "client_id": "c"}),
            await http.post("/revoke", data={"token": "x", "client_id": "c"}),
            await authorize(http, {"client_id": "c"}, pkce()[1]),
        ]
        assert [(a.status_code, a.headers["retry-after"], a.json()["error"]) for a in answers] == [
            (503, "5", "temporarily_unavailable")
        ] * 4
        assert (await http.get("/.well-known/oauth-authorization-server")).status_code == 200
