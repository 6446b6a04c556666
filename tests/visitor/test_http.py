"""The visitor face over real HTTP: sessions, bearer auth, both protocol eras, bad input."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import MCPError

from tests.hosting import RunningHost, host_settings, modern_request, refusal, running_host

pytestmark = pytest.mark.anyio

LEGACY = "2025-11-25"
MODERN = "2026-07-28"


def _init_body(request_id: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _raw_post(host: RunningHost, session: dict[str, Any], body: Any, **headers: str) -> httpx2.Response:
    all_headers = {**MCP_HEADERS, "Authorization": f"Bearer {session['token']}", **headers}
    content = body if isinstance(body, bytes) else None
    return await host.http.post(
        session["mcp_url"], headers=all_headers, content=content, json=None if content else body
    )


async def test_open_session_answers_201_with_endpoint_and_token(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        response = await host.http.post(
            f"{host.url}/v1/sessions", json={"visitor": {"name": "Ada", "email": "ada@example.org"}}
        )
        assert response.status_code == 201
        body = response.json()
        assert sorted(body) == ["mcp_url", "session_id", "token"]
        assert body["mcp_url"] == f"{host.url}/v1/sessions/{body['session_id']}/mcp"
        assert len(body["token"]) >= 32
        assert response.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"visitor": {"name": "x", "phone": "1"}}', b'{"admin": true}', b"[]"],
)
async def test_open_session_with_bad_body_is_400(tmp_path: Path, database_url: str, body: bytes) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        response = await host.http.post(
            f"{host.url}/v1/sessions", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_arguments"


async def test_open_session_with_oversized_body_is_413(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        response = await host.http.post(f"{host.url}/v1/sessions", content=b"{" + b" " * 200_000 + b"}")
        assert response.status_code == 413


async def test_wrong_missing_and_foreign_tokens_get_401(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        mine = await host.new_session()
        theirs = await host.new_session()
        cases = {
            "missing": {},
            "wrong": {"Authorization": "Bearer not-the-token"},
            "other session's": {"Authorization": f"Bearer {theirs['token']}"},
            "not bearer": {"Authorization": f"Basic {mine['token']}"},
        }
        for label, auth in cases.items():
            response = await host.http.post(mine["mcp_url"], json=_init_body(), headers={**MCP_HEADERS, **auth})
            assert response.status_code == 401, label
            assert response.headers["www-authenticate"].startswith("Bearer")
        unknown = mine["mcp_url"].replace(mine["session_id"], "0" * 32)
        response = await host.http.post(
            unknown, json=_init_body(), headers={**MCP_HEADERS, "Authorization": f"Bearer {mine['token']}"}
        )
        assert response.status_code == 401
        junk = f"{host.url}/v1/sessions/..%2F..%2Fetc/mcp"
        response = await host.http.post(
            junk, json=_init_body(), headers={**MCP_HEADERS, "Authorization": f"Bearer {mine['token']}"}
        )
        assert response.status_code in (401, 404)
        # and the right token still works after all that
        async with host.client(mine) as client:
            assert [t.name for t in (await client.list_tools()).tools]


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_both_protocol_eras_list_and_call(tmp_path: Path, database_url: str, mode: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            assert client.protocol_version == (LEGACY if mode == "legacy" else MODERN)
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ["echo", "whoami", "sleep", "die"]
            if mode == MODERN:
                assert tools.cache_scope == "private"
                assert tools.ttl_ms == 0
            result = await client.call_tool("echo", {"text": "hello"})
            assert result.is_error is False
            assert result.structured_content == {"text": "hello"}


async def test_legacy_mcp_session_of_one_visitor_is_refused_to_another(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        alice = await host.new_session()
        bob = await host.new_session()
        opened = await _raw_post(host, alice, _init_body())
        assert opened.status_code == 200
        mcp_session_id = opened.headers["mcp-session-id"]
        # Bob presents Alice's Mcp-Session-Id on his own (authenticated) endpoint.
        hijack = await _raw_post(
            host,
            bob,
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            **{"Mcp-Session-Id": mcp_session_id, "Mcp-Protocol-Version": LEGACY},
        )
        assert hijack.status_code == 404


async def test_sessions_survive_a_host_restart(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"])
    async with running_host(settings) as host:
        session = await host.new_session()
    async with running_host(settings) as host:
        async with host.client(session) as client:
            result = await client.call_tool("echo", {"text": "still here"})
            assert result.structured_content == {"text": "still here"}


async def test_malformed_and_oversized_bodies_get_clear_errors_and_host_keeps_serving(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        bystander = await host.new_session()
        attacker = await host.new_session()
        async with host.client(bystander) as client:
            malformed = await _raw_post(host, attacker, b'{"jsonrpc": "2.0", "id": 1, "method": ')
            assert malformed.status_code == 400
            assert malformed.json()["error"]["code"] == -32700  # parse error
            not_rpc = await _raw_post(host, attacker, {"hello": "world"})
            assert not_rpc.status_code == 400
            big = await _raw_post(
                host,
                attacker,
                b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":"' + b"x" * (10 << 20) + b'"}}',
            )
            assert big.status_code == 413
            result = await client.call_tool("echo", {"text": "unbothered"})
            assert result.structured_content == {"text": "unbothered"}


async def test_foreign_host_header_is_refused(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        response = await _raw_post(host, session, _init_body(), Host="evil.example:8765")
        assert response.status_code == 421
        response = await _raw_post(host, session, _init_body(), Origin="http://evil.example")
        assert response.status_code == 403


async def test_healthz_answers_200_when_ready(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        response = await host.http.get(f"{host.url}/healthz")
        assert (response.status_code, response.json()) == (200, {"ok": True})


async def test_unknown_tool_is_a_tool_error_and_session_stays_usable(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        async with host.client(session, "legacy") as client:
            result = await client.call_tool("no_such_tool", {})
            assert result.is_error is True
            assert refusal(result) == {
                "code": "unknown",
                "message": "no tool named 'no_such_tool' is available in this session",
            }
            assert (await client.call_tool("echo", {"text": "ok"})).structured_content == {"text": "ok"}


async def test_protocol_error_for_unknown_method_does_not_break_session(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        async with host.client(session, "legacy") as client:
            with pytest.raises(MCPError):
                await client.get_prompt("no_such_prompt")
            assert (await client.call_tool("echo", {"text": "ok"})).structured_content == {"text": "ok"}


async def test_an_address_opening_public_sessions_too_fast_is_told_when_to_retry_and_others_are_not(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, [], principal_public_sessions_per_minute=3)

    def client(address: str) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(local_address=address), timeout=30)

    async with running_host(settings) as host, client("127.0.0.2") as fast, client("127.0.0.3") as other:
        url = f"{host.url}/v1/sessions"
        statuses = [(await fast.post(url, json={})).status_code for _ in range(3)]
        refused = await fast.post(url, json={})
        assert statuses == [201, 201, 201]
        wait = int(refused.headers["retry-after"])  # one session every 20 s at 3 a minute
        assert 15 <= wait <= 20
        assert (refused.status_code, refused.json()) == (
            429,
            {
                "error": "unavailable",
                "message": f"this address opens public sessions faster than the host allows; retry in {wait} s",
            },
        )
        assert (await other.post(url, json={})).status_code == 201
        rows = await host.sql.fetchval("SELECT count(*) FROM mcp_host.sessions")
        assert rows == 4  # the refused one stored nothing


async def test_a_principal_sending_requests_too_fast_waits_its_turn_then_is_refused_and_others_are_not_slowed(
    tmp_path: Path, database_url: str
) -> None:
    # 2 a second, 3 at once, a request waits its turn up to 1 s (issue 26: a flood of requests
    # costs the host what the rate does, not more).
    caps = {"principal_requests_per_s": 2, "principal_requests_burst": 3, "principal_request_wait_s": 1.0}
    settings = host_settings(tmp_path, database_url, ["echo"], **caps)

    def client(address: str) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(local_address=address), timeout=30)

    async with running_host(settings) as host, client("127.0.0.2") as fast, client("127.0.0.3") as other:

        async def listing(http: httpx2.AsyncClient, session: dict[str, Any]) -> tuple[int, float, httpx2.Response]:
            body, headers = modern_request("tools/list", {})
            started = anyio.current_time()
            answer = await http.post(
                session["mcp_url"], json=body, headers={**headers, "Authorization": f"Bearer {session['token']}"}
            )
            return answer.status_code, anyio.current_time() - started, answer

        flooding = (await fast.post(f"{host.url}/v1/sessions", json={})).json()
        calm = (await other.post(f"{host.url}/v1/sessions", json={})).json()
        assert (await listing(other, calm))[0] == 200  # the child runs
        answers: list[tuple[int, float, httpx2.Response]] = []
        calm_answer: list[tuple[int, float, httpx2.Response]] = []

        async def flood_one() -> None:
            answers.append(await listing(fast, flooding))

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(flood_one)
            await anyio.sleep(0.2)  # the flood's last ones wait their turn now
            calm_answer.append(await listing(other, calm))
        statuses = sorted(status for status, _, _ in answers)
        assert statuses == [200] * 5 + [429] * 3  # 3 at once, 2 more within 1 s, the rest refused
        waited = sorted(seconds for status, seconds, _ in answers if status == 200)
        assert waited[-1] >= 0.9  # the fifth waited for its turn: 1 s at 2 a second
        refused = next(answer for status, _, answer in answers if status == 429)
        assert refused.headers["retry-after"] == "1"
        assert refused.json() == {
            "error": "unavailable",
            "message": "too many requests from this visitor (its access code, API key or address); retry in 1 s",
        }
        [(status, seconds, _)] = calm_answer
        assert status == 200 and seconds < 0.5  # another principal is not slowed


async def test_a_flood_of_refused_calls_is_logged_a_few_lines_not_one_each(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.visitor.door")
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        async with host.client(session, "legacy") as client:
            started = anyio.current_time()
            for _ in range(60):
                assert (await client.call_tool("no_such_tool", {})).is_error
            await anyio.sleep(1)
            await client.call_tool("no_such_tool", {})  # a line again: first, how many were held back
            elapsed = anyio.current_time() - started
    lines = [r.getMessage() for r in caplog.records if r.name == "mcp_host.visitor.door"]
    refused = [line for line in lines if "no_such_tool -> unknown" in line]
    assert 20 <= len(refused) <= 20 + 2 * elapsed + 1 < 61  # the burst of 20, then 2 a second
    assert any(line.startswith("unknown: ") and "more refused calls suppressed" in line for line in lines)
