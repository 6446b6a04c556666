"""The parts that live before the database opens, so children can boot while it starts: the
plugins loaded, the child pool, the back-channel's sockets, the egress proxy and the child factory, with the seam
it reads the owner's config through once the database is open (`Early`); and the Host and
Origin rules every door shares (`security`).

Above: `lifespan` (which loads, builds these, and opens their lifetimes) and `wiring` (which
builds the rest on them). Below: `limits` and the parts.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.transport_security import TransportSecuritySettings

from mcp_host.backchannel import GrantBook, OpSockets
from mcp_host.children import ChildFactory, ChildPool, ListChange, OnceOpen
from mcp_host.egress import EgressProxy, HostsFileResolver, Refusal, RefusalBook, Resolver, SystemResolver
from mcp_host.observe import HostMetrics
from mcp_host.plugins import LoadReport, Plugin, Registry, installed_root, load_plugins
from mcp_host.sandbox import SandboxLedger, require_bwrap
from mcp_host.settings import Settings
from mcp_host.visitor import security_settings

from .limits import child_limits, instance_shares

__all__ = ["Early", "early_parts", "load", "security"]

logger = logging.getLogger("mcp_host")


@dataclass(frozen=True)
class Early:
    """The parts that live before the database opens (so children can boot while it starts)."""

    plugins: Registry
    prestart: Sequence[Plugin]
    """The capabilities whose children start with the host (`_prestarted`)."""
    pool: ChildPool
    sockets: OpSockets
    children: ChildFactory
    once_open: OnceOpen
    """What the factory reads from the parts built once the database is open (the owner's
    config, a node's parent-call audit): `shared_parts` opens it."""
    grants: GrantBook
    spawned: Sequence[int]
    list_changes_sent: MemoryObjectSendStream[ListChange]
    list_changes: MemoryObjectReceiveStream[ListChange]
    """Each "list changed" (or resource updated) a child sent; `wired` relays them. The
    lifespan closes both ends."""
    metrics: HostMetrics
    """This host's series, in its own registry (tests run several hosts in one process)."""
    egress: EgressProxy
    """The proxy every sandboxed child's network goes through; entered before the pool, left after."""
    refused: RefusalBook
    """What the proxy refused each plugin's children, for the catalogue."""


def security(settings: Settings) -> TransportSecuritySettings:
    """The Host and Origin rules of every door: the host's own names, the configured ones and
    the public URL's."""
    hosts = list(settings.allowed_hosts)
    for url in (settings.public_url, settings.replica_url):  # other replicas' forwards use the latter
        netloc = urlsplit(url).netloc if url else ""
        if netloc:
            hosts.append(netloc)
    return security_settings(settings.host, settings.port, hosts)


def load(settings: Settings) -> LoadReport:
    """The plugins; raises SandboxUnavailable when the sandbox is on and bubblewrap missing."""
    installed = installed_root(settings.data_dir)  # `mcp-host plugin add` puts plugins there
    report = load_plugins(settings.builtin_dir, [*settings.plugins, *([installed] if installed else [])])
    for error in report.errors:
        logger.error("plugin skipped: %s", error)
    for plugin in report.plugins:  # loaded, read fail-closed; `mcp-host check` calls these errors
        for mistake in plugin.mistakes:
            logger.warning("plugin %s: %s", plugin.manifest.id, mistake)
    if settings.sandbox.mode == "on":
        require_bwrap()
    else:
        logger.warning("MCP_HOST_SANDBOX=off: children run UNSANDBOXED. For development only.")
    return report


def _prestarted(settings: Settings, plugins: Registry) -> list[Plugin]:
    """The capabilities whose children start with the host: those every session sees."""
    if not settings.children.prestart:
        return []
    return [p for p in plugins.capabilities if p.manifest.acl == "always"]


# A child that sends more "list changed" notifications than this before the door relays them
# loses the surplus (each only says "ask again"; the next one it sends is delivered).
_LIST_CHANGES_BUFFERED = 1024


def early_parts(settings: Settings, report: LoadReport, ledger: SandboxLedger) -> Early:
    """The child pool, the back-channel's sockets and the child factory (not yet entered)."""
    spawned: list[int] = []

    def on_spawn(pid: int, plugin_id: str) -> None:
        spawned.append(pid)
        ledger.record(pid, plugin_id)

    changes_in, changes_out = anyio.create_memory_object_stream[ListChange](_LIST_CHANGES_BUFFERED)
    metrics = HostMetrics()

    def list_changed(change: ListChange) -> None:
        try:
            changes_in.send_nowait(change)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            logger.debug("%s: a list change (%s) was not relayed", change.plugin_id, change.what)

    pool = ChildPool(
        child_limits(settings),
        max_children=settings.children.max_running,
        session_instances=instance_shares(settings),
        session_idle_timeout_s=settings.children.session_idle_timeout_s,
        on_spawn=on_spawn,
        on_exit=ledger.forget,
        on_list_changed=list_changed,
        metrics=metrics,
    )
    refused = RefusalBook()

    def on_refused(refusal: Refusal) -> None:
        refused.note(refusal)
        log = pool.log_of(refusal.plugin_id)
        if log is not None:
            log.egress_refused(refusal.destination, refusal.reason)

    egress = EgressProxy(_egress_folder(), _egress_resolver(settings), on_refused=on_refused, metrics=metrics)
    grants = GrantBook(budget=settings.backchannel.grant_op_budget)
    sockets = OpSockets(report.plugins, runtime_dir=settings.backchannel.runtime_dir)
    plugins = Registry(report.plugins)
    once_open = OnceOpen(wait_s=settings.children.start_timeout_s)
    return Early(
        plugins,
        _prestarted(settings, plugins),
        pool,
        sockets,
        ChildFactory(
            pool,
            settings,
            sockets,
            env=once_open,
            parent_calls=once_open,
            sign_ins=once_open.sign_ins,
            egress=egress,
            egress_grants=once_open,
        ),
        once_open,
        grants,
        spawned,
        changes_in,
        changes_out,
        metrics,
        egress,
        refused,
    )


def _egress_folder() -> Path:
    """A fresh folder of this host's for the egress proxy's sockets: under the system temp dir,
    so each path stays within a unix socket's 108 bytes (the proxy removes it when it stops)."""
    return Path(tempfile.gettempdir()) / f"mcp-host-egress-{os.getpid()}-{secrets.token_hex(4)}"


def _egress_resolver(settings: Settings) -> Resolver:
    """The machine's resolver, behind the owner's hosts file where one is set."""
    system = SystemResolver()
    hosts = settings.egress.hosts_file
    return system if hosts is None else HostsFileResolver(hosts, fallback=system)
