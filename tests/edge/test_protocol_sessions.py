"""2025-11-25 protocol sessions are capped per visitor session, per principal and per endpoint,
and expire when idle (issue 11, defect 2): one caller's `initialize` flood never locks another
client out, and never closes another principal's session (issue 26, defect 6: principals at one
address apart, the endpoint's cap shared). A session born on one replica is adopted by another
its client's requests reach (issue 16: two hosts on one database)."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from inline_snapshot import snapshot
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError

from mcp_host.edge.protocol_sessions import ProtocolSessionLimits
from mcp_host.settings import Settings
from mcp_host.store import open_database, record_key
from mcp_host.store.protocol_records import ProtocolSessionRecords
from owner_facade import OWNER_PATH
from tests.hosting import RunningHost, host_settings, running_host, wait_until

pytestmark = pytest.mark.anyio

LEGACY = "2025-11-25"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


def test_defaults_are_pinned(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert {
        "per_session": settings.principals.session_protocol_sessions,
        "per_principal": settings.principals.protocol_sessions,
        "max": settings.principals.max_protocol_sessions,
        "idle_s": settings.protocol_sessions.idle_s,
        "rest_s": settings.protocol_sessions.rest_s,
    } == snapshot({"per_session": 16, "per_principal": 256, "max": 10000, "idle_s": 300.0, "rest_s": 60.0})
    assert ProtocolSessionLimits() == ProtocolSessionLimits(
        per_session=settings.principals.session_protocol_sessions,
        per_principal=settings.principals.protocol_sessions,
        host=settings.principals.max_protocol_sessions,
        idle_s=settings.protocol_sessions.idle_s,
        rest_s=settings.protocol_sessions.rest_s,
    )


@pytest.mark.parametrize(("per_session", "per_principal", "host_wide"), [(8, 100, 100), (8, 200, 100), (20, 10, 100)])
def test_one_principal_may_never_be_able_to_fill_the_host_wide_cap(
    tmp_path: Path, per_session: int, per_principal: int, host_wide: int
) -> None:
    with pytest.raises(ValidationError, match="principal_max_protocol_sessions < protocol_sessions_max"):
        Settings(
            data_dir=tmp_path,
            session_max_protocol_sessions=per_session,
            principal_max_protocol_sessions=per_principal,
            protocol_sessions_max=host_wide,
        )


class Door:
    """One credential on one MCP endpoint, spoken to with raw HTTP."""

    def __init__(self, http: httpx2.AsyncClient, url: str, token: str) -> None:
        self.http = http
        self.url = url
        self.headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}

    async def initialize(self) -> httpx2.Response:
        return await self.http.post(self.url, json=INITIALIZE, headers=self.headers)

    async def open(self) -> str:
        response = await self.initialize()
        assert response.status_code == 200, response.text
        return response.headers["mcp-session-id"]

    async def alive(self, protocol_session: str) -> bool:
        response = await self.http.post(
            self.url, json=PING, headers={**self.headers, "Mcp-Session-Id": protocol_session}
        )
        assert response.status_code in (200, 404), response.text
        return response.status_code == 200

    async def delete(self, protocol_session: str) -> int:
        response = await self.http.delete(self.url, headers={**self.headers, "Mcp-Session-Id": protocol_session})
        return response.status_code

    @asynccontextmanager
    async def busy(self, protocol_session: str) -> AsyncIterator[None]:
        """Hold the session's GET stream open (a request in flight: never idle)."""
        headers = {**self.headers, "Accept": "text/event-stream", "Mcp-Session-Id": protocol_session}
        async with self.http.stream("GET", self.url, headers=headers) as response:
            assert response.status_code == 200
            yield


async def visitor(host: RunningHost, code: str | None = None) -> Door:
    """A new visitor session (with `code`, that access code's; else public) and its MCP door."""
    session = await host.new_session(None if code is None else {"code": code})
    return Door(host.http, session["mcp_url"], session["token"])


async def codes(host: RunningHost, count: int) -> list[str]:
    """`count` access codes of one role: each is a principal of its own, whatever the address."""
    access, owner_id = host.access, host.owner_id
    await access.put_role(owner_id, "guests", [])
    return [(await access.create_code(owner_id, "guests"))[0] for _ in range(count)]


def owner(host: RunningHost) -> Door:
    return Door(host.http, f"{host.url}{OWNER_PATH}", host.owner_token())


def _settings(tmp_path: Path, database_url: str, **caps: Any) -> Settings:
    return host_settings(tmp_path, database_url, ["echo"], **caps)


async def test_one_principal_flooding_initialize_cannot_lock_another_out(tmp_path: Path, database_url: str) -> None:
    caps = {"session_max_protocol_sessions": 4, "principal_max_protocol_sessions": 8, "protocol_sessions_max": 12}
    async with running_host(_settings(tmp_path, database_url, **caps)) as host:
        flooder = await visitor(host)
        opened = [await flooder.open() for _ in range(30)]  # 2.5 x the host-wide cap
        # Each new one closed the flooder's least recently used one: only its last 4 live.
        assert [await flooder.alive(s) for s in opened] == [False] * 26 + [True] * 4
        other = await visitor(host)
        response = await other.initialize()
        assert response.status_code == 200, response.text
        assert await other.alive(response.headers["mcp-session-id"])


async def test_concurrent_openings_never_take_the_same_place(tmp_path: Path, database_url: str) -> None:
    """24 initializes at once from one principal (cap 4): each new one's place is reserved before
    it waits for the session it closed, so two never take the place one eviction freed."""
    caps = {"session_max_protocol_sessions": 4, "principal_max_protocol_sessions": 8, "protocol_sessions_max": 12}
    async with running_host(_settings(tmp_path, database_url, **caps)) as host:
        flooder = await visitor(host)
        first = [await flooder.open() for _ in range(4)]
        opened: list[str] = []

        async def open_one() -> None:
            response = await flooder.initialize()
            if response.status_code == 200:
                opened.append(response.headers["mcp-session-id"])
            else:
                assert response.status_code == 429, response.text

        async with anyio.create_task_group() as tg:
            for _ in range(24):
                tg.start_soon(open_one)
        alive = [s for s in first + opened if await flooder.alive(s)]
        assert len(alive) <= 4, f"{len(alive)} protocol sessions of one principal answer (cap 4)"


async def test_a_principal_whose_sessions_are_all_busy_gets_429_and_others_still_get_in(
    tmp_path: Path, database_url: str
) -> None:
    caps = {"session_max_protocol_sessions": 2, "principal_max_protocol_sessions": 8, "protocol_sessions_max": 12}
    async with running_host(_settings(tmp_path, database_url, **caps)) as host:
        busy = await visitor(host)
        first, second = await busy.open(), await busy.open()
        async with busy.busy(first), busy.busy(second):
            refused = await busy.initialize()
            assert (refused.status_code, refused.headers["retry-after"]) == (429, "30")
            assert refused.json() == snapshot(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {
                        "code": -32600,
                        "message": "too many protocol sessions open and in use for this visitor (its session, access code, API key or address); end one (DELETE) or retry later",  # noqa: E501
                    },
                }
            )
            other = await visitor(host)
            assert (await other.initialize()).status_code == 200
            assert await busy.alive(first) and await busy.alive(second)
        # Once the host has seen its streams end they are idle, and the next one closes the one
        # that ended first.
        with anyio.fail_after(5):
            while (response := await busy.initialize()).status_code == 429:  # noqa: ASYNC110 - no event for it
                await anyio.sleep(0.02)
        assert response.status_code == 200
        third = response.headers["mcp-session-id"]
        assert sorted([await busy.alive(first), await busy.alive(second)]) == [False, True]
        assert await busy.alive(third)


async def test_public_sessions_at_one_address_share_its_cap_and_close_their_own_first(
    tmp_path: Path, database_url: str
) -> None:
    caps = {"session_max_protocol_sessions": 3, "principal_max_protocol_sessions": 4, "protocol_sessions_max": 12}
    async with running_host(_settings(tmp_path, database_url, **caps)) as host:
        a, b = await visitor(host), await visitor(host)  # public, both at 127.0.0.1: one principal
        a_sessions = [await a.open() for _ in range(3)]
        b_sessions = [await b.open() for _ in range(3)]
        # The address holds 4: each of b's openings past that closed b's own oldest idle one.
        assert [await a.alive(s) for s in a_sessions] == [True, True, True]
        assert [await b.alive(s) for s in b_sessions] == [False, False, True]
        c = await visitor(host)  # a visitor session with none of its own closes the oldest of the address
        assert await c.alive(await c.open())
        assert [await a.alive(s) for s in a_sessions] == [False, True, True]


async def test_a_principals_flood_closes_only_its_own_and_anothers_idle_session_keeps_answering(
    tmp_path: Path, database_url: str
) -> None:
    """Issue 26, defect 6: one visitor's initializes at a shared address closed every other
    visitor's idle protocol session there. A session opened with an access code is its code's
    principal, wherever it comes from; the public flood at the same address closes its own."""
    caps = {"session_max_protocol_sessions": 4, "principal_max_protocol_sessions": 6, "protocol_sessions_max": 24}
    async with running_host(_settings(tmp_path, database_url, **caps)) as host:
        [code] = await codes(host, 1)
        other = await visitor(host, code)  # at 127.0.0.1 too
        kept = [await other.open(), await other.open()]
        flooders = [await visitor(host) for _ in range(4)]  # public: the principal 127.0.0.1
        flooded = [await flooder.open() for _ in range(5) for flooder in flooders]
        assert [await other.alive(s) for s in kept] == [True, True]
        alive = [s for n, s in enumerate(flooded) if await flooders[n % 4].alive(s)]
        assert len(alive) == 6  # its principal's cap
        assert await other.alive(await other.open())  # the other principal still opens its own


async def test_a_full_endpoint_refuses_a_new_principal_and_closes_nobodys_session(
    tmp_path: Path, database_url: str
) -> None:
    """The endpoint holds 8, and its last 2 go only to principals holding fewer than one visitor
    session may (2). Full, it refuses a new principal 503 `unavailable` with Retry-After rather
    than closing anyone's session; a principal holding some makes room by closing its own oldest
    idle one."""
    caps = {"session_max_protocol_sessions": 2, "principal_max_protocol_sessions": 4, "protocol_sessions_max": 8}
    async with running_host(_settings(tmp_path, database_url, **caps)) as host:
        a, b, c, d, e = await codes(host, 5)
        doors = [await visitor(host, a), await visitor(host, a), await visitor(host, b)]
        held = [(door, await door.open()) for door in doors for _ in range(2)]  # a holds 4, b 2
        async with doors[2].busy(held[4][1]), doors[2].busy(held[5][1]):
            # b, holding 2 and none idle, may not take the last quarter; c and d, holding none, may.
            assert (await (await visitor(host, b)).initialize()).status_code == 503
            held += [(door, await door.open()) for door in (await visitor(host, c), await visitor(host, d))]
        refused = await (await visitor(host, e)).initialize()
        assert (refused.status_code, refused.headers["retry-after"]) == (503, "30")
        assert refused.json() == snapshot(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32603,
                    "message": "the host holds as many protocol sessions as it may; retry later",
                    "data": {"code": "unavailable"},
                },
            }
        )
        assert [await door.alive(s) for door, s in held] == [True] * 8
        swapped = await doors[2].open()  # b closes its own oldest idle one for it
        assert [await door.alive(s) for door, s in held] == [True] * 4 + [False, True] + [True] * 2
        assert await doors[2].alive(swapped)


async def test_a_deleted_session_frees_its_place(tmp_path: Path, database_url: str) -> None:
    caps = {"session_max_protocol_sessions": 2, "principal_max_protocol_sessions": 8, "protocol_sessions_max": 12}
    async with running_host(_settings(tmp_path, database_url, **caps)) as host:
        door = await visitor(host)
        first, second = await door.open(), await door.open()
        assert await door.delete(second) == 200
        third = await door.open()
        assert [await door.alive(s) for s in (first, second, third)] == [True, False, True]


async def test_the_owner_endpoint_is_capped_too(tmp_path: Path, database_url: str) -> None:
    caps = {"session_max_protocol_sessions": 2, "principal_max_protocol_sessions": 8, "protocol_sessions_max": 12}
    async with running_host(_settings(tmp_path, database_url, **caps)) as host:
        door = owner(host)
        opened = [await door.open() for _ in range(5)]
        assert [await door.alive(s) for s in opened] == [False, False, False, True, True]


async def test_idle_protocol_sessions_expire(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    idle_s = 0.5
    caplog.set_level(logging.INFO, logger="mcp.server.streamable_http_manager")
    async with running_host(_settings(tmp_path, database_url, protocol_session_idle_s=idle_s)) as host:
        door = await visitor(host)
        kept, left = await door.open(), await door.open()
        started = anyio.current_time()
        async with door.busy(kept):  # in use: never idle
            # The SDK says when it ends one (a ping would count as use and restart the clock).
            await wait_until(lambda: any(f"{left} idle timeout" in r.getMessage() for r in caplog.records))
            assert anyio.current_time() - started >= idle_s
            assert not await door.alive(left)
            assert await door.alive(kept)


# -- adoption: a session born on one replica is carried on by another (issue 16) ---------------

SHARED_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()  # MCP_HOST_SECRET_KEY of both replicas
TOOLS_CALL = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "echo", "arguments": {"text": "hi"}},
}


@asynccontextmanager
async def two_replicas(tmp_path: Path, database_url: str) -> AsyncIterator[tuple[RunningHost, RunningHost]]:
    """Two hosts on one database with one host key (a visitor session is good on both)."""
    settings = [host_settings(tmp_path / name, database_url, ["echo"], secret_key=SHARED_KEY) for name in "ab"]
    async with running_host(settings[0]) as a, running_host(settings[1]) as b:
        yield a, b


def on(running: RunningHost, door: Door) -> Door:
    """The same credential and endpoint path, reached through `running`'s address."""
    path = door.url.split("/", 3)[3]
    return Door(running.http, f"{running.url}/{path}", door.headers["Authorization"].removeprefix("Bearer "))


def sse_result(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer in a POST's response (JSON or one SSE event)."""
    if response.headers["content-type"].startswith("application/json"):
        return dict(response.json())
    data = [line.removeprefix("data:").strip() for line in response.text.splitlines() if line.startswith("data:")]
    return dict(json.loads(data[-1]))


async def test_a_session_born_on_one_replica_is_adopted_by_another(tmp_path: Path, database_url: str) -> None:
    async with two_replicas(tmp_path, database_url) as (a, b):
        door_a = await visitor(a)
        door_b = on(b, door_a)
        opened = await door_a.open()
        assert await door_a.alive(opened)
        # Replica b never saw it: it opens a session of its own for the client and renames it.
        headers = {**door_b.headers, "Mcp-Session-Id": opened, "MCP-Protocol-Version": LEGACY}
        called = await b.http.post(door_b.url, json=TOOLS_CALL, headers=headers)
        assert called.status_code == 200, called.text
        assert called.headers.get("mcp-session-id", opened) == opened
        assert sse_result(called)["result"]["structuredContent"] == {"text": "hi"}
        assert await door_b.alive(opened) and await door_a.alive(opened)
        # The client ends it through b: the record goes, and a third replica could not adopt it.
        assert await door_b.delete(opened) == 200
        assert not await door_b.alive(opened)
        async with open_database(Settings(data_dir=tmp_path / "probe", database_url=database_url)) as database:
            rows = await database.pool.fetchval(
                "SELECT count(*) FROM mcp_host.protocol_sessions WHERE key = $1", record_key(opened.encode())
            )
        assert rows == 0


async def test_a_deleted_session_is_forgotten_before_its_client_hears_so(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its record is forgotten slowly (a busy database): a request its client sends the moment
    # the DELETE is answered must not find the record and adopt the session back.
    forget = ProtocolSessionRecords.forget

    async def slow_forget(self: ProtocolSessionRecords, key: bytes) -> None:
        await anyio.sleep(0.5)
        await forget(self, key)

    monkeypatch.setattr(ProtocolSessionRecords, "forget", slow_forget)
    async with two_replicas(tmp_path, database_url) as (a, b):
        door_a = await visitor(a)
        door_b = on(b, door_a)
        opened = await door_a.open()
        assert await door_b.alive(opened)  # adopted by b
        assert await door_b.delete(opened) == 200
        assert not await door_b.alive(opened)


async def test_a_session_is_adopted_once_under_concurrent_requests(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.edge.protocol_sessions")
    async with two_replicas(tmp_path, database_url) as (a, b):
        door_a = await visitor(a)
        door_b = on(b, door_a)
        opened = await door_a.open()
        statuses: list[int] = []

        async def ping(n: int) -> None:
            headers = {**door_b.headers, "Mcp-Session-Id": opened}
            response = await b.http.post(door_b.url, json={**PING, "id": 100 + n}, headers=headers)
            statuses.append(response.status_code)

        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(ping, n)
        assert statuses == [200] * 8
        adopted = [r for r in caplog.records if r.getMessage().startswith("adopted a protocol session")]
        assert len(adopted) == 1  # one session opened on b for all eight
        assert await door_b.alive(opened)


async def test_another_principal_or_an_unrecorded_id_still_gets_404(tmp_path: Path, database_url: str) -> None:
    async with two_replicas(tmp_path, database_url) as (a, b):
        owner_of_it = await visitor(a)
        opened = await owner_of_it.open()
        stranger = on(b, await visitor(a))  # another visitor session, on its own endpoint
        assert not await stranger.alive(opened)
        assert not await on(b, owner_of_it).alive("0" * 32)  # never born anywhere
        # The rightful client is still adopted after the stranger's try.
        assert await on(b, owner_of_it).alive(opened)


async def test_the_python_sdk_client_carries_on_when_its_requests_reach_another_replica(
    tmp_path: Path, database_url: str
) -> None:
    async with two_replicas(tmp_path, database_url) as (a, b):
        session = await a.new_session()
        moved = False

        async def balance(request: httpx2.Request) -> None:
            """A load balancer whose first choice went away: every request goes to b from now on."""
            if moved:
                request.url = request.url.copy_with(port=int(b.url.rsplit(":", 1)[1]))
                request.headers["host"] = request.url.netloc.decode()  # each replica allows its own

        headers = {"Authorization": f"Bearer {session['token']}"}
        async with httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30, read=60), event_hooks={"request": [balance]}
        ) as http:
            transport = streamable_http_client(session["mcp_url"], http_client=http)
            async with Client(transport, mode="legacy", cache=None) as client:
                assert (await client.call_tool("echo", {"text": "on a"})).structured_content == {"text": "on a"}
                moved = True
                for n in range(3):
                    result = await client.call_tool("echo", {"text": f"on b {n}"})
                    assert result.structured_content == {"text": f"on b {n}"}


# -- resting: an idle session ends in the SDK and its next request opens it again (issue 26, defect 7)


def _logged(caplog: pytest.LogCaptureFixture, ending: str) -> int:
    return sum(r.getMessage().endswith(ending) for r in caplog.records if r.name == "mcp_host.edge.protocol_sessions")


def _rested(caplog: pytest.LogCaptureFixture) -> int:
    return _logged(caplog, " rests (200)")


def _woke(caplog: pytest.LogCaptureFixture) -> int:
    return _logged(caplog, " woke")


@asynccontextmanager
async def resting(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture, count: int = 1, **caps: Any
) -> AsyncIterator[tuple[RunningHost, Door, list[str]]]:
    """A host whose idle protocol sessions rest after 0.2 s, and `count` sessions of one visitor
    that rest there (the log says when each has)."""
    caplog.set_level(logging.DEBUG, logger="mcp_host.edge.protocol_sessions")
    async with running_host(_settings(tmp_path, database_url, protocol_session_rest_s=0.2, **caps)) as host:
        door = await visitor(host)
        opened = [await door.open() for _ in range(count)]
        await wait_until(lambda: _rested(caplog) == count)
        yield host, door, opened


async def test_an_idle_session_rests_and_its_next_request_wakes_it_under_the_id_its_client_knows(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with resting(tmp_path, database_url, caplog) as (_, door, [opened]):
        call = {**TOOLS_CALL, "id": 7}
        answer = await door.http.post(door.url, json=call, headers={**door.headers, "Mcp-Session-Id": opened})
        assert (answer.status_code, answer.headers["mcp-session-id"]) == (200, opened)
        assert '"text":"hi"' in answer.text.replace(" ", "")
        assert (_woke(caplog), await door.alive(opened)) == (1, True)  # awake: no second opening
        await wait_until(lambda: _rested(caplog) == 2)  # idle again, it rests again
        assert await door.delete(opened) == 200  # a DELETE wakes it to end it in the SDK
        assert not await door.alive(opened)


async def test_requests_that_come_together_wake_a_resting_session_once(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with resting(tmp_path, database_url, caplog) as (_, door, [opened]):
        answers: list[int] = []

        async def ping(n: int) -> None:  # each its own request id: one in flight per id
            headers = {**door.headers, "Mcp-Session-Id": opened}
            answers.append((await door.http.post(door.url, json={**PING, "id": 10 + n}, headers=headers)).status_code)

        async with anyio.create_task_group() as tg:
            for n in range(6):
                tg.start_soon(ping, n)
        assert (answers, _woke(caplog)) == ([200] * 6, 1)


async def test_a_resting_session_whose_record_is_gone_has_ended(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with resting(tmp_path, database_url, caplog) as (host, door, [opened]):
        await host.sql.execute("DELETE FROM mcp_host.protocol_sessions")
        assert not await door.alive(opened)
        assert (await door.open()) != opened  # its place was given back


async def test_a_resting_session_whose_record_cannot_be_read_is_answered_503_and_keeps_resting(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with resting(tmp_path, database_url, caplog) as (host, door, [opened]):
        pool = host.sql
        await pool.execute("ALTER TABLE mcp_host.protocol_sessions RENAME TO protocol_sessions_away")
        try:
            refused = await door.http.post(door.url, json=PING, headers={**door.headers, "Mcp-Session-Id": opened})
        finally:
            await pool.execute("ALTER TABLE mcp_host.protocol_sessions_away RENAME TO protocol_sessions")
        assert (refused.status_code, refused.headers["retry-after"]) == (503, "30")
        assert refused.json() == snapshot(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -32603,
                    "message": "this protocol session cannot be resumed now; retry later",
                    "data": {"code": "unavailable"},
                },
            }
        )
        assert await door.alive(opened)  # the retry wakes it


async def test_a_resting_session_closed_to_make_room_is_gone_and_the_others_wake(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caps = {"session_max_protocol_sessions": 2, "principal_max_protocol_sessions": 8, "protocol_sessions_max": 12}
    async with resting(tmp_path, database_url, caplog, 2, **caps) as (_, door, [first, second]):
        third = await door.open()  # closes the least recently used, resting: only its record goes
        assert [await door.alive(s) for s in (first, second, third)] == [False, True, True]


async def test_a_session_whose_stream_is_open_never_rests_and_an_sdk_client_carries_on(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp_host.edge.protocol_sessions")
    async with running_host(_settings(tmp_path, database_url, protocol_session_rest_s=0.2)) as host:
        session = await host.new_session()
        async with host.client(session, mode="legacy") as client:  # it holds its GET stream open
            assert (await client.call_tool("echo", {"text": "one"})).structured_content == {"text": "one"}
            door = await visitor(host)
            idle = await door.open()
            await wait_until(lambda: _rested(caplog) == 1)  # the idle one rests, rest_s after its use
            assert (await client.call_tool("echo", {"text": "two"})).structured_content == {"text": "two"}
            assert _woke(caplog) == 0
            assert await door.alive(idle)
        assert _rested(caplog) == 1
