"""The host's lifespan: the order its parts start and stop in, and the task group they share.

Above: `asgi.create_app`, whose Starlette lifespan is `host_lifespan`. Below: `early` (the parts
made before the database opens), `wiring`, which builds the rest between the lifetimes opened
here, and `host_file` (where the command line finds a running host).

Start, in order: the plugins are loaded (no bubblewrap with the sandbox on: refused here);
sandboxes left by a host that did not stop cleanly are killed; the back-channel's sockets,
the child pool and the background task group open; the children every session sees start
while the database starts; the parts that need the database are built, the back-channel
serves ops on the sockets and the MCP session managers run, and the retention sweep starts
(store/retention.py, with the OAuth grants' sweep). Stop is the reverse: the sweep stops, parked input rounds end, the
session managers stop, the back-channel stops serving, the database closes, background tasks
are cancelled, and the children stop last but one, before the back-channel's sockets go.
"""

from __future__ import annotations

import functools
import gc
import logging
import shlex
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from mcp_host.backchannel import BackChannel, ServesOps
from mcp_host.plugins import Installer, PackageInstaller
from mcp_host.sandbox import SandboxLedger, host_cgroups, plugin_layer_available
from mcp_host.settings import Settings
from mcp_host.store import Database, Retention, open_database

from .early import early_parts, load
from .host_file import listen_url, remove_host_file, write_host_file
from .wiring import OWNER_PATH, Host, wired

__all__ = ["host_lifespan", "running_host"]

logger = logging.getLogger("mcp_host")


@asynccontextmanager
async def running_host(
    settings: Settings,
    rules: TransportSecuritySettings,
    installer: Installer | None = None,
    *,
    serves_ops: ServesOps = BackChannel,
) -> AsyncIterator[Host]:
    """Start every part of the host; stop them all, children last but one, on exit. `installer`
    installs the plugins the owner door adds (None: the real one, `PackageInstaller`);
    `serves_ops` serves the back-channel's ops (a test's may fail to start)."""
    report = load(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ledger = SandboxLedger(settings.data_dir / "run" / "sandboxes")
    swept = ledger.sweep()
    if swept:
        logger.warning("killed %d sandbox(es) left over from a host that did not stop cleanly", len(swept))
    if settings.sandbox.mode == "on":
        host_cgroups(settings.sandbox.cgroup_root)  # detect now (and sweep dead hosts' groups), not at first use
        # The writable plugin layer's probe (an unshare and a mount, ~85 ms) now, not in the first child's start.
        await anyio.to_thread.run_sync(plugin_layer_available)
    early = early_parts(settings, report, ledger)
    with early.list_changes_sent, early.list_changes:
        async with early.sockets, early.egress, early.pool, anyio.create_task_group() as background:
            if early.prestart:  # children boot while the database starts: both take about a second
                background.start_soon(
                    functools.partial(
                        early.children.prestart, early.prestart, timeout_s=settings.children.list_timeout_s
                    )
                )
            async with (
                open_database(settings) as database,
                wired(
                    settings, report, early, database, background, rules, installer or PackageInstaller(), serves_ops
                ) as host,
                anyio.create_task_group() as sweeping,
            ):
                # Idle public sessions expire and old rows go while the host runs; stopped
                # before the database closes.
                await sweeping.start(_retention(settings, database, host).run)
                try:
                    yield host
                finally:
                    sweeping.cancel_scope.cancel()
            background.cancel_scope.cancel()
            logger.info("stopping children")


def _retention(settings: Settings, database: Database, host: Host) -> Retention:
    """The sweep over the host's tables, and the OAuth grants' (revoked ones kept
    `oauth_grant_retention_days`; 0: for ever)."""
    days = settings.retention.oauth_grant_days
    oauth = functools.partial(host.oauth.sweep, revoked_kept_s=days * 86_400.0 if days > 0 else None)
    return Retention.of(database.pool, settings.retention, also={"oauth": oauth})


def host_lifespan(
    settings: Settings,
    rules: TransportSecuritySettings,
    on_fatal: Callable[[], None] | None,
    installer: Installer | None = None,
) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """The Starlette lifespan: runs `running_host` with the host in `app.state.host`, writes the
    host file and says where the host listens; calls `on_fatal` when the host ends by itself."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        started = False
        try:
            async with running_host(settings, rules, installer) as host:
                app.state.host = host
                started = True
                if settings.port:  # `mcp-host serve --port 0` binds first and passes the real port
                    # Where the command line finds this host (host_file.py); removed below.
                    write_host_file(settings.data_dir, listen_url(settings.host, settings.port))
                _announce(host)
                # Everything built so far lives as long as the host: keep the cyclic GC from
                # walking it on every collection (fewer, shorter pauses on the request path).
                gc.freeze()
                try:
                    yield
                finally:
                    app.state.host = None
                    remove_host_file(settings.data_dir)
                    gc.unfreeze()
        except BaseException:
            if started:
                logger.critical("the host stopped because a part of it failed", exc_info=True)
                if on_fatal is not None:
                    on_fatal()
            raise

    return lifespan


def _announce(host: Host) -> None:
    """Say where the host listens and how to reach it: every line names the address listened on
    and the data directory in use, so it can be copied as printed."""
    s = host.settings
    url = listen_url(s.host, s.port)
    owner_url = f"{url}{OWNER_PATH}"
    beside = Path(sys.executable).parent / "mcp-host"  # the console script of this environment
    cli = shlex.quote(str(beside)) if beside.exists() else "mcp-host"
    data_dir = shlex.quote(str(s.data_dir.resolve()))
    plugins = ", ".join(p.manifest.id for p in host.report.plugins) or "none"
    logger.info("mcp-host ready on %s (plugins: %s); data in %s", url, plugins, data_dir)
    if s.public_url:
        logger.info("visitors are given URLs under %s (MCP_HOST_PUBLIC_URL)", s.base_url)
    if host.owner_token_file is not None:
        logger.info("owner endpoint: %s; print the owner token: %s owner token --data-dir %s", owner_url, cli, data_dir)
    else:
        logger.info(
            "owner endpoint: %s; no owner token file: %s owner token --rotate --data-dir %s makes one",
            owner_url,
            cli,
            data_dir,
        )
    if host.owner_token_new and host.owner_token_file is not None:
        # Once, on the terminal only (never into the log): the owner connects with it.
        token = host.owner_token_file.read_text().strip()
        again = f"{cli} owner token --data-dir {data_dir}"
        sys.stdout.write(f"\n  owner token (shown once; `{again}` prints it again): {token}\n\n")
        sys.stdout.flush()
    logger.info(
        "Claude Code over HTTP: claude mcp add --transport http mcp-host %s"
        ' --header "Authorization: Bearer $(%s owner token --data-dir %s)"',
        owner_url,
        cli,
        data_dir,
    )
    # Another name than the HTTP line's: a client that took that one refuses a second `mcp-host`.
    logger.info("Claude Code over stdio: claude mcp add mcp-host-stdio -- %s owner --data-dir %s", cli, data_dir)
    logger.info("the catalogue: %s caps list --data-dir %s", cli, data_dir)
    logger.info(
        "open a visitor session: %s session new --data-dir %s, or curl -s -X POST %s/v1/sessions"
        " -H 'content-type: application/json' -d '{}'",
        cli,
        data_dir,
        url,
    )
