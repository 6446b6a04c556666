"""The JSON-RPC edge of both MCP doors (docs/security.md A8, issue 11 defects 1 and 7).

A string that is not Unicode is refused before anything parses it further; one call's
failure never ends more than that call; a request id is in flight once per protocol session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from starlette.types import Message, Receive, Scope, Send

from mcp_host.edge.jsonrpc import RpcEdge, has_lone_surrogate
from mcp_host.errors import TransportFailure
from owner_facade import OWNER_PATH
from tests.hosting import RunningHost, host_settings, modern_request, running_host, wait_until

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
LONE = "\\ud800"  # JSON text of a lone high surrogate, as a hostile client writes it


@pytest.mark.parametrize(
    ("raw", "lone"),
    [
        (b'"\\ud800"', True),
        (b'"\\uDC00"', True),
        (b'"\\ud800\\u0041"', True),
        (b'"x\\udbff"', True),
        (b'"\\\\\\ud800"', True),  # an escaped backslash, then a lone surrogate
        (b'"\\ud83d\\ude00"', False),  # a valid pair
        (b'"\\uD83D\\uDE00"', False),
        (b'"\\\\ud800"', False),  # an escaped backslash, then the text "ud800"
        (b'"\\u00e9 plain"', False),
        (b'{"a": 1}', False),
    ],
)
def test_lone_surrogate_escapes_are_found_and_pairs_are_not(raw: bytes, lone: bool) -> None:
    assert has_lone_surrogate(raw) is lone
    # The JSON parser agrees on what the text is.
    decoded = json.loads(raw)
    texts = [decoded] if isinstance(decoded, str) else []
    assert any(not _encodable(t) for t in texts) is lone


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _modern(method: str, params: dict[str, Any], request_id: object = 1) -> tuple[bytes, dict[str, str]]:
    body, headers = modern_request(method, params, request_id)
    return json.dumps(body).encode(), headers


def _with_lone(body: bytes, marker: str) -> bytes:
    """`body` with the JSON string `marker` replaced by one holding a lone surrogate."""
    assert marker.encode() in body
    return body.replace(marker.encode(), f"x{LONE}y".encode())


async def _legacy_headers(host: RunningHost, url: str, token: str) -> dict[str, str]:
    """Headers of an initialized 2025-11-25 protocol session on `url`."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
    }
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
    }
    opened = await host.http.post(url, json=init, headers=headers)
    headers |= {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": LEGACY}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await host.http.post(url, json=note, headers=headers)).status_code == 202
    return headers


async def _assert_serving(host: RunningHost, session: dict[str, Any]) -> None:
    health = await host.http.get(f"{host.url}/healthz")
    assert health.status_code == 200
    async with host.client(session) as client:
        result = await client.call_tool("echo", {"text": "still here"})
        assert result.structured_content == {"text": "still here"}


@pytest.mark.parametrize("where", ["arguments", "meta", "tool name", "id", "method"])
async def test_lone_surrogate_anywhere_in_a_modern_call_is_refused_and_the_host_serves_on(
    tmp_path: Path, database_url: str, where: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        body, headers = _modern("tools/call", {"name": "echo", "arguments": {"text": "MARK-ARG"}}, "MARK-ID")
        body = body.replace(b'"_meta": {', b'"_meta": {"note": "MARK-META", ')
        marker = {
            "arguments": "MARK-ARG",
            "meta": "MARK-META",
            "tool name": "echo",
            "id": "MARK-ID",
            "method": "tools/call",
        }[where]
        # The marker is a whole JSON string; the tool name and method also appear in headers.
        hostile = body.replace(f'"{marker}"'.encode(), f'"{marker}{LONE}"'.encode())
        response = await host.http.post(
            session["mcp_url"], content=hostile, headers={**headers, "Authorization": f"Bearer {session['token']}"}
        )
        assert response.status_code == 400
        answer = response.json()
        assert answer["error"]["code"] == -32602
        assert answer["error"]["data"] == {"code": "invalid_arguments"}
        assert answer["id"] == ("MARK-ID" if where != "id" else None)
        await _assert_serving(host, session)
        assert len(host.spawned) == 1  # the child never saw it and was never restarted


@pytest.mark.parametrize(
    "encode",
    [
        lambda text: text.encode("utf-8", "surrogatepass"),  # CESU-8: the surrogate as raw bytes
        lambda text: text.encode("utf-16-le", "surrogatepass"),
        lambda text: text.encode("utf-16", "surrogatepass"),  # with a BOM
        lambda text: text.encode("utf-32-be", "surrogatepass"),
    ],
    ids=["cesu-8", "utf-16-le", "utf-16-bom", "utf-32-be"],
)
async def test_a_body_that_is_not_utf8_is_refused_at_the_edge_in_the_modern_era(
    tmp_path: Path, database_url: str, encode: Any
) -> None:
    # Python's parser takes all four (and the surrogate with them); the edge says no first.
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        body, headers = _modern("tools/call", {"name": "echo", "arguments": {"text": "MARK"}})
        hostile = encode(body.decode().replace('"MARK"', '"x\ud800y"'))
        assert json.loads(hostile)["params"]["arguments"]["text"] == "x\ud800y"
        response = await host.http.post(
            session["mcp_url"], content=hostile, headers={**headers, "Authorization": f"Bearer {session['token']}"}
        )
        assert (response.status_code, response.json()) == (
            400,
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "the body is not UTF-8 text"}},
        )
        await _assert_serving(host, session)
        assert len(host.spawned) == 1  # the child never saw it


async def test_lone_surrogate_in_a_legacy_call_is_refused(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        auth = {"Authorization": f"Bearer {session['token']}"}
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **auth}
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
        }
        opened = await host.http.post(session["mcp_url"], json=init, headers=headers)
        assert opened.status_code == 200
        sid = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": LEGACY}
        call = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "MARK"}},
            }
        ).encode()
        response = await host.http.post(
            session["mcp_url"], content=_with_lone(call, "MARK"), headers={**headers, **sid}
        )
        assert response.status_code == 400
        assert response.json()["error"]["data"] == {"code": "invalid_arguments"}
        assert response.json()["id"] == 2
        await _assert_serving(host, session)


async def test_lone_surrogate_through_the_owner_door_is_refused_and_nothing_is_unaudited(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        token = host.owner_token()
        arguments = {"capability": "test.echo", "tool": "MARK", "arguments": {"text": "x"}}
        body, headers = _modern("tools/call", {"name": "capability_invoke", "arguments": arguments})
        response = await host.http.post(
            f"{host.url}{OWNER_PATH}",
            content=_with_lone(body, "MARK"),
            headers={**headers, "Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 400
        assert response.json()["error"]["data"] == {"code": "invalid_arguments"}
        # A NUL is valid Unicode: the call goes through the door and its audit row is written.
        nul_body, headers = _modern(
            "tools/call", {"name": "config_get", "arguments": {"capability": "a\x00b", "scope": "owner"}}
        )
        answered = await host.http.post(
            f"{host.url}{OWNER_PATH}", content=nul_body, headers={**headers, "Authorization": f"Bearer {token}"}
        )
        assert answered.status_code == 200
        # So is a tool name holding one: unknown, refused, and still audited.
        # (2025-11-25: a header cannot carry a NUL, so no 2026-07-28 client can name such a tool.)
        legacy = await _legacy_headers(host, f"{host.url}{OWNER_PATH}", token)
        odd = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "roles_list\x00", "arguments": {}}}
        refused = await host.http.post(f"{host.url}{OWNER_PATH}", json=odd, headers=legacy)
        assert refused.status_code == 200 and '"isError":true' in refused.text.replace(" ", "")
        rows = await host.audit.list(host.owner_id, since=None, limit=10)
        assert [(r.tool, r.arguments.get("capability")) for r in rows][:2] == [
            ("roles_list\ufffd", None),
            ("config_get", "a\ufffdb"),
        ]
        assert (await host.http.get(f"{host.url}/healthz")).status_code == 200


async def test_a_message_the_child_cannot_be_sent_fails_only_its_call(tmp_path: Path, database_url: str) -> None:
    """Behind the edge too: the framing refuses the one message; the child and the host go on."""
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        await _assert_serving(host, session)
        child = host.child("test.echo")
        assert child is not None
        with anyio.fail_after(5), pytest.raises(TransportFailure):
            await child.call_tool("echo", {"text": "\ud800"}, {}, timeout_s=5)
        assert (await child.call_tool("echo", {"text": "ok"}, {}, timeout_s=5)).structured_content == {"text": "ok"}
        await _assert_serving(host, session)
        assert len(host.spawned) == 1


@pytest.mark.parametrize("request_id", [7, 2**64, "same-id"])
async def test_a_duplicate_in_flight_id_is_refused_and_the_first_call_still_answers(
    tmp_path: Path, database_url: str, request_id: int | str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "Authorization": f"Bearer {session['token']}",
        }
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
        }
        opened = await host.http.post(session["mcp_url"], json=init, headers=headers)
        headers |= {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": LEGACY}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await host.http.post(session["mcp_url"], json=initialized, headers=headers)).status_code == 202

        def call(seconds: float) -> dict[str, Any]:
            params = {"name": "sleep", "arguments": {"seconds": seconds}}
            return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

        first: dict[str, httpx2.Response] = {}

        async def slow() -> None:
            first["response"] = await host.http.post(session["mcp_url"], json=call(1.5), headers=headers)

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            await wait_until(lambda: _in_flight(host) == 1, within_s=30)  # the child starts first
            duplicate = await host.http.post(session["mcp_url"], json=call(0), headers=headers)
            assert duplicate.status_code == 409
            assert duplicate.json()["error"]["code"] == -32600
            assert duplicate.json()["id"] == request_id
        assert first["response"].status_code == 200
        assert '"slept":1.5' in first["response"].text.replace(" ", "")
        # Once answered, the id may be used again.
        again = await host.http.post(session["mcp_url"], json=call(0), headers=headers)
        assert again.status_code == 200 and '"slept":0' in again.text.replace(" ", "")


async def test_an_id_is_free_again_as_soon_as_its_answer_is_read(tmp_path: Path, database_url: str) -> None:
    # A client that reuses its id the moment it has read the answer, the response still open.
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        headers = await _legacy_headers(host, session["mcp_url"], session["token"])
        ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
        statuses: list[int] = []
        async with anyio.create_task_group() as tg:
            for _ in range(200):
                response = await host.http.send(
                    host.http.build_request("POST", session["mcp_url"], json=ping, headers=headers), stream=True
                )
                statuses.append(response.status_code)
                if response.status_code == 200:
                    async for line in response.aiter_lines():
                        if line.startswith("data:") and '"result"' in line:
                            break
                tg.start_soon(response.aclose)  # the rest of the response is read while the next goes
        assert statuses == [200] * 200


async def test_the_edge_frees_an_id_as_its_answer_leaves_not_when_the_handler_returns() -> None:
    # The SDK's handler returns a moment after the answer's last chunk; a reuse in between
    # is a new request, not a duplicate. An app that answers, then waits, shows the window.
    answered, finish = anyio.Event(), anyio.Event()
    seen: list[bytes] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        body = (await receive())["body"]
        seen.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send(
            {
                "type": "http.response.body",
                "body": b'event: message\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\n\n',
                "more_body": True,
            }
        )
        if len(seen) == 1:
            answered.set()
            await finish.wait()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    edge = RpcEdge(app, max_body_bytes=1 << 20)
    body = b'{"jsonrpc":"2.0","id":7,"method":"ping"}'
    scope: Scope = {"type": "http", "method": "POST", "headers": [(b"mcp-session-id", b"s1")]}

    async def post(sent: list[Message]) -> None:
        async def receive() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        await edge(scope, receive, send)

    first: list[Message] = []
    second: list[Message] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(post, first)
            await answered.wait()
            await post(second)
            finish.set()
    assert [m["status"] for m in (first[0], second[0])] == [200, 200]
    assert seen == [body, body]


def _in_flight(host: RunningHost) -> int:
    child = host.child("test.echo")
    return child.router.in_flight() if child is not None else 0


async def test_a_body_over_the_cap_gets_413_not_a_reset(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"], max_body_bytes=64 * 1024)
    async with running_host(settings) as host:
        session = await host.new_session()
        auth = {"Authorization": f"Bearer {session['token']}"}
        deep = b'{"message":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}"  # ~600 KB
        for url, extra in [
            (session["mcp_url"], {"Accept": "application/json, text/event-stream"}),
            (f"{host.url}/v1/sessions/{session['session_id']}/turns", {}),
            (f"{host.url}/v1/sessions", {}),
        ]:
            headers = {**auth, **extra, "Content-Type": "application/json"} if "sessions/" in url else extra
            response = await host.http.post(url, content=deep[: 200 * 1024], headers=headers)
            assert response.status_code == 413, url
        await _assert_serving(host, session)
