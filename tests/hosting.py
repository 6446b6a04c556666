"""Run a real host (uvicorn on loopback, real Postgres, real children) inside a test.

Used by the end-to-end tests of the visitor face; the host runs in the test's own event
loop, so children are spawned from the loop thread exactly as in production.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from mcp_host.access import Access, OwnerStore, SessionStore
from mcp_host.app.asgi import create_app
from mcp_host.app.wiring import Host
from mcp_host.children import Child, RunOfFailures
from mcp_host.connectors import Connections
from mcp_host.edge.http_server import server_config
from mcp_host.oauth import AuthorizationServer
from mcp_host.owner import CatalogueEntry
from mcp_host.plugins import Installer, LoadReport, Plugin
from mcp_host.policy import AuditLog, PinBook
from mcp_host.settings import Settings
from mcp_host.store import ConfigStore, EgressGrants, PgPool, PluginStores
from mcp_host.store.database_watch import DatabaseWatch
from mcp_host_kit.contract import refusal_of
from tests.conftest import fresh_database

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
PLUGINS = TESTS / "fixtures" / "plugins"  # the test plugins, each a manifest.yaml and a server
BUILTINS = REPO / "capabilities"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def serving(app: Any, port: int, *, lifespan: Literal["on", "off"] = "on", **config: Any) -> AsyncIterator[None]:
    """`app` (any ASGI app, not a host) served by uvicorn on 127.0.0.1:`port` while inside;
    `config` goes to `uvicorn.Config` (`ssl_certfile`, `ssl_keyfile`, …)."""
    config = {"host": "127.0.0.1", "port": port, "log_level": "warning", "lifespan": lifespan, **config}
    server = uvicorn.Server(uvicorn.Config(app, **config))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110 - uvicorn signals no event
                await anyio.sleep(0.02)
        try:
            yield
        finally:
            server.should_exit = True


class RunningHost:
    """A host running in the test's loop, and everything a test reaches of it: its URL and an
    HTTP client, visitor sessions and their SDK clients, the owner (id, token) and named views
    of its parts. Tests reach the host through these only, never through `Host`'s fields, so
    the composition root can change them with this class alone."""

    def __init__(self, settings: Settings, host: Host, http: httpx2.AsyncClient) -> None:
        self.url = settings.base_url
        self.settings = settings
        """The settings the host runs with (its port, data dir, …)."""
        self.http = http
        self._host = host

    async def new_session(self, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = await self.http.post(f"{self.url}/v1/sessions", json=body or {})
        assert response.status_code == 201, response.text
        return dict(response.json())

    @asynccontextmanager
    async def client(self, session: dict[str, Any], mode: str = "auto", **callbacks: Any) -> AsyncIterator[Client]:
        """An SDK client of the session; `callbacks` go to `Client` (elicitation_callback, …)."""
        headers = {"Authorization": f"Bearer {session['token']}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
            transport = streamable_http_client(session["mcp_url"], http_client=http)
            async with Client(transport, mode=mode, cache=None, **callbacks) as client:
                yield client

    # -- the owner ------------------------------------------------------------------------------

    @property
    def owner_id(self) -> str:
        return self._host.owner_id

    def owner_token(self) -> str:
        """The owner's bearer token, as `mcp-host owner token` prints it from the data dir."""
        assert self._host.owner_token_file is not None
        return self._host.owner_token_file.read_text().strip()

    @property
    def owners(self) -> OwnerStore:
        return self._host.owners

    @property
    def access(self) -> Access:
        """Roles, access codes and API keys (what the owner door's access tools change)."""
        return self._host.access

    @property
    def sessions(self) -> SessionStore:
        return self._host.sessions

    @property
    def config(self) -> ConfigStore:
        return self._host.config

    @property
    def connections(self) -> Connections:
        return self._host.connections

    @property
    def stores(self) -> PluginStores:
        return self._host.stores

    @property
    def pins(self) -> PinBook | None:
        """The tool pins (None: `pin_tools` off)."""
        return self._host.pins

    @property
    def audit(self) -> AuditLog:
        return self._host.audit

    @property
    def oauth(self) -> AuthorizationServer:
        """The OAuth authorization server of the visitor URL and the owner door (its grants)."""
        return self._host.oauth

    # -- plugins and their children ---------------------------------------------------------------

    @property
    def loaded(self) -> LoadReport:
        """The plugins loaded at start, and those skipped."""
        return self._host.report

    def plugin(self, plugin_id: str) -> Plugin:
        return next(p for p in self._host.report.plugins if p.manifest.id == plugin_id)

    def catalogue(self) -> list[CatalogueEntry]:
        """The owner's catalogue: each plugin with its status and the cause of a failure."""
        return self._host.catalogue.entries()

    @property
    def spawned(self) -> Sequence[int]:
        """The pids of every child process started, in order (tests count and kill them)."""
        return self._host.spawned

    def child(self, plugin_id: str, session_id: str | None = None) -> Child | None:
        """The child of `plugin_id` for that scope (None: owner context or shared), if made."""
        return self._host.pool.get(plugin_id, session_id)

    def stop_children(self, plugin_id: str) -> None:
        """Stop `plugin_id`'s running children (they start again at their next call), as the
        owner door does after a change to the plugin's egress."""
        self._host.pool.stop_plugin(plugin_id)

    def session_instances(self, plugin_id: str) -> list[Child]:
        """The per-session instances of `plugin_id` the pool holds."""
        return self._host.pool.sessions.of(plugin_id)

    def child_failures(self, plugin_id: str) -> RunOfFailures | None:
        """The run of failures of `plugin_id`'s children (None: none yet)."""
        return self._host.pool.failures(plugin_id)

    def socket_for(self, plugin_id: str) -> Path | None:
        """The host path of `plugin_id`'s back-channel socket."""
        return self._host.sockets.socket_for(plugin_id)

    def egress_gates(self, plugin_id: str) -> list[Path]:
        """The host paths of the egress gates (unix sockets) open for `plugin_id`'s running
        children, one per child instance that has egress."""
        return self._host.egress.gates_of(plugin_id)

    def live_grants(self) -> int:
        """The back-channel grants minted for calls still running."""
        return self._host.grants.live_count()

    def parked_rounds(self) -> int:
        """The 2026-07-28 calls parked between input rounds."""
        return self._host.rounds.parked_count()

    # -- the database -----------------------------------------------------------------------------

    @property
    def sql(self) -> PgPool:
        """The host's database connection pool, for rows a test reads or writes itself."""
        return self._host.database.pool

    @property
    def database_watch(self) -> DatabaseWatch | None:
        """What recovers the host from a database outage (None: not watching)."""
        return self._host.database.watch


def host_settings(tmp_path: Path, database_url: str | None, plugins: list[str], **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": free_port(),
        "data_dir": tmp_path / "data",
        "database_url": database_url,
        "builtin_dir": None,
        "plugins": [PLUGINS / p for p in plugins],
        "call_timeout_s": 10.0,
        "child_idle_timeout_s": 300.0,
        "prestart_children": False,  # tests count spawns; test_app covers prestart
        "pin_tools": False,  # tests of other things use --plugins test plugins; test_pins turns it on
    }
    values.update(overrides)
    return Settings(**values)


@asynccontextmanager
async def running_host(settings: Settings, installer: Installer | None = None) -> AsyncIterator[RunningHost]:
    """A host running with `settings`; `installer` installs the plugins its owner door adds
    (None: the real one; `tests.plugins.installers.LocalPackages` installs offline)."""
    app = create_app(settings, installer=installer)
    server = uvicorn.Server(server_config(app, settings))  # what `mcp-host serve` runs
    served = anyio.Event()

    async def serve() -> None:
        try:
            await server.serve()
        finally:
            served.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        try:
            with anyio.fail_after(30):
                while not server.started:
                    if server.should_exit:
                        raise RuntimeError("the host did not start")
                    await anyio.sleep(0.02)
            async with httpx2.AsyncClient(timeout=30) as http:
                yield RunningHost(settings, app.state.host, http)
        finally:
            # Stop the host on every way out, a failed test's too: cancelling `server.serve`
            # would leave uvicorn's lifespan task, and so the host, running on the test loop.
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(60):
                await served.wait()


def host_fixture(
    plugins: list[str],
    *,
    name: str = "host",
    scope: Literal["function", "module"] = "function",
    ready: Callable[[RunningHost], Awaitable[None]] | None = None,
    **overrides: Any,
) -> Any:
    """A pytest fixture `name` running a host with the test plugins `plugins` and settings
    `overrides` (`builtin_dir=BUILTINS` for the builtins); `ready(running)` runs once it serves.

    Per test on its `database_url`, or per module (`scope="module"`) on a database of its own.
    Assign it at module level: `host = host_fixture(["echo"])`.
    """

    @asynccontextmanager
    async def serving(tmp_path: Path, database_url: str) -> AsyncIterator[RunningHost]:
        async with running_host(host_settings(tmp_path, database_url, plugins, **overrides)) as running:
            if ready is not None:
                await ready(running)
            yield running

    if scope == "module":

        async def per_module(
            postgres_server: str, tmp_path_factory: pytest.TempPathFactory
        ) -> AsyncIterator[RunningHost]:
            async with fresh_database(postgres_server) as url, serving(tmp_path_factory.mktemp(name), url) as running:
                yield running

        return pytest.fixture(per_module, scope="module", name=name)

    async def per_test(tmp_path: Path, database_url: str) -> AsyncIterator[RunningHost]:
        async with serving(tmp_path, database_url) as running:
            yield running

    return pytest.fixture(per_test, name=name)


async def allow_loopback(running: RunningHost, plugin_id: str, port: int) -> None:
    """Let `plugin_id`'s sandboxed children reach a test server at 127.0.0.1:`port`, as an
    owner lets a plugin reach a server on their network (`mcp-host plugin allow ID HOST
    --private`): the owner's egress entry `127.0.0.1:port` with `private` (loopback is never
    reached otherwise, even with `allow_net`), then its running children stopped, as the owner
    door's `plugin_egress_allow` does (a child's egress is read at its start). Written to the
    store directly, so no audit row joins the ones a test reads.
    """
    await EgressGrants(running.sql).allow(plugin_id, f"127.0.0.1:{port}", private=True, by=running.owner_id)
    running.stop_children(plugin_id)


async def wait_until(predicate: Callable[[], bool], *, within_s: float = 5.0) -> None:
    """Poll `predicate` until true, failing after `within_s`.

    For state outside the event loop (a process dying), which no event can signal.
    """
    with anyio.fail_after(within_s):
        while not predicate():  # noqa: ASYNC110 - no event exists for another process's death
            await anyio.sleep(0.02)


async def wait_serving(
    url: str, alive: Callable[[], bool], *, path: str = "/healthz", within_s: float = 60.0, what: str = "the host"
) -> None:
    """Poll `url + path` until it answers 200, failing after `within_s` or as soon as `alive()`
    says the process serving it has exited (a `mcp-host serve` started by a test or a script)."""
    async with httpx2.AsyncClient(timeout=2) as http:
        with anyio.fail_after(within_s):
            while True:
                assert alive(), f"{what} exited during start"
                try:
                    if (await http.get(f"{url}{path}")).status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                await anyio.sleep(0.1)


def refusal(result: CallToolResult) -> dict[str, str] | None:
    """The `{code, message}` of a refused call, wherever it travels (the host's `_meta` key, else
    a plugin's structured content); None for a result that is no refusal."""
    found = refusal_of(result)
    return None if found is None else found.model_dump()


def modern_request(
    method: str, params: dict[str, Any], request_id: object = 1, **meta: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 JSON-RPC request as a client POSTs it by hand: the body, with the per-request
    envelope in `_meta` (and `meta` added to it), and the routing headers that must agree with it."""
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
        **meta,
    }
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": envelope}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
    }
    if "name" in params:
        headers["Mcp-Name"] = str(params["name"])
    return body, headers
