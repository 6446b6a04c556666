"""Tool pins: each plugin tool's definition as the owner approved it (docs/security.md E8, rug pulls).

Above: `bindings`, which reports every newly vetted child list (`observe`) and hides from
visitors each tool whose live definition is not the approved one (`approved`, answered from
memory); the owner's door lists what waits (`pending`), approves one tool (`approve`) or several
of one plugin at once, all or none (`approve_many`), and forgets a purged plugin's pins (`forget`).
Below: asyncpg (`mcp_host.tool_pins`, host-wide: a tool's definition is its plugin's, not an
owner's).

A pin is the sha256 of the canonical JSON of the tool's whole definition — name, title,
description, input and output schema, annotations — so a schema-only change counts. A tool
that names an app (MCP Apps: `_meta.ui.resourceUri`) is pinned with its `_meta.ui` and the
app as its server serves it (content sha256, size, each content's declared `_meta.ui`: csp,
permissions, domain), read by `bindings`: a changed app is a changed definition. A
builtin's tool is approved the first time the host sees it (it was installed with the host);
a tool of a plugin added with `--plugins` starts pending. Any later change, a builtin's too,
is pending until the owner approves the definition as it is then.

Approving a tool whose name collides with a tool visitors are shown (the same name, or one that
differs only in case, `-` or `_`: `collision_key`) hides both from every session that sees
both plugins (`bindings`). So a pending tool names those it collides with
(`PendingTool.collides_with`, `exposed_alike`), and the owner's door says so before approving.

Each replica keeps the approved hashes in memory: listing and calling cost no query. An
approval made on another replica reaches this one when it next observes that plugin's list
changing, or at its next start; until then the tool stays hidden here (fail closed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import mcp.types as types

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import Plugin, collision_key
from mcp_host.wire import Apps, AppVersion, app_uri, tool_ui

if TYPE_CHECKING:
    from mcp_host.store import PgPool

__all__ = [
    "DefinitionChanged",
    "MemoryPins",
    "PendingTool",
    "PinBook",
    "Pins",
    "collision_key",
    "definition_hash",
    "definition_of",
]

logger = logging.getLogger(__name__)


def definition_of(tool: types.Tool, app: AppVersion | None = None) -> dict[str, Any]:
    """The parts of `tool` a pin covers, under their wire names; an absent part is None.

    A tool that names an app (`app_uri`) also has its `_meta.ui` (`ui`: the URI and who may
    call it) and the app as served (`app`: `AppVersion.shown`, or `AppVersion.unreadable` when `app`
    is None or another URI's). A tool naming none has exactly the keys it always had, so its
    hash, and its approval, stay what they were."""
    annotations = tool.annotations
    definition = {
        "name": tool.name,
        "title": tool.title,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "outputSchema": tool.output_schema,
        "annotations": (
            None if annotations is None else annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
        ),
    }
    uri = app_uri(tool)
    if uri is not None:
        definition["ui"] = tool_ui(tool)
        definition["app"] = app.shown() if app is not None and app.uri == uri else AppVersion.unreadable(uri)
    return definition


def definition_hash(definition: Mapping[str, Any]) -> bytes:
    """sha256 of `definition` as canonical JSON: sorted keys, no whitespace, UTF-8."""
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


_NO_APPS: Apps = {}


class DefinitionChanged(InvalidArguments):
    """The tool's live definition is not the one the owner reviewed."""


@dataclass(frozen=True)
class PendingTool:
    """A tool waiting for the owner: its approved definition (None if never approved) and the
    definition its plugin shows now."""

    plugin_id: str
    tool: str
    approved: dict[str, Any] | None
    seen: dict[str, Any]
    seen_at: datetime
    collides_with: tuple[tuple[str, str], ...] = ()
    """(plugin id, tool) of the tools shown to visitors (approved as they are) whose names
    collide with this one's: approving it hides them too, wherever a session sees both."""


class PinBook(Protocol):
    """The pins as `bindings` and the owner's door use them."""

    @property
    def version(self) -> int:
        """Grows whenever an approved hash in memory changes (lets callers cache their filtering)."""
        ...

    async def load(self) -> None:
        """Read every approved hash into memory (at start)."""
        ...

    async def observe(self, plugin: Plugin, tools: Sequence[types.Tool], apps: Apps = _NO_APPS) -> set[str]:
        """Record `tools` as `plugin`'s live definitions, each naming an app with that app as
        `apps` has it (by URI; None or absent: unreadable); return the names approved as they are."""
        ...

    def approved(self, plugin_id: str, tool: types.Tool) -> bool:
        """Whether `tool`, exactly as it is, with its app as last observed, is the approved
        definition (from memory only)."""
        ...

    def approves_app(self, plugin_id: str, tool: types.Tool, app: AppVersion) -> bool:
        """Whether `tool` with `app` as its app is the approved definition (from memory only):
        may a visitor be served this version of the app it names."""
        ...

    async def refresh(self, *, every_s: float) -> None:
        """Re-read the approvals if the last read is `every_s` old (approvals given on another
        replica); cheap to call often."""
        ...

    async def pending(self) -> list[PendingTool]:
        """Every tool whose live definition is not approved, by plugin id and name, with the
        shown tools it collides with."""
        ...

    async def exposed_alike(self, plugin_id: str, tool_name: str) -> list[tuple[str, str]]:
        """(plugin id, tool) of every other tool shown to visitors (its live definition approved)
        whose name collides with `tool_name` (`collision_key`), by plugin id and name."""
        ...

    async def approve(self, plugin_id: str, tool_name: str, expected: bytes | None = None) -> PendingTool | None:
        """Approve the tool's definition as last seen; what it was before, or None if no such tool.

        expected: the hash of the definition the owner reviewed; raises `DefinitionChanged`
        when the live one is no longer it (the owner must look again).
        """
        ...

    async def approve_many(self, plugin_id: str, expected: Mapping[str, bytes]) -> list[PendingTool]:
        """Approve each tool of `plugin_id` that `expected` names, at the hash of the definition
        the owner reviewed, all or none; what each was before, by tool name.

        Raises `DefinitionChanged` naming a tool whose live definition is no longer the reviewed
        one (or that was never seen), and then approves none of them.
        """
        ...

    async def forget(self, plugin_id: str) -> int:
        """Delete every pin of `plugin_id` (a purged plugin: its tools are pending no more, and
        one installed again later under the id starts pending); how many were deleted."""
        ...


class _Approvals:
    """The in-memory half both implementations share: approved hashes and the warn-once log."""

    def __init__(self) -> None:
        self.hashes: dict[tuple[str, str], bytes] = {}
        self.apps: dict[str, Apps] = {}
        self.version = 0
        self._warned: set[tuple[str, str, bytes]] = set()

    def put(self, plugin_id: str, tool: str, digest: bytes | None) -> None:
        key = (plugin_id, tool)
        if self.hashes.get(key) == digest:
            return
        if digest is None:
            self.hashes.pop(key, None)
        else:
            self.hashes[key] = digest
        self.version += 1

    def drop(self, plugin_id: str) -> None:
        for key in [k for k in self.hashes if k[0] == plugin_id]:
            self.put(*key, None)
        self.apps.pop(plugin_id, None)

    def take_apps(self, plugin_id: str, apps: Apps) -> None:
        if self.apps.get(plugin_id, _NO_APPS) != apps:
            self.apps[plugin_id] = dict(apps)
            self.version += 1  # what `approved` answers may change with them

    def approved(self, plugin_id: str, tool: types.Tool) -> bool:
        uri = app_uri(tool)
        app = None if uri is None else self.apps.get(plugin_id, _NO_APPS).get(uri)
        return self.approves(plugin_id, tool, app)

    def approves(self, plugin_id: str, tool: types.Tool, app: AppVersion | None) -> bool:
        digest = self.hashes.get((plugin_id, tool.name))
        return digest is not None and digest == definition_hash(definition_of(tool, app))

    def settle(self, plugin_id: str, seen: Mapping[str, bytes], approved: Mapping[str, bytes | None]) -> set[str]:
        """Take the approved hashes read back for `seen`; the names approved as seen."""
        ok: set[str] = set()
        for name, digest in seen.items():
            self.put(plugin_id, name, approved[name])
            if approved[name] == digest:
                ok.add(name)
            elif (plugin_id, name, digest) not in self._warned:
                self._warned.add((plugin_id, name, digest))
                why = "it is new" if approved[name] is None else "its definition changed since it was approved"
                logger.warning("%s: tool %r is hidden, pending owner approval: %s", plugin_id, name, why)
        return ok


def _alike(shown: Sequence[tuple[str, str]], plugin_id: str, tool_name: str) -> tuple[tuple[str, str], ...]:
    key = collision_key(tool_name)
    alike = {(pid, name) for pid, name in shown if collision_key(name) == key}
    alike.discard((plugin_id, tool_name))
    return tuple(sorted(alike))


def _with_collisions(pending: list[PendingTool], shown: Sequence[tuple[str, str]]) -> list[PendingTool]:
    return [replace(p, collides_with=_alike(shown, p.plugin_id, p.tool)) for p in pending]


def _definitions(tools: Sequence[types.Tool], apps: Apps) -> dict[str, tuple[dict[str, Any], bytes]]:
    # Sorted by name: replicas upserting the same rows take their locks in one order.
    found: dict[str, tuple[dict[str, Any], bytes]] = {}
    for tool in sorted(tools, key=lambda t: t.name):
        uri = app_uri(tool)
        definition = definition_of(tool, None if uri is None else apps.get(uri))
        found[tool.name] = (definition, definition_hash(definition))
    return found


_UPSERT = """
INSERT INTO mcp_host.tool_pins AS p
    (plugin_id, tool, seen_hash, seen_definition, approved_hash, approved_definition, approved_at)
VALUES ($1, $2, $3::bytea, $4::jsonb, CASE WHEN $5 THEN $3::bytea END, CASE WHEN $5 THEN $4::jsonb END,
        CASE WHEN $5 THEN now() END)
ON CONFLICT (plugin_id, tool) DO UPDATE
    SET seen_hash = EXCLUDED.seen_hash, seen_definition = EXCLUDED.seen_definition, seen_at = now()
RETURNING p.approved_hash
"""

# The old approved definition comes from the locked sub-select: RETURNING sees new values only.
_APPROVE = """
UPDATE mcp_host.tool_pins AS p
SET approved_hash = p.seen_hash, approved_definition = p.seen_definition, approved_at = now()
FROM (
    SELECT plugin_id, tool, approved_definition FROM mcp_host.tool_pins
    WHERE plugin_id = $1 AND tool = $2 FOR UPDATE
) AS old
WHERE p.plugin_id = old.plugin_id AND p.tool = old.tool AND ($3::bytea IS NULL OR p.seen_hash = $3)
RETURNING old.approved_definition, p.seen_definition, p.seen_hash, p.seen_at
"""


class Pins:
    """The pins in Postgres, with this replica's approved hashes in memory."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool
        self._memory = _Approvals()
        self._loaded_at = float("-inf")

    @property
    def version(self) -> int:
        return self._memory.version

    async def load(self) -> None:
        rows = await self._pool.fetch(
            "SELECT plugin_id, tool, approved_hash FROM mcp_host.tool_pins WHERE approved_hash IS NOT NULL"
        )
        for row in rows:
            self._memory.put(row["plugin_id"], row["tool"], bytes(row["approved_hash"]))
        self._loaded_at = time.monotonic()

    async def refresh(self, *, every_s: float) -> None:
        if time.monotonic() - self._loaded_at >= every_s:
            await self.load()

    async def observe(self, plugin: Plugin, tools: Sequence[types.Tool], apps: Apps = _NO_APPS) -> set[str]:
        pid = plugin.manifest.id
        seen = _definitions(tools, apps)
        approved: dict[str, bytes | None] = {}
        # One statement per tool, each atomic on its own: a replica upserting the same rows at
        # once waits for the other's row and updates it (ON CONFLICT), never fails.
        async with self._pool.acquire() as conn:
            for name, (definition, digest) in seen.items():
                stored = await conn.fetchval(_UPSERT, pid, name, digest, definition, plugin.builtin)
                approved[name] = None if stored is None else bytes(stored)
        self._memory.take_apps(pid, apps)
        return self._memory.settle(pid, {n: d for n, (_, d) in seen.items()}, approved)

    def approved(self, plugin_id: str, tool: types.Tool) -> bool:
        return self._memory.approved(plugin_id, tool)

    def approves_app(self, plugin_id: str, tool: types.Tool, app: AppVersion) -> bool:
        return self._memory.approves(plugin_id, tool, app)

    async def pending(self) -> list[PendingTool]:
        rows = await self._pool.fetch(
            "SELECT plugin_id, tool, approved_definition, seen_definition, seen_at FROM mcp_host.tool_pins "
            "WHERE approved_hash IS DISTINCT FROM seen_hash ORDER BY plugin_id, tool"
        )
        pending = [
            PendingTool(r["plugin_id"], r["tool"], r["approved_definition"], r["seen_definition"], r["seen_at"])
            for r in rows
        ]
        return _with_collisions(pending, await self._shown()) if pending else pending

    async def exposed_alike(self, plugin_id: str, tool_name: str) -> list[tuple[str, str]]:
        return list(_alike(await self._shown(), plugin_id, tool_name))

    async def _shown(self) -> list[tuple[str, str]]:
        # Tools approved as last seen (a few per plugin; one a child stopped listing too):
        # names are compared by `collision_key`, in Python.
        rows = await self._pool.fetch("SELECT plugin_id, tool FROM mcp_host.tool_pins WHERE approved_hash = seen_hash")
        return [(r["plugin_id"], r["tool"]) for r in rows]

    async def approve(self, plugin_id: str, tool_name: str, expected: bytes | None = None) -> PendingTool | None:
        row = await self._pool.fetchrow(_APPROVE, plugin_id, tool_name, expected)
        if row is None:
            if expected is not None and await self._pool.fetchval(
                "SELECT 1 FROM mcp_host.tool_pins WHERE plugin_id = $1 AND tool = $2", plugin_id, tool_name
            ):
                raise DefinitionChanged(f"{plugin_id}: {tool_name!r} changed since it was reviewed")
            return None
        self._memory.put(plugin_id, tool_name, bytes(row["seen_hash"]))
        logger.info("%s: tool %r approved by the owner", plugin_id, tool_name)
        return PendingTool(plugin_id, tool_name, row["approved_definition"], row["seen_definition"], row["seen_at"])

    async def approve_many(self, plugin_id: str, expected: Mapping[str, bytes]) -> list[PendingTool]:
        before: list[PendingTool] = []
        approved: list[tuple[str, bytes]] = []
        # One transaction: a tool changed since the owner's review rolls back the ones before it.
        # By name, so two owners approving overlapping sets lock their rows in one order.
        async with self._pool.acquire() as conn, conn.transaction():
            for name in sorted(expected):
                row = await conn.fetchrow(_APPROVE, plugin_id, name, expected[name])
                if row is None:
                    raise DefinitionChanged(f"{plugin_id}: {name!r} changed since it was reviewed")
                before.append(
                    PendingTool(plugin_id, name, row["approved_definition"], row["seen_definition"], row["seen_at"])
                )
                approved.append((name, bytes(row["seen_hash"])))
        for name, digest in approved:
            self._memory.put(plugin_id, name, digest)
        if approved:
            logger.info("%s: tools %s approved by the owner", plugin_id, ", ".join(repr(n) for n, _ in approved))
        return before

    async def forget(self, plugin_id: str) -> int:
        rows = await self._pool.fetch("DELETE FROM mcp_host.tool_pins WHERE plugin_id = $1 RETURNING tool", plugin_id)
        self._memory.drop(plugin_id)
        return len(rows)


@dataclass
class _Row:
    seen: dict[str, Any]
    seen_hash: bytes
    seen_at: datetime
    approved: dict[str, Any] | None = None
    approved_hash: bytes | None = None


class MemoryPins:
    """The pins in memory: `Pins`' rules without a database, for unit tests of logic."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], _Row] = {}
        self._memory = _Approvals()

    @property
    def version(self) -> int:
        return self._memory.version

    async def load(self) -> None:
        for (pid, name), row in self._rows.items():
            self._memory.put(pid, name, row.approved_hash)

    async def refresh(self, *, every_s: float) -> None:
        return None  # one process: every approval is already in memory

    async def observe(self, plugin: Plugin, tools: Sequence[types.Tool], apps: Apps = _NO_APPS) -> set[str]:
        pid = plugin.manifest.id
        seen = _definitions(tools, apps)
        now = datetime.now(UTC)
        for name, (definition, digest) in seen.items():
            row = self._rows.get((pid, name))
            if row is None:
                row = self._rows[(pid, name)] = _Row(definition, digest, now)
                if plugin.builtin:
                    row.approved, row.approved_hash = definition, digest
            else:
                row.seen, row.seen_hash, row.seen_at = definition, digest, now
        approved = {name: self._rows[(pid, name)].approved_hash for name in seen}
        self._memory.take_apps(pid, apps)
        return self._memory.settle(pid, {n: d for n, (_, d) in seen.items()}, approved)

    def approved(self, plugin_id: str, tool: types.Tool) -> bool:
        return self._memory.approved(plugin_id, tool)

    def approves_app(self, plugin_id: str, tool: types.Tool, app: AppVersion) -> bool:
        return self._memory.approves(plugin_id, tool, app)

    async def pending(self) -> list[PendingTool]:
        pending = [
            PendingTool(pid, name, row.approved, row.seen, row.seen_at)
            for (pid, name), row in sorted(self._rows.items())
            if row.approved_hash != row.seen_hash
        ]
        return _with_collisions(pending, self._shown())

    async def exposed_alike(self, plugin_id: str, tool_name: str) -> list[tuple[str, str]]:
        return list(_alike(self._shown(), plugin_id, tool_name))

    def _shown(self) -> list[tuple[str, str]]:
        return [key for key, row in self._rows.items() if row.approved_hash == row.seen_hash]

    async def approve(self, plugin_id: str, tool_name: str, expected: bytes | None = None) -> PendingTool | None:
        row = self._rows.get((plugin_id, tool_name))
        if row is None:
            return None
        if expected is not None and expected != row.seen_hash:
            raise DefinitionChanged(f"{plugin_id}: {tool_name!r} changed since it was reviewed")
        before = PendingTool(plugin_id, tool_name, row.approved, row.seen, row.seen_at)
        row.approved, row.approved_hash = row.seen, row.seen_hash
        self._memory.put(plugin_id, tool_name, row.seen_hash)
        return before

    async def approve_many(self, plugin_id: str, expected: Mapping[str, bytes]) -> list[PendingTool]:
        for name in sorted(expected):  # every one checked before any is approved
            row = self._rows.get((plugin_id, name))
            if row is None or row.seen_hash != expected[name]:
                raise DefinitionChanged(f"{plugin_id}: {name!r} changed since it was reviewed")
        return [before for name in sorted(expected) if (before := await self.approve(plugin_id, name)) is not None]

    async def forget(self, plugin_id: str) -> int:
        keys = [key for key in self._rows if key[0] == plugin_id]
        for key in keys:
            del self._rows[key]
        self._memory.drop(plugin_id)
        return len(keys)
