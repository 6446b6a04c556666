"""Access through a real host: `POST /v1/sessions` with an access code or an API key, roles
frozen into sessions, revocation reaching live sessions, one 401 for every refused
credential, concurrent redemption, public sessions switched off, and the failure slow-down."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import asyncpg
import httpx2
import pytest
from inline_snapshot import Is, snapshot

from mcp_host.visitor.http import NO_CREDENTIAL, REFUSED
from mcp_host_kit.contract import Refusal, refusal_of
from tests.hosting import RunningHost, host_settings, running_host

pytestmark = pytest.mark.anyio
NONE = Refusal(code="", message="")  # what a result that is no refusal reads as here

ECHO = ["echo", "whoami", "sleep", "die"]
GUARDED = ["guarded_hello", "guarded_scope"]
UNKNOWN_ECHO = {"code": "unknown", "message": "no tool named 'echo' is available in this session"}


def _settings(tmp_path: Path, database_url: str, **overrides: Any) -> Any:
    return host_settings(tmp_path, database_url, ["echo", "guarded"], **overrides)


async def _post(running: RunningHost, body: dict[str, Any] | None = None, key: str | None = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return await running.http.post(f"{running.url}/v1/sessions", json=body or {}, headers=headers)


async def _opened(running: RunningHost, body: dict[str, Any] | None = None, key: str | None = None) -> dict[str, Any]:
    response = await _post(running, body, key)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def _tool_names(running: RunningHost, session: dict[str, Any]) -> list[str]:
    async with running.client(session) as client:
        return [t.name for t in (await client.list_tools()).tools]


async def _expire(database_url: str, code_id: str) -> None:
    """Move a code's expiry into the past (a code cannot be created expired)."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE mcp_host.access_codes SET expires_at = now() - interval '1 s' WHERE id = $1", code_id
        )
    finally:
        await conn.close()


def _refused(response: httpx2.Response) -> tuple[int, Any, str]:
    return response.status_code, response.json(), response.headers.get("www-authenticate", "")


async def test_a_code_in_the_body_and_a_key_in_the_header_open_sessions_under_their_role(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        access, owner = running.access, running.owner_id
        await access.put_role(owner, "staff", ["test.guarded"], {"test.guarded": {"greeting": "hi"}})
        code, issued = await access.create_code(owner, "staff")
        key, api_key = await access.create_api_key(owner, "staff")

        by_code = await _opened(running, {"code": code, "visitor": {"name": "Ada"}})
        by_key = await _opened(running, key=key)
        public = await _opened(running)

        stored = [await running.sessions.get(s["session_id"]) for s in (by_code, by_key, public)]
        staff = {
            "id": "staff",
            "capabilities": ("test.guarded",),
            "config": {"test.guarded": {"greeting": "hi", "max_items": 3}},
        }
        assert [s.model_dump(include={"mode", "subject", "role"}) for s in stored if s is not None] == snapshot(
            [
                {"mode": "code", "subject": {"kind": "code", "id": Is(issued.id)}, "role": Is(staff)},
                {"mode": "api_key", "subject": {"kind": "api_key", "id": Is(api_key.id)}, "role": Is(staff)},
                {"mode": "public", "subject": None, "role": {"id": "public", "capabilities": (), "config": {}}},
            ]
        )
        assert await _tool_names(running, by_code) == ECHO + GUARDED
        assert await _tool_names(running, public) == ECHO
        async with running.client(by_key) as client:
            scope = (await client.call_tool("guarded_scope", {})).structured_content
        assert scope == {
            "scope": {
                "owner_id": owner,
                "session_id": by_key["session_id"],
                "mode": "api_key",
                "subject": {"kind": "api_key", "id": api_key.id},
                "visitor": None,
                "role": "staff",
            }
        }


async def test_a_role_edit_reaches_new_sessions_and_leaves_live_ones_as_they_were(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        access, owner = running.access, running.owner_id
        await access.put_role(owner, "staff", ["test.guarded"])
        code, _ = await access.create_code(owner, "staff")
        live = await _opened(running, {"code": code})
        async with running.client(live) as client:
            before = [t.name for t in (await client.list_tools()).tools]
            await access.put_role(owner, "staff", [])
            after = [t.name for t in (await client.list_tools()).tools]
            still = await client.call_tool("guarded_hello", {"name": "Ada"})
        newer = await _opened(running, {"code": code})

        assert before == after == ECHO + GUARDED
        assert still.structured_content == {"hello": "Ada"}
        assert await _tool_names(running, newer) == ECHO


@pytest.mark.parametrize("kind", ["code", "api_key"])
async def test_a_revoked_credential_opens_no_session_and_its_live_sessions_lose_every_tool(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host")
    async with running_host(_settings(tmp_path, database_url)) as running:
        access, owner = running.access, running.owner_id
        await access.put_role(owner, "staff", ["test.guarded"])
        if kind == "code":
            code, _ = await access.create_code(owner, "staff")
            body, key = {"code": code}, None
        else:
            body, (key, api_key) = None, await access.create_api_key(owner, "staff")
        live = await _opened(running, body, key)
        async with running.client(live) as client:
            before = [t.name for t in (await client.list_tools()).tools]
            revoked = (
                await access.revoke_code(owner, code)
                if kind == "code"
                else await access.revoke_api_key(owner, api_key.id)
            )
            # No wait: revoking on this replica drops the session's cached authentication.
            after = await client.list_tools()
            refused = await client.call_tool("echo", {"text": "still there?"})
            refused_granted = await client.call_tool("guarded_hello", {"name": "Ada"})
        again = await _post(running, body, key)

        assert before == ECHO + GUARDED
        assert revoked is True
        assert after.tools == []
        assert (refused.is_error, refusal_of(refused)) == (True, Refusal(**UNKNOWN_ECHO))
        assert (refusal_of(refused_granted) or NONE).code == "unknown"
        assert _refused(again) == (401, REFUSED, 'Bearer realm="mcp-host"')
        assert (
            f"session {live['session_id']}: tool 'echo' refused as unknown "
            "(the session's access code or API key was revoked)"
        ) in caplog.messages


async def test_wrong_expired_used_up_and_revoked_credentials_all_get_the_same_401(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url, access_failures_free=100)) as running:
        access, owner = running.access, running.owner_id
        expired, expired_code = await access.create_code(owner, "public")
        await _expire(database_url, expired_code.id)
        used_up, _ = await access.create_code(owner, "public", max_uses=1)
        await _opened(running, {"code": used_up})
        revoked_code, _ = await access.create_code(owner, "public")
        await access.revoke_code(owner, revoked_code)
        revoked_key, revoked_key_row = await access.create_api_key(owner, "public")
        await access.revoke_api_key(owner, revoked_key_row.id)

        answers = {
            "wrong code": await _post(running, {"code": "A" * 22}),
            "wrong key": await _post(running, key="mcphk_" + "A" * 43),
            "expired code": await _post(running, {"code": expired}),
            "used-up code": await _post(running, {"code": used_up}),
            "revoked code": await _post(running, {"code": revoked_code}),
            "revoked key": await _post(running, key=revoked_key),
            "key given as a code": await _post(running, {"code": revoked_key}),
            "not a bearer key": await running.http.post(
                f"{running.url}/v1/sessions", json={}, headers={"Authorization": "Basic YWRhOnB3"}
            ),
        }
        assert {label: _refused(r) for label, r in answers.items()} == dict.fromkeys(
            answers, (401, REFUSED, 'Bearer realm="mcp-host"')
        )
        assert REFUSED == snapshot({"error": "denied", "message": "the access code or API key was not accepted"})


async def test_with_public_sessions_off_a_request_without_credentials_gets_401(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        access, owner = running.access, running.owner_id
        code, _ = await access.create_code(owner, "public")
        await access.set_host_settings(owner, public_sessions=False)

        refused = await _post(running, {"visitor": {"name": "Ada"}})
        with_code = await _post(running, {"code": code})
        await access.set_host_settings(owner, public_sessions=True)
        public_again = await _post(running)

        assert _refused(refused) == (401, NO_CREDENTIAL, 'Bearer realm="mcp-host"')
        assert NO_CREDENTIAL == snapshot(
            {"error": "denied", "message": "this host opens sessions only with an access code or an API key"}
        )
        assert (with_code.status_code, public_again.status_code) == (201, 201)


async def test_twelve_concurrent_redemptions_of_a_three_use_code_open_exactly_three_sessions(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url, access_failures_free=100)) as running:
        access, owner = running.access, running.owner_id
        code, _ = await access.create_code(owner, "public", max_uses=3)
        go = anyio.Event()
        answers: list[httpx2.Response] = []

        async def redeem() -> None:
            await go.wait()
            answers.append(await _post(running, {"code": code}))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for _ in range(12):
                    tg.start_soon(redeem)
                await anyio.lowlevel.checkpoint()
                go.set()

        assert sorted(r.status_code for r in answers) == [201] * 3 + [401] * 9
        opened = {r.json()["session_id"] for r in answers if r.status_code == 201}
        assert len(opened) == 3
        assert [(c.uses, c.status) for c in await access.list_codes(owner)] == [(3, "used_up")]


@pytest.mark.parametrize(
    ("body", "key"),
    [({"code": "A" * 22}, "mcphk_" + "A" * 43), ({"code": "A" * 257}, None), ({"code": ""}, None)],
)
async def test_a_code_and_a_key_together_or_a_code_out_of_bounds_is_an_invalid_request(
    tmp_path: Path, database_url: str, body: dict[str, Any], key: str | None
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as running:
        response = await _post(running, body, key)
        assert (response.status_code, response.json()["error"]) == (400, "invalid_arguments")


async def _timed_failure(http: httpx2.AsyncClient, url: str) -> float:
    start = time.monotonic()
    response = await http.post(f"{url}/v1/sessions", json={"code": "A" * 22})
    assert response.status_code == 401
    return time.monotonic() - start


async def test_repeated_failures_slow_that_client_down_and_no_other(tmp_path: Path, database_url: str) -> None:
    delay = 0.5
    settings = _settings(
        tmp_path, database_url, access_failures_free=3, access_failure_delay_s=delay, access_failure_delay_max_s=1.0
    )
    async with running_host(settings) as running:
        other_client = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(local_address="127.0.0.2"), timeout=30)
        async with other_client:
            with anyio.fail_after(60):
                timings = [await _timed_failure(running.http, running.url) for _ in range(10)]
                other = await _timed_failure(other_client, running.url)
        assert timings[9] - timings[0] >= delay
        assert timings[0] < delay
        assert other < delay
