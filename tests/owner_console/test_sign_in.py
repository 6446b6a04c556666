"""Signing in to the console against a real host (issue 26): rotating the owner token with the
command line ends every console session, and wrong tokens are throttled per client address
(429 with `Retry-After`, one warning per burst)."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import anyio
import asyncpg
import httpx2
import pytest
from pydantic import SecretStr

from mcp_host.access.owners import OwnerStore
from mcp_host.settings import Settings
from mcp_host.store.database import open_database
from owner_console.app import SIGN_IN_THROTTLE
from tests.conftest import fresh_database
from tests.hosting import RunningHost, host_settings, running_host
from tests.owner_facade.test_door import owner_token

pytestmark = pytest.mark.anyio

MCP_HOST = Path(sys.executable).parent / "mcp-host"
CSRF = re.compile(r'<meta name="csrf-token" content="([0-9a-f]{64})">')


async def _sign_in(host: RunningHost, token: str, client: str | None = None) -> httpx2.Response:
    """POST the sign-in form; `client`: the address a trusted proxy says it came from."""
    headers = {"X-Forwarded-For": client} if client else {}
    response = await host.http.post(f"{host.url}/owner/login", data={"token": token}, headers=headers)
    host.http.cookies.clear()  # each test sends the cookie it means to
    return response


def _cookie(response: httpx2.Response) -> dict[str, str]:
    name, _, value = response.headers["set-cookie"].split(";", 1)[0].partition("=")
    assert name == "mcp_host_console"
    return {"Cookie": f"mcp_host_console={value}"}


async def _rotate_with_the_cli(data_dir: Path, database_url: str) -> None:
    """`mcp-host owner token --rotate`, as the owner runs it: another process, the same database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_HOST_")}
    env["MCP_HOST_DATABASE_URL"] = database_url
    done = await anyio.run_process(
        [str(MCP_HOST), "owner", "token", "--rotate", "--data-dir", str(data_dir)], env=env, check=False
    )
    assert (done.returncode, done.stdout.decode()) == (0, f"new owner token written to {data_dir / 'owner-token'}\n")


async def test_rotating_the_owner_token_ends_every_console_session(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"])
    async with running_host(settings) as host:
        old_token = owner_token(host)
        signed = await _sign_in(host, old_token)
        headers = _cookie(signed)
        page = await host.http.get(f"{host.url}/owner/access", headers=headers)
        found = CSRF.search(page.text)
        assert page.status_code == 200 and found is not None

        await _rotate_with_the_cli(settings.data_dir, database_url)

        read = await host.http.get(f"{host.url}/owner/access", headers=headers)
        poll = await host.http.get(f"{host.url}/owner/holds.json", headers=headers)
        role = await host.http.post(
            f"{host.url}/owner/roles/put",
            headers=headers,
            data={"csrf": found.group(1), "id": "intruders", "capabilities": "test.echo"},
        )
        again = await _sign_in(host, old_token)
        new_token = owner_token(host)
        fresh = await _sign_in(host, new_token)
        roles = await host.sql.fetch("SELECT id FROM mcp_host.roles ORDER BY id")
        live = await host.sql.fetchval("SELECT count(*) FROM mcp_host.console_sessions")

    assert (read.status_code, read.headers["location"]) == (303, "/owner/login")
    assert poll.status_code == 401
    assert role.status_code == 401 and "this console session has ended" in role.text
    assert [r["id"] for r in roles] == ["public"]  # no role was made
    assert again.status_code == 401 and "set-cookie" not in again.headers
    assert new_token != old_token
    assert fresh.status_code == 303 and live == 1  # the new token's session, and only it


async def test_a_sign_in_racing_a_rotation_is_ended_by_it(postgres_server: str, tmp_path: Path) -> None:
    """A session row written while a rotation waits for the owner row is deleted by it: the
    row's foreign key holds a share lock on the owner row until the row commits."""
    async with (
        fresh_database(postgres_server) as url,
        open_database(Settings(database_url=SecretStr(url), data_dir=tmp_path)) as database,
    ):
        owners = OwnerStore(database.pool)
        owner = await owners.ensure_single_owner()
        signing_in = await asyncpg.connect(url)
        try:
            transaction = signing_in.transaction()
            await transaction.start()
            await signing_in.execute(
                "INSERT INTO mcp_host.console_sessions (cookie_sha256, owner_id, expires_at) "
                "VALUES ($1, $2, now() + interval '1 hour')",
                b"\x01" * 32,
                owner.id,
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(owners.issue_token, owner.id)
                with anyio.fail_after(10):
                    waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"
                    while not await database.pool.fetchval(waiting):  # noqa: ASYNC110 - no event tells when a backend waits
                        await anyio.sleep(0.01)
                await transaction.commit()
        finally:
            await signing_in.close()
        rows = await database.pool.fetchval("SELECT count(*) FROM mcp_host.console_sessions")
    assert rows == 0


async def test_wrong_sign_ins_are_throttled_per_address_and_logged_once_per_burst(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    free = SIGN_IN_THROTTLE.free_failures
    attacker, bystander = "198.51.100.7", "203.0.113.9"
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        with caplog.at_level(logging.INFO, logger="owner_console"):
            first = [(await _sign_in(host, "wrong", attacker)).status_code for _ in range(free + 1)]
            held = await _sign_in(host, "wrong", attacker)
            await anyio.sleep(int(held.headers["retry-after"]))  # a polite client waits as told
            after_waiting = await _sign_in(host, "wrong", attacker)  # its delay is now 2 s

            async with anyio.create_task_group() as tg:
                burst: list[httpx2.Response] = []

                async def one(token: str) -> None:
                    burst.append(await _sign_in(host, token, attacker))

                for _ in range(30):
                    tg.start_soon(one, "wrong")
                tg.start_soon(one, owner_token(host))  # the right token too: not looked at
            elsewhere = await _sign_in(host, owner_token(host), bystander)

    assert first == [401] * (free + 1)
    assert (held.status_code, held.headers["retry-after"]) == (429, "1")
    assert "Too many sign-ins from this address" in held.text
    assert after_waiting.status_code == 401
    assert len(burst) == 31
    assert {r.status_code for r in burst} == {429} and {r.headers["retry-after"] for r in burst} <= {"1", "2"}
    assert elsewhere.status_code == 303  # one address's failures never hold another back
    warnings = [r.getMessage() for r in caplog.records if r.name == "owner_console" and r.levelno >= logging.WARNING]
    assert warnings == [
        f"console: {free + 1} wrong owner tokens from {attacker} within 300 s;"
        " its sign-ins now wait 1 s, doubling up to 60 s"
    ]
