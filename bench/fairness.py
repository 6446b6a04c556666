"""The abuse suite (issue 26): what one stranger can do to every other visitor of a host.

Not part of `scripts/bench` (it runs for minutes). Each leg starts its own `mcp-host serve`
(embedded PostgreSQL, sandbox on, default settings unless `--env NAME=VALUE`) and plays one
attack from loopback addresses (Linux routes all of 127.0.0.0/8 to `lo`; the host trusts only
127.0.0.1 as a proxy, so each address is a principal of its own):

  instances  one public visitor (127.0.0.2) opens K sessions (`--principal-sessions`, default
             32, 64 and 128) on a per-session plugin (`keeper_plugin/`) and keeps a slow call in
             flight in each, while three other visitors (127.0.0.3-5), one session each, call
             every second. Each victim told its instance a value first; an instance stopped to
             make room forgets it. Before the attack the victims run alone (the idle figures).
             Reports the victims' success rate, p50/p99 and p99 over the idle p99, the values
             forgotten, and the attacker's answers by outcome. The attacker's clients run in a
             process of their own at nice 10 (as on a machine of their own); the host runs at
             the normal priority and serves all they send.
  bodies     17 addresses (127.0.0.10-26), `--slow-per-address` workers each, keep connections
             open that send a request head with a 1 MB Content-Length and then one byte of
             body every 2 s (a worker opens another when the host ends one); a normal client
             (127.0.0.3) opens a session every 0.25 s. Reports the normal client's statuses
             and p50/p99 before and during, and how (status) and when (seconds) the host
             ended the slow connections.
  turns      one public session posts turns (60 KiB messages) as fast as it can for
             `--seconds`: answers by status, and the rows and bytes of `mcp_host.turns`.
  holds      the owner's one rule holds every call; one public session calls as fast as it
             can for `--seconds`: answers by outcome and the holds pending in the database.
  rotation   the console signed in with the owner token, then `mcp-host owner token
             --rotate`: what the old cookie gets on a page and on a write (a new role).

RSS per 1,000 abandoned sessions in each era: `bench/memory.py` (legs m2 and m3).
Results go to bench-results/fairness.json.

    .venv/bin/python bench/fairness.py [--legs instances,bodies,turns,holds,rotation] [--quick]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.streams.text
import anyio.to_thread
import asyncpg
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from procs import Processes
from servers import MCP_HOST, REPO, RunningHost, start_host

from mcp_host.settings import PrincipalSettings

RESULTS = REPO / "bench-results" / "fairness.json"
KEEPER = Path(__file__).resolve().parent / "keeper_plugin"
LEGS = ("instances", "bodies", "turns", "holds", "rotation")
ERA = "2026-07-28"
# The host's default (bench/servers.py lifts it for the other benches); older hosts ignore it.
_DEFAULT_PUBLIC_PER_MINUTE = 60


def _percentiles(samples: list[float]) -> dict[str, float | None]:
    if not samples:
        return {"p50_ms": None, "p99_ms": None}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 1), "p99_ms": round(p99 * 1000, 1)}


@asynccontextmanager
async def _host(env: dict[str, str], *, plugins: bool) -> AsyncIterator[tuple[RunningHost, Path]]:
    """A host with the keeper plugin (or none) in a fresh folder; yields it and its data dir."""
    workdir = Path(tempfile.mkdtemp(prefix="mcp-fair-", dir="/tmp"))
    procs = Processes(workdir)
    try:
        folder = workdir / "plugins"
        folder.mkdir()
        if plugins:
            shutil.copytree(KEEPER, folder / "keeper")
        data = workdir / "d"
        defaults = {  # the host's own fair shares, which `start_host` lifts for the other benches
            "MCP_HOST_PRINCIPAL_PUBLIC_SESSIONS_PER_MINUTE": str(_DEFAULT_PUBLIC_PER_MINUTE),
            "MCP_HOST_PRINCIPAL_REQUESTS_PER_S": str(PrincipalSettings.model_fields["requests_per_s"].default),
            "MCP_HOST_PRINCIPAL_REQUESTS_BURST": str(PrincipalSettings.model_fields["requests_burst"].default),
        }
        yield await start_host(procs, "host", plugins=folder, data_dir=data, settings=defaults | env), data
    finally:
        procs.close()


def _http(source: str, token: str | None = None, timeout: float = 30) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx2.AsyncHTTPTransport(local_address=source, limits=httpx2.Limits(max_connections=400))
    return httpx2.AsyncClient(transport=transport, headers=headers, timeout=httpx2.Timeout(timeout, read=150))


async def _session(host: RunningHost | _Remote, source: str) -> dict[str, Any]:
    async with _http(source) as http:
        response = await http.post(f"{host.url}/v1/sessions", json={"visitor": {"name": "fair"}})
    if response.status_code != 201:
        raise RuntimeError(f"POST /v1/sessions from {source}: {response.status_code} {response.text[:200]}")
    return dict(response.json())


async def _client(stack: AsyncExitStack, session: dict[str, Any], source: str) -> Client:
    http = await stack.enter_async_context(_http(source, session["token"]))
    return await stack.enter_async_context(
        Client(streamable_http_client(session["mcp_url"], http_client=http), mode=ERA, cache=None)
    )


def _outcome(result: Any) -> str:
    if not result.is_error:
        return "ok"
    content = result.structured_content or {}
    return str(content.get("code", "error"))


# -- instances ---------------------------------------------------------------------------------


async def _victims(host: RunningHost, seconds: float) -> dict[str, Any]:
    """Three visitors, each calling `recall` once a second for `seconds`, from its own address."""
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    forgotten = 0

    async def victim(n: int) -> None:
        nonlocal forgotten
        source = f"127.0.0.{3 + n}"
        value = f"victim-{n}"
        async with AsyncExitStack() as stack:
            client = await _client(stack, await _session(host, source), source)
            await client.call_tool("remember", {"value": value})
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    result = await client.call_tool("recall", {})
                except Exception as exc:  # a transport failure counts as a failed call
                    outcomes[type(exc).__name__] += 1
                else:
                    outcome = _outcome(result)
                    outcomes[outcome] += 1
                    if outcome == "ok":
                        latencies.append(time.monotonic() - started)
                        if (result.structured_content or {}).get("value") != value:
                            forgotten += 1
                            await client.call_tool("remember", {"value": value})
                await anyio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(victim, n)
    calls = sum(outcomes.values())
    return {
        "calls": calls,
        "success_rate": round(outcomes["ok"] / calls, 4) if calls else None,
        "outcomes": dict(outcomes),
        "forgotten": forgotten,
        **_percentiles(latencies),
    }


async def _attacker(host: RunningHost | _Remote, sessions: int, stop: anyio.Event, ready: anyio.Event) -> Counter[str]:
    """`sessions` public sessions from 127.0.0.2, each keeping one slow call in flight."""
    outcomes: Counter[str] = Counter()
    opened = 0

    async def one() -> None:
        nonlocal opened
        async with AsyncExitStack() as stack:  # entered and left in this task
            try:
                client = await _client(stack, await _session(host, "127.0.0.2"), "127.0.0.2")
            except Exception as exc:
                outcomes[f"open:{type(exc).__name__}"] += 1
                return
            finally:
                opened += 1
                if opened == sessions:
                    ready.set()
            while not stop.is_set():
                try:
                    result = await client.call_tool("slow", {"seconds": 20})
                except Exception as exc:
                    outcomes[type(exc).__name__] += 1
                    await anyio.sleep(0.5)
                    continue
                outcomes[_outcome(result)] += 1
                if result.is_error:
                    await anyio.sleep(0.5)  # a refused attacker tries again, as a real one would

    async with anyio.create_task_group() as tg:
        for _ in range(sessions):
            tg.start_soon(one)
        await stop.wait()
        tg.cancel_scope.cancel()
    return outcomes


@dataclass(frozen=True)
class _Remote:
    """A host the attacker process knows by its URL only."""

    url: str


async def _attack_into(
    attack: dict[str, Any], host: RunningHost, sessions: int, stop: anyio.Event, ready: anyio.Event
) -> None:
    """The attacker in a process of its own, at `nice 10`: an attacker's client runs on its own
    machine, and in this process it would slow the victims' client (one event loop) and take
    the CPU of a 2-core machine before the host's; the host still serves every request it
    sends. It says "ready" once its sessions are open and its outcomes (JSON) when its stdin
    closes."""
    command = ["nice", "-n", "10", sys.executable, __file__, "--attack", host.url, str(sessions)]
    async with await anyio.open_process(command, stderr=None) as attacker:
        assert attacker.stdout is not None and attacker.stdin is not None
        lines = anyio.streams.text.TextReceiveStream(attacker.stdout)
        said = ""
        async for chunk in lines:
            said += chunk
            if "ready\n" in said:
                ready.set()
                said = said.split("ready\n", 1)[1]
                break
        await stop.wait()
        await attacker.stdin.aclose()
        async for chunk in lines:
            said += chunk
    attack["outcomes"] = json.loads(said)


async def _attack_alone(url: str, sessions: int) -> None:
    """The attacker process (`--attack URL SESSIONS`): see `_attack_into`."""
    stop, ready = anyio.Event(), anyio.Event()
    outcomes: Counter[str] = Counter()

    async def run() -> None:
        outcomes.update(await _attacker(_Remote(url), sessions, stop, ready))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await ready.wait()
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the bench closes it
        stop.set()
    print(json.dumps(dict(outcomes)), flush=True)


async def leg_instances(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with _host(args.env, plugins=True) as (host, _):
        results["idle"] = await _victims(host, args.seconds / 2)
        print(f"[instances] idle: {results['idle']}", flush=True)
        for count in args.principal_sessions:
            stop, ready = anyio.Event(), anyio.Event()
            attack: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:
                tg.start_soon(_attack_into, attack, host, count, stop, ready)
                with anyio.move_on_after(60):
                    await ready.wait()
                await anyio.sleep(2)  # the slow calls are in flight
                victims = await _victims(host, args.seconds)
                stop.set()
            idle_p99 = results["idle"]["p99_ms"]
            if victims["p99_ms"] is not None and idle_p99:
                victims["p99_over_idle"] = round(victims["p99_ms"] / idle_p99, 2)
            results[f"attacker_{count}_sessions"] = {"victims": victims, "attacker": attack.get("outcomes")}
            print(f"[instances] {count} sessions: {results[f'attacker_{count}_sessions']}", flush=True)
    return results


# -- bodies ------------------------------------------------------------------------------------


async def leg_bodies(args: argparse.Namespace) -> dict[str, Any]:
    port_url = ""
    ended: Counter[str] = Counter()
    ended_after: list[float] = []
    opened = 0

    async def normal(seconds: float) -> dict[str, Any]:
        statuses: Counter[int] = Counter()
        latencies: list[float] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                async with _http("127.0.0.3", timeout=10) as http:
                    response = await http.post(f"{port_url}/v1/sessions", json={})
                statuses[response.status_code] += 1
                latencies.append(time.monotonic() - started)
            except Exception as exc:
                statuses[-1] += 1
                print(f"[bodies] normal client: {type(exc).__name__}", flush=True)
            await anyio.sleep(max(0.0, 0.25 - (time.monotonic() - started)))
        return {"statuses": {str(k): v for k, v in statuses.items()}, **_percentiles(latencies)}

    async def slow_body(source: str, host: str, port: int, stop: anyio.Event) -> None:
        """One attacker's worker: a slow body, and another as soon as the host ends one."""
        while not stop.is_set():
            await one_slow_body(source, host, port, stop)
            await anyio.sleep(0.5)

    async def one_slow_body(source: str, host: str, port: int, stop: anyio.Event) -> None:
        nonlocal opened
        started = time.monotonic()
        try:
            stream = await anyio.connect_tcp(host, port, local_host=source)
        except OSError:
            ended["refused at connect"] += 1
            return
        opened += 1
        head = (
            f"POST /v1/sessions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000000\r\n\r\n{"
        )
        async with stream:
            try:
                await stream.send(head.encode())
                while not stop.is_set():
                    with anyio.move_on_after(2):
                        answer = await stream.receive()
                        status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "closed"
                        ended[status] += 1
                        ended_after.append(time.monotonic() - started)
                        return
                    await stream.send(b" ")
                ended["still open at the end"] += 1
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                ended["closed"] += 1
                ended_after.append(time.monotonic() - started)

    async with _host(args.env, plugins=False) as (host, _):
        port_url = host.url
        address, port = host.url.removeprefix("http://").split(":")
        before = await normal(args.seconds / 4)
        print(f"[bodies] before: {before}", flush=True)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            for a in range(10, 27):
                for _ in range(args.slow_per_address):
                    tg.start_soon(slow_body, f"127.0.0.{a}", address, int(port), stop)
            await anyio.sleep(3)
            during = await normal(args.seconds)
            stop.set()
    result = {
        "slow_connections": {"addresses": 17, "workers_per_address": args.slow_per_address, "opened": opened},
        "normal_before": before,
        "normal_during": during,
        "slow_ended_by": dict(ended),
        "slow_ended_after_s": {
            "median": round(statistics.median(ended_after), 1) if ended_after else None,
            "max": round(max(ended_after), 1) if ended_after else None,
        },
    }
    print(f"[bodies] {result}", flush=True)
    return result


# -- turns and holds ---------------------------------------------------------------------------


def _dsn(data: Path) -> str:
    return f"postgresql://postgres@/postgres?host={data / 'postgres'}&port=5432"


async def _table(data: Path, table: str, where: str = "") -> dict[str, int]:
    connection = await asyncpg.connect(_dsn(data))
    try:
        rows = await connection.fetchval(f"SELECT count(*) FROM mcp_host.{table} {where}")
        size = await connection.fetchval(f"SELECT pg_total_relation_size('mcp_host.{table}')")
    finally:
        await connection.close()
    return {"rows": int(rows), "bytes": int(size)}


async def leg_turns(args: argparse.Namespace) -> dict[str, Any]:
    statuses: Counter[int] = Counter()
    # Random text: PostgreSQL compresses a repeated character to almost nothing.
    message = base64.b64encode(os.urandom(45 * 1024)).decode()  # 60 KiB: under the 64 KiB body cap
    async with _host(args.env, plugins=False) as (host, data):
        before = await _table(data, "turns")
        session = await _session(host, "127.0.0.2")
        url = f"{host.url}/v1/sessions/{session['session_id']}/turns"
        deadline = time.monotonic() + args.seconds
        async with _http("127.0.0.2", session["token"]) as http:

            async def post() -> None:
                while time.monotonic() < deadline:
                    response = await http.post(url, json={"message": message})
                    statuses[response.status_code] += 1
                    if response.status_code != 201:
                        await anyio.sleep(0.05)

            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(post)
        after = await _table(data, "turns")
    result = {
        "seconds": args.seconds,
        "statuses": {str(k): v for k, v in statuses.items()},
        "turns_rows_added": after["rows"] - before["rows"],
        "turns_bytes_added": after["bytes"] - before["bytes"],
    }
    print(f"[turns] {result}", flush=True)
    return result


async def _owner_call(host: RunningHost, data: Path, tool: str, arguments: dict[str, Any]) -> Any:
    token = (data / "owner-token").read_text().strip()
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(_http("127.0.0.1", token))
        client = await stack.enter_async_context(
            Client(streamable_http_client(f"{host.url}/v1/owner/mcp", http_client=http), mode=ERA, cache=None)
        )
        result = await client.call_tool(tool, arguments)
        if result.is_error:
            raise RuntimeError(f"{tool}: {result.content}")
        return result.structured_content


async def leg_holds(args: argparse.Namespace) -> dict[str, Any]:
    outcomes: Counter[str] = Counter()
    async with _host(args.env, plugins=True) as (host, data):
        await _owner_call(host, data, "rules_set", {"rules": [{"when": "true", "effect": "hold", "reason": "bench"}]})
        session = await _session(host, "127.0.0.2")
        deadline = time.monotonic() + args.seconds
        async with AsyncExitStack() as stack:
            client = await _client(stack, session, "127.0.0.2")

            async def call() -> None:
                while time.monotonic() < deadline:
                    try:
                        # A distinct call each time: the same call again would find its hold.
                        value = base64.b16encode(os.urandom(8)).decode()
                        outcomes[_outcome(await client.call_tool("remember", {"value": value}))] += 1
                    except Exception as exc:
                        outcomes[type(exc).__name__] += 1

            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(call)
        pending = await _table(data, "holds", "WHERE status = 'pending'")
    result = {"seconds": args.seconds, "outcomes": dict(outcomes), "holds_pending": pending["rows"]}
    print(f"[holds] {result}", flush=True)
    return result


# -- rotation ----------------------------------------------------------------------------------


async def leg_rotation(args: argparse.Namespace) -> dict[str, Any]:
    async with _host(args.env, plugins=False) as (host, data):
        token = (data / "owner-token").read_text().strip()
        async with httpx2.AsyncClient(base_url=host.url, timeout=30, follow_redirects=False) as http:
            signed_in = await http.post("/owner/login", data={"token": token})
            page_before = await http.get("/owner/access")
            with anyio.fail_after(60):
                rotated = await anyio.run_process(
                    [str(MCP_HOST), "owner", "token", "--rotate", "--data-dir", str(data)], check=False
                )
            page_after = await http.get("/owner/access")
            csrf = page_before.text.split('name="csrf" value="', 1)[-1].split('"', 1)[0]
            write_after = await http.post("/owner/roles/put", data={"csrf": csrf, "id": "after-rotation"})
            roles = await _owner_roles(host, data)
    result = {
        "sign_in": signed_in.status_code,
        "page_before_rotation": page_before.status_code,
        "rotate_exit": rotated.returncode,
        "page_after_rotation": f"{page_after.status_code} {page_after.headers.get('location', '')}".strip(),
        "write_after_rotation": f"{write_after.status_code} {write_after.headers.get('location', '')}".strip(),
        "role_created_after_rotation": "after-rotation" in roles,
    }
    print(f"[rotation] {result}", flush=True)
    return result


async def _owner_roles(host: RunningHost, data: Path) -> list[str]:
    answer = await _owner_call(host, data, "roles_list", {})
    return [role["id"] for role in answer.get("roles", [])]


async def main(args: argparse.Namespace) -> int:
    legs = {"instances": leg_instances, "bodies": leg_bodies, "turns": leg_turns, "holds": leg_holds}
    legs["rotation"] = leg_rotation
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "loadavg": list(_loadavg())}
    for name in args.legs:
        results[name] = await legs[name](args)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(f"written to {RESULTS}")
    return 0


def _loadavg() -> tuple[float, ...]:
    with open("/proc/loadavg") as f:
        return tuple(float(x) for x in f.read().split()[:3])


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--legs", default=",".join(LEGS), help=f"comma-separated, of {', '.join(LEGS)}")
    parser.add_argument("--seconds", type=float, default=40.0, help="how long each attack runs (default 40)")
    parser.add_argument("--principal-sessions", default="32,64,128", help="the instances leg's session counts")
    parser.add_argument("--slow-per-address", type=int, default=64, help="slow-body connections per address")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="a host setting")
    parser.add_argument("--quick", action="store_true", help="20 s attacks, 32 and 64 sessions")
    args = parser.parse_args()
    args.legs = [leg for leg in args.legs.split(",") if leg]
    unknown = set(args.legs) - set(LEGS)
    if unknown:
        parser.error(f"unknown legs: {', '.join(sorted(unknown))}")
    args.principal_sessions = [int(n) for n in args.principal_sessions.split(",")]
    if args.quick:
        args.seconds, args.principal_sessions = 20.0, [32, 64]
    args.env = dict(item.split("=", 1) for item in args.env)
    socket.setdefaulttimeout(60)
    return args


if __name__ == "__main__":
    if sys.argv[1:2] == ["--attack"]:
        anyio.run(_attack_alone, sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    sys.exit(anyio.run(main, _parse()))
