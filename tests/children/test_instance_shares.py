"""One visitor cannot take another's per-session instances (issue 26, defect 1), through a real
host: public sessions from two loopback addresses (two principals) on the `sessionless` fixture
(a plain SDK server that counts calls in its process and sleeps on demand).

The host runs 4 per-session instances at most, 2 per principal. The attacker, at 127.0.0.1,
opens more sessions than the whole table and uses each; the visitor, at 127.0.0.2, keeps its
instance and its state, and is served while every attacker call that could run is running.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.hosting import RunningHost, host_settings, refusal, running_host, wait_until

pytestmark = pytest.mark.anyio

SESSIONLESS = "test.sessionless"
ATTACKER, VISITOR = "127.0.0.1", "127.0.0.2"
SHARE_REFUSAL = {
    "code": "unavailable",
    "message": "this visitor (its access code, API key or address) holds as many per-session instances as one "
    "may (2), each serving a call; retry in 5 s",
}


def _settings(tmp_path: Path, database_url: str) -> Any:
    return host_settings(
        tmp_path,
        database_url,
        ["sessionless"],
        max_session_instances=4,
        principal_session_instances=2,
        call_timeout_s=120.0,  # the attacker's slow calls stay in flight until the test ends them
    )


def _http(address: str, token: str | None = None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx2.AsyncHTTPTransport(local_address=address)
    return httpx2.AsyncClient(transport=transport, headers=headers, timeout=httpx2.Timeout(30, read=180))


async def _session(host: RunningHost, address: str) -> dict[str, Any]:
    """A public session opened from `address`."""
    async with _http(address) as http:
        response = await http.post(f"{host.url}/v1/sessions", json={})
    assert response.status_code == 201, response.text
    return dict(response.json())


@asynccontextmanager
async def _client(session: dict[str, Any], address: str) -> AsyncIterator[Client]:
    """An SDK client of `session` whose every request comes from `address`."""
    async with _http(address, session["token"]) as http:
        async with Client(streamable_http_client(session["mcp_url"], http_client=http), cache=None) as client:
            yield client


async def _count(session: dict[str, Any], address: str) -> int:
    """The count of `session`'s own instance after one more `count` call from `address`."""
    async with _client(session, address) as client:
        result = await client.call_tool("count", {})
    assert refusal(result) is None and result.structured_content is not None, refusal(result)
    return int(result.structured_content["count"])


def _pid(host: RunningHost, session: dict[str, Any]) -> int | None:
    """The host's pid of `session`'s instance (the child's own pid is that of its sandbox)."""
    child = host.child(SESSIONLESS, session["session_id"])
    return None if child is None else child.health().pid


async def test_one_address_with_more_sessions_than_the_table_never_evicts_anothers_instance(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as host:
        mine = await _session(host, VISITOR)
        first, pid = await _count(mine, VISITOR), _pid(host, mine)
        attackers = [await _session(host, ATTACKER) for _ in range(4)]
        for session in attackers:  # four quick calls, each in a new session: four instances wanted
            assert await _count(session, ATTACKER) == 1
        alive = [s for s in attackers if _pid(host, s) is not None]
        still = _pid(host, mine)
        again = await _count(mine, VISITOR)
    # The visitor's instance kept its process and its state; the attacker made room with its own.
    assert (first, again, still) == (1, 2, pid) and pid is not None
    assert alive == attackers[2:]


async def test_one_address_with_slow_calls_in_every_session_never_locks_another_out(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as host:
        attackers = [await _session(host, ATTACKER) for _ in range(6)]
        refused: list[dict[str, str] | None] = []
        answered = anyio.Event()

        async def slow_call(session: dict[str, Any]) -> None:
            async with _client(session, ATTACKER) as client:
                result = await client.call_tool("sleep", {"seconds": 100})
            refused.append(refusal(result))
            answered.set()

        def running() -> int:
            own = [host.child(SESSIONLESS, s["session_id"]) for s in attackers]
            return sum(1 for child in own if child is not None and child.busy)

        async with anyio.create_task_group() as attack:
            for session in attackers:
                attack.start_soon(slow_call, session)
            # Every attacker call is either running in a busy instance or answered.
            await wait_until(lambda: running() + len(refused) == len(attackers), within_s=60)
            mine = [await _session(host, VISITOR) for _ in range(2)]
            served = [await _count(session, VISITOR) for session in mine]  # refused before: the table was busy
            pids = {_pid(host, session) for session in mine}
            assert running() == 2  # the attacker's calls that run are still in flight
            attack.cancel_scope.cancel()
    assert served == [1, 1] and None not in pids and len(pids) == 2
    assert refused == [SHARE_REFUSAL] * 4
