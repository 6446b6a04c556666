"""The catalogue: every loaded plugin with what its manifest declares and how it is doing.

Above: `mcp-host caps list` (and, with issue 5, the owner's `capabilities_list`). Below: the
load report (manifests), the child pool (health) and the bindings (why tools are withheld).
Listing never starts a child. `logs` gives one plugin's recent log (the owner's
`capability_logs`): its children's last stderr, exception and error-result lines, escaped,
and why its last process ended. A remote plugin whose server asked for a sign-in shows its state
(`sign_in`). A sandboxed plugin's entry shows its `egress` (`egress.PluginEgress`: the
manifest's entries and the owner's, `allow_net`, the private hosts, the destinations its
children were refused). `rejected` gives the tools the host drops whatever the owner
approves (unsafe name, text or schema), with their causes (the owner's `tools_pending`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from mcp_host.children import PARENT_KIND, ChildPool, ChildState, LogKind, RemoteSignIns
from mcp_host.errors import ManifestError
from mcp_host.plugins import LoadReport, Plugin, printable
from mcp_host.store import OwnerEgress, SignInState
from mcp_host.visitor import Bindings

from .egress import NoRefusals, PluginEgress, RefusedDestinations, egress_of

__all__ = [
    "CapabilityLogs",
    "Catalogue",
    "CatalogueEntry",
    "LogEntry",
    "RejectedTool",
    "entry_for",
    "invalid_entry",
]

# How much of a rejected tool's name is shown (a valid one is at most 64 characters).
_NAME_SHOWN = 80

Status = Literal["healthy", "not_started", "failing", "unconfigured", "invalid"]
"""`unconfigured`: the plugin waits for the owner's setup (a remote server refused the host's
credentials), with the cause."""


class CatalogueEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: str
    """The manifest's (`capability`, `connector`), or `remote` for a capability a node's parent
    lends it (`children.parent`); `?` for an invalid plugin."""
    title: str | None
    acl: str
    requires: list[str]
    visitor_tools: list[str]
    status: Status
    cause: str | None = None
    instances: int | None = None
    """A per-session plugin (`instances: per_session`): how many visitor sessions' instances
    run now (its owner-context instance is `status`); None for a shared plugin."""
    sign_in: SignInState | None = None
    """A remote plugin whose server asked for a sign-in (`children.RemoteSignIns`): `connected`,
    `expired` or `needs_sign_in`; None for every other plugin."""
    egress: PluginEgress | None = None
    """Where a sandboxed plugin's children may connect, and what they were refused; None for
    a remote plugin (its reach is `transport.allowed_hosts`) and an invalid one."""


class RejectedTool(BaseModel):
    """A tool a child lists that no visitor is shown, whatever the owner approves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capability: str
    tool: str
    """Its name, escaped and cut (a rejected name may hold anything)."""
    cause: str


class LogEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    at: datetime
    kind: LogKind
    text: str


class CapabilityLogs(BaseModel):
    """A plugin's recent log and health, as the owner's `capability_logs` shows it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capability: str
    status: Status
    cause: str | None
    pid: int | None
    starts: int
    last_exit: str | None
    last_exit_at: datetime | None
    lines: list[LogEntry]


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def entry_for(plugin: Plugin, status: Status = "not_started", cause: str | None = None) -> CatalogueEntry:
    m = plugin.manifest
    return CatalogueEntry(
        id=m.id,
        kind=m.kind,
        title=m.title,
        acl=m.acl,
        requires=list(m.requires or ()),
        visitor_tools=list(m.visitor_tools or ()),
        status=status,
        cause=cause,
    )


def invalid_entry(error: ManifestError) -> CatalogueEntry:
    """A plugin folder that was skipped at load, with its error."""
    return CatalogueEntry(
        id=error.path,
        kind="?",
        title=None,
        acl="?",
        requires=[],
        visitor_tools=[],
        status="invalid",
        cause=error.message,
    )


class Catalogue:
    def __init__(
        self,
        report: LoadReport,
        pool: ChildPool,
        bindings: Bindings,
        plugins: Sequence[Plugin] | None = None,
        *,
        lent: Collection[str] = (),
        sign_ins: RemoteSignIns | None = None,
        refused: RefusedDestinations | None = None,
    ) -> None:
        """`plugins`: the loaded plugins, read live (the registry, which follows plugins
        installed or removed while the host runs); None: the report's. `lent`: the ids of the
        capabilities a node's parent lends it, listed as kind `remote`. `sign_ins`: the host's
        sign-ins to remote servers, whose state each entry shows. `refused`: the destinations
        each plugin's children were refused (the egress proxy's record)."""
        self._sign_ins = sign_ins
        self._refused: RefusedDestinations = refused or NoRefusals()
        self._report = report
        self._lent = frozenset(lent)
        self._plugins: Sequence[Plugin] = report.plugins if plugins is None else plugins
        self._pool = pool
        self._bindings = bindings

    def logs(self, plugin_id: str, lines: int) -> CapabilityLogs | None:
        """`plugin_id`'s last `lines` log lines and its health; None for no loaded plugin."""
        entry = next((e for e in self.entries() if e.id == plugin_id and e.status != "invalid"), None)
        if entry is None:
            return None
        owner = self._pool.get(plugin_id)
        # A per-session plugin's instances share one log; its health is theirs together: the
        # starts of every instance the pool still knows, the latest exit, a running pid.
        children = [c for c in (owner, *self._pool.sessions.of(plugin_id)) if c is not None]
        if not children:
            return CapabilityLogs(
                capability=plugin_id, status=entry.status, cause=entry.cause, pid=None, starts=0,
                last_exit=None, last_exit_at=None, lines=[],
            )  # fmt: skip
        healths = [c.health() for c in children]
        exits = [h for h in healths if h.last_exit is not None]
        last = max(exits, key=lambda h: h.last_exit_at or 0.0) if exits else None
        return CapabilityLogs(
            capability=plugin_id,
            status=entry.status,
            cause=entry.cause,
            pid=next((h.pid for h in healths if h.pid is not None), None),
            starts=sum(h.starts for h in healths),
            last_exit=last.last_exit if last else None,
            last_exit_at=_at(last.last_exit_at) if last and last.last_exit_at is not None else None,
            lines=[LogEntry(at=_at(line.at), kind=line.kind, text=line.text) for line in children[0].log.recent(lines)],
        )

    def forget(self, plugin_id: str) -> None:
        """`plugin_id` was removed while the host runs: forget its tool lists and causes."""
        self._bindings.forget(plugin_id)

    def rejected(self) -> list[RejectedTool]:
        """The tools dropped from the last vetted list of each loaded plugin, by plugin and name."""
        rejected = self._bindings.rejected
        out: list[RejectedTool] = []
        for plugin in self._plugins:
            pid = plugin.manifest.id
            out.extend(
                RejectedTool(capability=pid, tool=printable(name, _NAME_SHOWN), cause=cause)
                for name, cause in sorted(rejected.get(pid, ()))
            )
        return out

    def is_rejected(self, plugin_id: str, tool: str) -> str | None:
        """Why `plugin_id`'s tool named exactly `tool` is rejected, or None when it is not."""
        return next((cause for name, cause in self._bindings.rejected.get(plugin_id, ()) if name == tool), None)

    def egress(self, plugin: Plugin, owner: OwnerEgress) -> PluginEgress | None:
        """`plugin`'s egress with the owner's entries `owner` and what its children were refused."""
        return egress_of(plugin, owner, self._refused.of(plugin.manifest.id))

    def entries(self, owner_egress: Mapping[str, OwnerEgress] | None = None) -> list[CatalogueEntry]:
        """Every plugin's entry; `owner_egress`: the owner's egress entries by plugin
        (`store.EgressGrants.all`, read by the async caller), none for a plugin not in it."""
        out: list[CatalogueEntry] = []
        causes = self._bindings.causes
        for plugin in self._plugins:
            child = self._pool.get(plugin.manifest.id)
            health = child.health() if child is not None else None
            withheld = causes.get(plugin.manifest.id)
            if health is None:
                status: Status = "not_started"
            elif health.state == ChildState.FAILING:
                status = "failing"
            elif health.unconfigured and health.state != ChildState.RUNNING:
                status = "unconfigured"
            elif health.state == ChildState.RUNNING and not withheld:
                status = "healthy"
            elif health.cause:
                status = "failing"
            else:
                status = "not_started" if health.state == ChildState.STOPPED else "healthy"
            failed = status in ("failing", "unconfigured")
            cause = withheld or (health.cause if health is not None and failed else None)
            owner = (owner_egress or {}).get(plugin.manifest.id, OwnerEgress())
            entry = entry_for(plugin, status, cause).model_copy(update={"egress": self.egress(plugin, owner)})
            if self._sign_ins is not None:
                entry = entry.model_copy(update={"sign_in": self._sign_ins.state_of(plugin.manifest.id)})
            if plugin.manifest.id in self._lent:
                entry = entry.model_copy(update={"kind": PARENT_KIND})
            out.append(self._with_instances(plugin, entry) if plugin.manifest.per_session else entry)
        out.extend(invalid_entry(error) for error in self._report.errors)
        return out

    def _with_instances(self, plugin: Plugin, entry: CatalogueEntry) -> CatalogueEntry:
        """A per-session plugin's entry: its owner-context instance's health (above), how many
        visitor sessions' instances run, and — while the plugin's run of failures lasts (any
        instance crashed, and none has answered a call or stayed up since) — that it fails,
        with the last failure's cause."""
        pid = plugin.manifest.id
        running = sum(1 for c in self._pool.sessions.of(pid) if c.running)
        status, cause = entry.status, entry.cause
        if status == "not_started" and running:
            status = "healthy"
        run = self._pool.failures(pid)
        if run is not None and run.count and run.cause:
            status, cause = "failing", cause or run.cause
        elif run is not None and run.unconfigured and run.cause and not running:
            status, cause = "unconfigured", cause or run.cause
        return entry.model_copy(update={"status": status, "cause": cause, "instances": running})
