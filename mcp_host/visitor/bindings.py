"""Bindings: the tools one session sees, assembled from the children's real `tools/list`.

Above: the visitor endpoint (tools/list answers from `assemble(fresh=True)`; tools/call
routes through `assemble(fresh=False)`, which reuses the lists of the last assembly).
Below: `children` (the real lists) and `plugins` (the manifests).

Reconciliation rules (issue 2):
- the child's real list wins over the manifest's `visitor_tools`; a mismatch is logged once
  per distinct difference;
- a child that cannot be started or answered is left out, and its cause is logged and kept
  for the catalogue (never a silent empty list);
- a tool name exposed by two capabilities is exposed by neither, and the catalogue says why;
  so are names that differ only in case, `-` or `_` (`Get_Item`, `get-item`: an agent or a
  client that normalises names could call the wrong one), even two of one capability;
- a tool whose name, text or schema is unsafe (docs/security.md A10, A11) is dropped, never
  silently: it is logged, and kept with its cause for the catalogue and the owner's
  `tools_pending` (`rejected`);
- a tool the manifest names as an `owner_tools` target and not in `visitor_tools` is the
  owner's: it is never in a visitor's list (the owner's door calls it by name);
- with `pins` (docs/security.md E8), each newly vetted list is recorded with them, and a tool whose
  definition is not the one the owner approved is withheld until the owner approves it; the
  catalogue and the log say it is pending owner approval;
- a tool naming an app (MCP Apps) is pinned with the app as its child serves it
  (`AppReader`: read again with each fresh list, kept otherwise): a changed app withholds
  the tool like a changed definition; a tool whose app is refused (`app_checks`: a csp open to
  any origin, past the size cap, not served by the tool's own plugin) is rejected with its cause,
  as an unsafe tool is (pinning on: apps are read only then);
- `review` lists a plugin's tools in owner context and vets them the same way, with no
  session: the pins record what the owner must review before any visitor lists them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types

from mcp_host.children import ChildSource
from mcp_host.errors import HostError, is_connection_failure
from mcp_host.plugins import TOOL_NAME_RE, Plugin, check_text, check_tool_schema, shown
from mcp_host.policy import PinBook, collision_key
from mcp_host.wire import Apps, app_uri

from .app_checks import AppRefused
from .app_reader import AppRead, AppReader

__all__ = ["Binding", "Bindings", "Toolset"]

# Distinct sets of visible capabilities whose last merge is kept (one per role, in practice).
_MAX_MERGES = 64
# How often approvals are re-read while some tool is hidden pending one (at most one query
# per interval per replica; nothing at all while every tool is approved).
_PIN_REFRESH_S = 2.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Binding:
    """One exposed tool and the capability that answers it."""

    capability: str
    tool: types.Tool


@dataclass(frozen=True)
class Toolset:
    tools: dict[str, Binding]
    collisions: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """Each hidden tool name → every (capability id, tool name) it collides with, itself included."""
    unavailable: dict[str, str] = field(default_factory=dict)

    def listed(self) -> list[types.Tool]:
        return [b.tool for b in self.tools.values()]


class Bindings:
    """Assembles toolsets; remembers per-capability causes for the catalogue."""

    def __init__(
        self,
        children: ChildSource,
        *,
        list_timeout_s: float,
        pins: PinBook | None = None,
        apps: AppReader | None = None,
    ) -> None:
        """`children`: each plugin's child for a session (`ChildSource.lister`: a per-session
        plugin's list is its session's own instance's while that runs, else its owner-context
        instance's). Vetting and pinning are per plugin, whichever instance listed. `apps`:
        reads the apps the tools name (default: one keeping nothing, with the default cap)."""
        self._child_of = children
        self._list_timeout_s = list_timeout_s
        self.pins = pins
        """The tool pins; None shows every safe tool. Set before the first visitor is served."""
        # plugin id -> the vetted list the pins last recorded, and its apps as then read
        self._observed: dict[str, tuple[tuple[types.Tool, ...], Apps]] = {}
        self._apps = apps or AppReader(children, read_timeout_s=list_timeout_s)
        # plugin id -> (a safe list and its apps as read, the tools of it whose app is not refused)
        self._app_vetted: dict[str, tuple[tuple[types.Tool, ...], Mapping[str, AppRead], tuple[types.Tool, ...]]] = {}
        # plugin id -> (tool name, why its app is refused) for each tool of its last list naming one
        self._app_refused: dict[str, tuple[tuple[str, str], ...]] = {}
        # plugin id -> (a vetted list, the pins' version, the tools of it approved as they are)
        self._pinned: dict[str, tuple[tuple[types.Tool, ...], int, tuple[types.Tool, ...]]] = {}
        self._withheld: dict[str, tuple[str, ...]] = {}
        self._reported: dict[str, frozenset[str]] = {}
        # plugin id -> (the child's list as last vetted, the tools of it that passed)
        self._vetted: dict[str, tuple[tuple[types.Tool, ...], tuple[types.Tool, ...]]] = {}
        # plugin id -> (tool name, why it was dropped) for each tool of its last vetted list dropped
        self._dropped: dict[str, tuple[tuple[str, str], ...]] = {}
        # capability ids -> (the inputs of the last merge for them, its toolset)
        self._merges: dict[tuple[str, ...], tuple[tuple[object, ...], Toolset]] = {}
        self._schemas: dict[str, Mapping[str, Any] | None] = {}
        self._causes: dict[str, tuple[list[str], tuple[str, ...]]] = {}
        # capability id -> (why tools are not exposed, pending approval aside; the pending tools)

    @property
    def causes(self) -> dict[str, str]:
        """Capability id → why some or all of its tools are not exposed right now: as the last
        toolset assembled for it found (collisions, unavailable), with the tools its last vetted
        list dropped or withheld pending approval (a visitor's list or the owner's `review`),
        less the tools approved since (an approval shows at once)."""
        causes: dict[str, str] = {}
        for pid in self._causes.keys() | self._dropped.keys() | self._withheld.keys() | self._app_refused.keys():
            clashes = self._causes.get(pid, ([], ()))[0]
            pending = self._withheld.get(pid, ())
            dropped = [_dropped(name, why) for name, why in self.rejected.get(pid, ())]
            still = [f"tool {name!r} is pending owner approval" for name in self._still_pending(pid, pending)]
            if clashes or dropped or still:
                causes[pid] = "; ".join(clashes + dropped + still)
        return dict(sorted(causes.items()))

    @property
    def rejected(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """Capability id → (tool name as the child gave it, why it was dropped) for each tool of
        its last vetted list that no visitor may be shown, whatever the owner approves. The name
        may be hostile: show it escaped (`printable`). A tool whose app is refused is one."""
        rejected = dict(self._dropped)
        for pid, refused in self._app_refused.items():
            rejected[pid] = rejected.get(pid, ()) + refused
        return rejected

    def _still_pending(self, pid: str, names: tuple[str, ...]) -> tuple[str, ...]:
        pinned = self._pinned.get(pid)
        if self.pins is None or pinned is None:
            return names
        tools = {tool.name: tool for tool in pinned[0]}
        return tuple(n for n in names if n not in tools or not self.pins.approved(pid, tools[n]))

    async def assemble(self, capabilities: Sequence[Plugin], *, fresh: bool, session_id: str | None = None) -> Toolset:
        """The toolset of `capabilities` for `session_id` (None: owner context): listed now
        (`fresh`), or from the last real lists.

        Children whose list is unknown (or all, when `fresh`) are asked concurrently; no
        per-session instance is started to be listed.
        """
        lists: dict[str, tuple[types.Tool, ...]] = {}
        unavailable: dict[str, str] = {}
        to_ask: list[Plugin] = []
        for plugin in capabilities:
            try:
                cached = None if fresh else self._child_of.lister(plugin, session_id).tools
            except HostError as exc:  # e.g. the pool is full
                unavailable[plugin.manifest.id] = exc.message
                continue
            if cached is None:
                to_ask.append(plugin)
            else:
                lists[plugin.manifest.id] = await self._vet(plugin, cached, fresh=False, session_id=session_id)

        async def collect(plugin: Plugin) -> None:
            try:
                child = self._child_of.lister(plugin, session_id)
                real = await child.list_tools(timeout_s=self._list_timeout_s)
            except HostError as exc:
                existing = self._peek_cause(plugin, session_id)
                unavailable[plugin.manifest.id] = existing or exc.message
                return
            lists[plugin.manifest.id] = await self._vet(plugin, real, fresh=True, session_id=session_id)

        if len(to_ask) == 1:
            await collect(to_ask[0])
        elif to_ask:
            async with anyio.create_task_group() as tg:
                for plugin in to_ask:
                    tg.start_soon(collect, plugin)
        return self._merge(capabilities, lists, unavailable)

    async def _vet(
        self, plugin: Plugin, tools: tuple[types.Tool, ...], *, fresh: bool, session_id: str | None
    ) -> tuple[types.Tool, ...]:
        """The tools of `tools` a visitor may be shown: safe, and approved when pinning is on
        (with the apps they name, read again when `fresh`)."""
        safe = self._safe(plugin, tools)
        if self.pins is None:
            return safe
        pid = plugin.manifest.id
        read = await self._apps.versions(plugin, safe, fresh=fresh, session_id=session_id)
        safe, apps = self._app_safe(pid, safe, read)
        if self._observed.get(pid) != (safe, apps):  # `_safe` returns the same tuple while nothing changed
            try:
                await self.pins.observe(plugin, safe, apps)
                self._observed[pid] = (safe, apps)
            except Exception as exc:  # fail closed: a changed tool stays hidden; the next list retries
                # A database outage is logged once by the watcher; no traceback per list here.
                trace = not is_connection_failure(exc)
                logger.warning("%s: its tool definitions could not be recorded", pid, exc_info=trace)
        if self._withheld.get(pid):
            # Something of it is hidden: an approval may have been given on another replica.
            try:
                await self.pins.refresh(every_s=_PIN_REFRESH_S)
            except Exception as exc:  # fail closed: it stays hidden; the next list retries
                logger.warning("%s: approvals could not be re-read", pid, exc_info=not is_connection_failure(exc))
        return self._approved(pid, safe, self.pins)

    def _app_safe(
        self, pid: str, safe: tuple[types.Tool, ...], read: Mapping[str, AppRead]
    ) -> tuple[tuple[types.Tool, ...], Apps]:
        """The tools of `safe` whose app (if any) is not refused — the same tuple while nothing
        changed —, and the apps for the pins (a version, or None: unreadable now)."""
        apps = {uri: None if isinstance(app, AppRefused) else app for uri, app in read.items()}
        last = self._app_vetted.get(pid)
        if last is not None and last[0] is safe and last[1] == read:
            return last[2], apps
        refused = {uri: app.cause for uri, app in read.items() if isinstance(app, AppRefused)}
        dropped = tuple((t.name, refused[uri]) for t in safe if (uri := app_uri(t)) in refused)
        kept = tuple(t for t in safe if app_uri(t) not in refused) if dropped else safe
        if dropped != self._app_refused.get(pid, ()):
            for name, why in dropped:
                logger.warning("%s: tool %r rejected: %s", pid, name[:80], why)
        if dropped:
            self._app_refused[pid] = dropped
        else:
            self._app_refused.pop(pid, None)
        self._app_vetted[pid] = (safe, dict(read), kept)
        return kept, apps

    def _approved(self, pid: str, safe: tuple[types.Tool, ...], pins: PinBook) -> tuple[types.Tool, ...]:
        last = self._pinned.get(pid)
        if last is not None and last[0] is safe and last[1] == pins.version:
            return last[2]
        kept = tuple(t for t in safe if pins.approved(pid, t))
        if len(kept) == len(safe):
            kept = safe  # the same object: merges keyed on it stay cached
        approved = {id(t) for t in kept}
        self._withheld[pid] = tuple(t.name for t in safe if id(t) not in approved)
        self._pinned[pid] = (safe, pins.version, kept)
        return kept

    def _safe(self, plugin: Plugin, tools: tuple[types.Tool, ...]) -> tuple[types.Tool, ...]:
        """The tools that pass the safety checks; a list equal to the last one is not re-checked."""
        pid = plugin.manifest.id
        vetted = self._vetted.get(pid)
        if vetted is not None and (vetted[0] is tools or vetted[0] == tools):
            return vetted[1]
        safe: list[types.Tool] = []
        dropped: list[tuple[str, str]] = []
        owner_only = _owner_only(plugin)
        for tool in tools:
            if tool.name in owner_only:
                continue  # the owner's door calls it by name; visitors never see it
            problem = _tool_problem(tool)
            if problem:
                logger.warning("%s: tool %r dropped: %s", pid, tool.name[:80], problem)
                dropped.append((tool.name, problem))
                continue
            safe.append(tool)
        if dropped:
            self._dropped[pid] = tuple(dropped)
        else:
            self._dropped.pop(pid, None)
        real = frozenset(t.name for t in safe)
        if self._reported.get(pid) != real:
            if owner_only & {t.name for t in tools}:
                logger.info("%s: owner-only tools kept from visitors: %s", pid, sorted(owner_only))
            self._reported[pid] = real
            declared = frozenset(plugin.manifest.visitor_tools or ())
            if declared and declared != real:
                logger.warning(
                    "%s: real tools differ from manifest visitor_tools (the real list wins): missing %s, undeclared %s",
                    pid,
                    sorted(declared - real),
                    sorted(real - declared),
                )
        self._vetted[pid] = (tools, tuple(safe))
        self._schemas.update((t.name, t.input_schema) for t in safe)
        return self._vetted[pid][1]

    def _merge(
        self,
        capabilities: Sequence[Plugin],
        lists: dict[str, tuple[types.Tool, ...]],
        unavailable: dict[str, str],
    ) -> Toolset:
        # The vetted lists are the same objects while nothing changes, so comparing the key
        # (identity first, as tuple equality does) is cheap in the common case.
        ids = tuple(p.manifest.id for p in capabilities)
        key = tuple((lists.get(i), unavailable.get(i)) for i in ids)
        last = self._merges.get(ids)
        if last is not None and last[0] == key:
            return last[1]
        toolset = self._merge_now(capabilities, lists, unavailable)
        if len(self._merges) >= _MAX_MERGES:
            self._merges.pop(next(iter(self._merges)))
        self._merges[ids] = (key, toolset)
        return toolset

    async def review(self, plugin: Plugin, *, fresh: bool) -> bool:
        """List `plugin`'s tools in owner context (its last real list unless `fresh`) and vet
        them as a visitor's list would be, so the pins record what awaits the owner and dropped
        tools get their cause; no session's toolset changes. False when it could not be listed
        (logged; its cause is the child's, as the catalogue shows it)."""
        try:
            child = self._child_of(plugin)  # no session: owner context
            tools = None if fresh else child.tools
            if tools is None:
                tools = await child.list_tools(timeout_s=self._list_timeout_s)
        except HostError as exc:
            logger.info("%s: tools not listed for the owner's review: %s", plugin.manifest.id, exc.message)
            return False
        await self._vet(plugin, tools, fresh=fresh, session_id=None)
        return True

    def _peek_cause(self, plugin: Plugin, session_id: str | None) -> str | None:
        try:
            return self._child_of.lister(plugin, session_id).health().cause
        except HostError:
            return None

    def forget(self, plugin_id: str) -> None:
        """Drop what is remembered of `plugin_id`'s lists (it was removed while the host runs):
        a re-install with the same tools is vetted and recorded with the pins again, rather than
        matched against a list of a plugin that is gone."""
        tables = (self._observed, self._pinned, self._withheld, self._reported, self._vetted, self._dropped)
        for table in (*tables, self._app_vetted, self._app_refused):
            table.pop(plugin_id, None)
        self._apps.forget(plugin_id)
        self._causes.pop(plugin_id, None)
        self._merges = {ids: merge for ids, merge in self._merges.items() if plugin_id not in ids}

    def app_held(self, plugin_id: str, uri: str) -> bool:
        """Whether a tool of `plugin_id`'s last vetted list names the app `uri` and is withheld
        pending the owner's approval (of it, or of the app as it is now)."""
        pinned = self._pinned.get(plugin_id)
        tools = pinned[0] if pinned is not None else ()
        held = set(self._still_pending(plugin_id, self._withheld.get(plugin_id, ())))
        return any(t.name in held and app_uri(t) == uri for t in tools)

    def last_seen_in(self, name: str) -> list[str]:
        """Ids of capabilities whose last real list had a tool `name` (for logs, not decisions)."""
        return [pid for pid, (_, safe) in self._vetted.items() if any(t.name == name for t in safe)]

    def input_schema(self, name: str) -> Mapping[str, Any] | None:
        """The input schema of the last vetted tool named `name`, for any session, or None.

        For the SDK's `Mcp-Param-*` header check only (it runs before the caller is known);
        whether the caller may call the tool is decided by the door, per session.
        """
        return self._schemas.get(name)

    def _merge_now(
        self,
        capabilities: Sequence[Plugin],
        lists: dict[str, tuple[types.Tool, ...]],
        unavailable: dict[str, str],
    ) -> Toolset:
        owners: dict[str, list[tuple[str, str]]] = {}
        for plugin in capabilities:  # manifest order is id order: deterministic
            for tool in lists.get(plugin.manifest.id, ()):
                owners.setdefault(collision_key(tool.name), []).append((plugin.manifest.id, tool.name))
        collisions = {name: tuple(group) for group in owners.values() if len(group) > 1 for _, name in group}
        exposed: dict[str, Binding] = {}
        for plugin in capabilities:
            pid = plugin.manifest.id
            for tool in lists.get(pid, ()):
                if tool.name not in collisions:
                    exposed[tool.name] = Binding(pid, tool)
        self._record_causes(capabilities, collisions, unavailable)
        return Toolset(exposed, collisions, unavailable)

    def _record_causes(
        self,
        capabilities: Sequence[Plugin],
        collisions: dict[str, tuple[tuple[str, str], ...]],
        unavailable: dict[str, str],
    ) -> None:
        for plugin in capabilities:
            pid = plugin.manifest.id
            clashes = [_clash(pid, name, group) for name, group in sorted(collisions.items()) if (pid, name) in group]
            if pid in unavailable:
                clashes.insert(0, f"left out of tool lists: {unavailable[pid]}")
            pending = self._withheld.get(pid, ())
            told = [*clashes, *(f"tool {name!r} is pending owner approval" for name in pending)]
            if told:
                if self._causes.get(pid) != (clashes, pending):
                    for clash in told:
                        logger.warning("%s: %s", pid, clash)
                self._causes[pid] = (clashes, pending)
            else:
                self._causes.pop(pid, None)


def _clash(pid: str, name: str, group: tuple[tuple[str, str], ...]) -> str:
    """Why `pid`'s tool `name` is hidden: the other (capability, tool) pairs of its `group`."""
    others = list(group)
    others.remove((pid, name))
    if all(other == name for _, other in others):
        return f"tool {name!r} is also exposed by {', '.join(pid for pid, _ in others)}; neither copy is exposed"
    named = ", ".join(f"{pid} as {other!r}" for pid, other in others)
    return (
        f"tool {name!r} is also exposed by {named} (names that differ only in case, '-' or '_' collide); "
        "no copy is exposed"
    )


def _dropped(name: str, why: str) -> str:
    """The catalogue's cause for a dropped tool; its name (maybe hostile) escaped and cut."""
    return f"tool {shown(name, 80)} dropped: {why}"


def _owner_only(plugin: Plugin) -> frozenset[str]:
    """Child tools its manifest names only as owner tools: the owner's, never a visitor's."""
    manifest = plugin.manifest
    return frozenset(t.tool for t in manifest.owner_tools) - frozenset(manifest.visitor_tools or ())


def _tool_problem(tool: types.Tool) -> str | None:
    if not TOOL_NAME_RE.fullmatch(tool.name):
        return "its name is not ^[a-zA-Z0-9_-]{1,64}$"
    # A child's schema is untrusted input too (docs/security.md A10: no remote $ref, bounded).
    for label, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
        if schema is None:
            continue
        try:
            check_tool_schema(schema)
        except ValueError as exc:
            return f"{label} schema refused: {exc}"
    for label, text, multiline in (("title", tool.title, False), ("description", tool.description, True)):
        if text is None:
            continue
        try:
            check_text(text, label, multiline=multiline)
        except ValueError as exc:
            return str(exc)
    return None
