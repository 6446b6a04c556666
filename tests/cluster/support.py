"""A cluster in a test: 3 `mcp-host serve` replicas on one PostgreSQL database, sharing the host
key and the owner token, behind a real HAProxy running deploy/haproxy.cfg as it is shipped: its
bind and servers from its environment (loopback ports), as scripts/cluster runs it. Each replica
gets what deploy/compose.yaml gives it: its own `MCP_HOST_REPLICA_URL`, and HAProxy's address
(127.0.0.1 here) in `FORWARDED_ALLOW_IPS`.

The replicas are small: no builtins, the test plugins `echo` (shared), `sessionless` (one
instance per visitor session) and `notes` (quota), no prestart. A replica can be SIGKILLed
and started again on its port.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx2
import pytest
from anyio.abc import Process
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.hosting import PLUGINS, REPO, free_port, wait_serving

MCP_HOST = Path(sys.executable).parent / "mcp-host"
HAPROXY_CFG = REPO / "deploy" / "haproxy.cfg"
REPLICA_HEADER = "x-mcp-host-replica"  # set by deploy/haproxy.cfg: which replica answered
TS_SDK = REPO / ".cache" / "ecosystem" / "clients" / "node_modules" / "@modelcontextprotocol" / "sdk"
TS_VISITOR = Path(__file__).resolve().parent / "ts_visitor.mjs"

needs_haproxy = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="haproxy is not installed: apt-get install haproxy (scripts/test does)"
)


def haproxy_env(bind_port: int, replicas: list[int]) -> dict[str, str]:
    """The environment deploy/haproxy.cfg reads: its bind on loopback `bind_port`, and the
    replicas on loopback `replicas` ports as its servers 1, 2, ..."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_LB_")}
    env["MCP_LB_BIND"] = f"127.0.0.1:{bind_port}"
    env.update({f"MCP_LB_REPLICA_{n}": f"127.0.0.1:{port}" for n, port in enumerate(replicas, start=1)})
    return env


@dataclass
class Replica:
    name: str
    port: int
    data_dir: Path
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


@dataclass
class Cluster:
    url: str  # HAProxy's
    database_url: str
    root: Path
    replicas: dict[str, Replica]
    env: dict[str, str]
    owner_token: str = ""
    haproxy: Process | None = None
    logs: list[Path] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    """The local address each session opened with `source` speaks from (`client`)."""

    async def start(self, replica: Replica) -> None:
        """Start `replica` (again) on its port and wait until it is ready."""
        log = open(self.root / f"{replica.name}.log", "ab")  # noqa: ASYNC230, SIM115 - tiny, and the process holds it
        argv = [str(MCP_HOST), "serve", "--port", str(replica.port), "--data-dir", str(replica.data_dir)]
        env = {**self.env, "MCP_HOST_REPLICA_URL": replica.url}  # what the other replicas forward to
        try:
            replica.process = await anyio.open_process(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        await wait_serving(replica.url, replica.alive, path="/readyz", what=f"replica {replica.name}")

    async def kill(self, name: str) -> None:
        """SIGKILL a replica (no drain, no goodbye) and wait until it is gone."""
        process = self.replicas[name].process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        with anyio.fail_after(10):
            await process.wait()

    async def revive(self) -> None:
        """Start every replica that is not running, then wait until HAProxy sees all of them up."""
        for replica in self.replicas.values():
            if not replica.alive():
                if replica.process is not None:
                    await replica.process.wait()
                await self.start(replica)
        await self.wait_all_up()

    async def wait_all_up(self) -> None:
        """Until HAProxy sends requests to every replica (its health checks passed again)."""
        with anyio.fail_after(30):
            while len(await self.replicas_seen()) < len(self.replicas):  # noqa: ASYNC110 - HAProxy's state, no event
                await anyio.sleep(0.2)

    async def replicas_seen(self) -> set[str]:
        """The replicas HAProxy routes fresh paths to: 40 new-session hashes spread over all of them."""
        seen: set[str] = set()
        async with httpx2.AsyncClient(timeout=5) as http:
            for n in range(40):
                try:
                    response = await http.get(f"{self.url}/v1/sessions/probe{n}/mcp")
                except httpx2.TransportError:  # HAProxy not listening yet
                    return seen
                if REPLICA_HEADER in response.headers:
                    seen.add(response.headers[REPLICA_HEADER])
        return seen

    async def new_session(self, body: dict[str, Any] | None = None, *, source: str | None = None) -> dict[str, Any]:
        """A visitor session through HAProxy; with `source` (a loopback address) the visitor
        speaks from there, now and in every `client` of the session: a principal of its own, as
        visitors on other machines are (127.0.0.1, every other test's, is one principal)."""
        transport = httpx2.AsyncHTTPTransport(local_address=source) if source else None
        async with httpx2.AsyncClient(timeout=30, transport=transport) as http:
            response = await http.post(f"{self.url}/v1/sessions", json=body or {})
        assert response.status_code == 201, response.text
        session = dict(response.json())
        if source:
            self.sources[session["session_id"]] = source
        return session

    @asynccontextmanager
    async def client(
        self, session: dict[str, Any], mode: str, replicas: list[str] | None = None
    ) -> AsyncIterator[Client]:
        """An SDK client of `session` through HAProxy; `replicas` collects the replica each
        answer came from."""
        return_headers = replicas

        async def note(response: httpx2.Response) -> None:
            if return_headers is not None and REPLICA_HEADER in response.headers:
                return_headers.append(response.headers[REPLICA_HEADER])

        headers = {"Authorization": f"Bearer {session['token']}"}
        source = self.sources.get(str(session.get("session_id")))
        async with httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(30, read=60),
            event_hooks={"response": [note]},
            transport=httpx2.AsyncHTTPTransport(local_address=source) if source else None,
        ) as http:
            transport = streamable_http_client(session["mcp_url"], http_client=http)
            async with Client(transport, mode=mode, cache=None) as client:
                yield client

    @asynccontextmanager
    async def owner(self, base_url: str | None = None) -> AsyncIterator[Client]:
        """The owner's SDK client, through HAProxy unless `base_url` names a replica."""
        headers = {"Authorization": f"Bearer {self.owner_token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
            transport = streamable_http_client(f"{base_url or self.url}/v1/owner/mcp", http_client=http)
            async with Client(transport, cache=None) as client:
                yield client


@asynccontextmanager
async def running_cluster(root: Path, database_url: str, count: int = 3) -> AsyncIterator[Cluster]:
    """`count` replicas and HAProxy, all stopped on exit."""
    lb_port = free_port()
    replicas = {
        f"replica-{n}": Replica(f"replica-{n}", free_port(), root / f"replica-{n}") for n in range(1, count + 1)
    }
    empty_builtins = root / "no-builtins"
    empty_builtins.mkdir(parents=True)
    env = {
        **os.environ,
        "MCP_HOST_DATABASE_URL": database_url,
        "MCP_HOST_SECRET_KEY": base64.b64encode(os.urandom(32)).decode(),
        "MCP_HOST_PUBLIC_URL": f"http://127.0.0.1:{lb_port}",
        "MCP_HOST_ALLOWED_HOSTS": f"127.0.0.1:{lb_port}",
        # HAProxy's address: each visitor's own address comes from its X-Forwarded-For.
        "FORWARDED_ALLOW_IPS": "127.0.0.1",
        "MCP_HOST_BUILTIN_DIR": str(empty_builtins),
        "MCP_HOST_PLUGINS": os.pathsep.join(str(PLUGINS / p) for p in ("echo", "sessionless", "notes")),
        "MCP_HOST_PRESTART_CHILDREN": "false",
        "MCP_HOST_PIN_TOOLS": "false",
        "MCP_HOST_CALL_TIMEOUT_S": "20",
        # A per-session instance starts at its session's first call: on a loaded machine its
        # initialize can outlast the default 10 s, and its tools would be missing from the session.
        "MCP_HOST_CHILD_START_TIMEOUT_S": "60",
        "MCP_HOST_LIST_TIMEOUT_S": "30",
        # A wrong code past the free ones is answered after 30 s, so a test sees at once whose
        # failures a replica counted (test_each_visitor_address_counts_on_its_own_through_haproxy).
        "MCP_HOST_ACCESS_FAILURE_DELAY_S": "30",
        "MCP_HOST_ACCESS_FAILURE_DELAY_MAX_S": "30",
    }
    cluster = Cluster(f"http://127.0.0.1:{lb_port}", database_url, root, replicas, env)
    try:
        first, *others = replicas.values()
        await cluster.start(first)  # it writes the owner token; the others get the same file
        cluster.owner_token = (first.data_dir / "owner-token").read_text().strip()
        for replica in others:
            replica.data_dir.mkdir(parents=True)
            shutil.copy2(first.data_dir / "owner-token", replica.data_dir / "owner-token")
        async with anyio.create_task_group() as tg:
            for replica in others:
                tg.start_soon(cluster.start, replica)
        lb_env = haproxy_env(lb_port, [r.port for r in replicas.values()])
        check = await anyio.run_process(["haproxy", "-c", "-q", "-f", str(HAPROXY_CFG)], env=lb_env, check=False)
        assert check.returncode == 0, check.stderr.decode()
        with open(root / "haproxy.log", "ab") as log:  # noqa: ASYNC230 - tiny
            cluster.haproxy = await anyio.open_process(
                ["haproxy", "-db", "-f", str(HAPROXY_CFG)], env=lb_env, stdout=log, stderr=subprocess.STDOUT
            )
        await cluster.wait_all_up()
        yield cluster
    finally:
        with anyio.CancelScope(shield=True):
            for process in [cluster.haproxy, *(r.process for r in replicas.values())]:
                if process is not None and process.returncode is None:
                    process.terminate()
            for process in [cluster.haproxy, *(r.process for r in replicas.values())]:
                if process is not None:
                    with anyio.move_on_after(30):
                        await process.wait()
                    if process.returncode is None:
                        process.kill()
                        await process.wait()
                    await process.aclose()


async def restart_each(cluster: Cluster, exits: list[int | None], *, settle_s: float) -> None:
    """A rolling restart: after `settle_s`, each replica in turn SIGTERMed (it drains; its exit
    status goes to `exits`), started again and waited for until every replica is up; then
    `settle_s` more."""
    await anyio.sleep(settle_s)
    for replica in cluster.replicas.values():
        assert replica.process is not None
        replica.process.terminate()
        with anyio.fail_after(60):
            exits.append(await replica.process.wait())
        await cluster.start(replica)
        await cluster.wait_all_up()
    await anyio.sleep(settle_s)


async def add_notes_at_once(
    cluster: Cluster, sessions: list[dict[str, Any]], *, connect_timeout_s: float
) -> list[str | None]:
    """Each session adds one note, all at the same moment (every client connected first); the
    refusal code of each call, None for a note added."""
    ready, all_in, connected = anyio.Event(), anyio.Event(), [0]
    outcomes: list[str | None] = []

    async def add(session: dict[str, Any], n: int) -> None:
        async with cluster.client(session, "2026-07-28") as client:
            connected[0] += 1
            if connected[0] == len(sessions):
                all_in.set()
            await ready.wait()
            result = await client.call_tool("note_add", {"text": f"note {n}"})
        outcomes.append((result.structured_content or {}).get("code") if result.is_error else None)

    async with anyio.create_task_group() as tg:
        for n, session in enumerate(sessions):
            tg.start_soon(add, session, n)
        with anyio.fail_after(connect_timeout_s):
            await all_in.wait()
        ready.set()
    return outcomes


async def home_of(cluster: Cluster, session: dict[str, Any]) -> str:
    """The replica HAProxy sends `session`'s requests to (read off an unauthenticated GET)."""
    async with httpx2.AsyncClient(timeout=5) as http:
        response = await http.get(session["mcp_url"])
    return response.headers[REPLICA_HEADER]


async def stored_note_ids(cluster: Cluster) -> set[str]:
    """The ids of every `notes` record in the cluster's database (the plugin stores' tables)."""
    connection = await asyncpg.connect(cluster.database_url)
    try:
        schemas = await connection.fetch(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'records'"
        )
        ids: set[str] = set()
        for row in schemas:
            schema = '"' + str(row["table_schema"]).replace('"', '""') + '"'
            found = await connection.fetch(f"SELECT id FROM {schema}.records WHERE collection = 'notes'")
            ids.update(str(r["id"]) for r in found)
        return ids
    finally:
        await connection.close()


def structured(result: Any) -> dict[str, Any]:
    """A tool result's structured content (failing the test on an error result)."""
    assert not result.is_error, result
    return dict(result.structured_content or {})


async def ts_visitor(session: dict[str, Any]) -> TypeScriptVisitor:
    """The TypeScript SDK client (pinned, .cache/ecosystem) driven line by line; see ts_visitor.mjs."""
    argv = ["node", str(TS_VISITOR), str(TS_SDK), session["mcp_url"]]
    env = {**os.environ, "MCP_VISITOR_TOKEN": session["token"]}
    process = await anyio.open_process(argv, env=env, stderr=subprocess.DEVNULL)
    return TypeScriptVisitor(process)


@dataclass
class TypeScriptVisitor:
    process: Process
    _buffer: bytes = b""

    async def send(self, command: dict[str, Any]) -> dict[str, Any]:
        """One command ({call, arguments} | {reconnect}) and its answer line."""
        assert self.process.stdin is not None and self.process.stdout is not None
        await self.process.stdin.send(json.dumps(command).encode() + b"\n")
        with anyio.fail_after(60):
            while b"\n" not in self._buffer:
                self._buffer += await self.process.stdout.receive()
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def close(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()
        with anyio.move_on_after(10):
            await self.process.wait()
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        await self.process.aclose()
