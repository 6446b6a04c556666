"""Roles: which capabilities a session may use beyond `acl: always`, with their role config.

Above: `access` (the owner's `role_put` / `roles_list`, and the session opener, which freezes a
role into a `RoleSnapshot`). Below: asyncpg (table `mcp_host.roles`, migration 003) and
`config` (role config values live at scope `role`, scope_id = the role id).

A role id is 1-64 characters `[a-z0-9][a-z0-9_-]*`. A role names capabilities by id; only a
*grantable* one may be named (see `grantable`). Its config is `{capability: {key: value}}`,
checked against each capability's `role_config` declaration before anything is written.
Every owner has a role `public` from the first start, granting nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import Plugin, Registry
from mcp_host.store import ConfigBackend, ConfigScope, check_values, declared

from .sessions import RoleSnapshot

if TYPE_CHECKING:
    import asyncpg

    from mcp_host.store import PgPool

__all__ = [
    "PUBLIC_ROLE_ID",
    "CapabilityConfig",
    "Role",
    "RoleBook",
    "check_capability_config",
    "grantable",
    "is_role_id",
    "not_grantable_because",
    "write_capability_config",
]

PUBLIC_ROLE_ID = "public"
_ROLE_ID = re.compile(r"\A[a-z0-9][a-z0-9_-]{0,63}\Z")
_SHOWN = 80

# `{capability id: {config key: value}}`, as the owner writes it for a role, a code or a key.
CapabilityConfig = Mapping[str, Mapping[str, object]]


def is_role_id(value: object) -> bool:
    """Whether `value` has the grammar of a role id."""
    return isinstance(value, str) and _ROLE_ID.match(value) is not None


def _shown(value: object) -> str:
    return repr(value)[:_SHOWN]


def not_grantable_because(plugin: Plugin) -> str | None:
    """Why a role may not name `plugin` (None when it may).

    The rule: a role grants what a visitor could not otherwise use. Not grantable are
    connectors (reached only through the host, never by a visitor), capabilities that
    declare owner tools and no visitor tools (nothing a visitor could ever see), and
    `acl: always` capabilities that declare no `role_config` (every session sees them
    already, so naming one would change nothing). An `acl: always` capability with
    `role_config` is grantable: the role then carries its config.
    """
    manifest = plugin.manifest
    if manifest.kind == "connector":
        return "is a connector; roles grant capabilities"
    if manifest.owner_tools and not manifest.visitor_tools:
        return "has owner tools only; no visitor could see it"
    if manifest.acl == "always" and not manifest.role_config:
        return "is visible to every session (acl: always) and declares no role_config"
    return None


def grantable(plugins: Sequence[Plugin]) -> tuple[str, ...]:
    """The ids of the capabilities a role may be given, sorted (rule: `not_grantable_because`)."""
    return tuple(sorted(p.manifest.id for p in plugins if not_grantable_because(p) is None))


def check_capability_config(
    plugins: Mapping[str, Plugin], scope: ConfigScope, config: CapabilityConfig, *, at: str = "config"
) -> dict[str, dict[str, object]]:
    """`config` checked against each named capability's declaration for `scope`.

    Raises `InvalidArguments` naming the capability and the key (`config.notes: max_notes:
    must be an integer …`) for an unknown capability, a connector, an undeclared key or a
    value of the wrong type; nothing is written by anyone when it raises.
    """
    checked: dict[str, dict[str, object]] = {}
    for plugin_id in sorted(config, key=str):
        plugin = plugins.get(plugin_id) if isinstance(plugin_id, str) else None
        if plugin is None or plugin.manifest.kind != "capability":
            what = "is a connector" if plugin is not None else "is not a loaded capability"
            raise InvalidArguments(f"{at}: {_shown(plugin_id)} {what}")
        values = config[plugin_id]
        if not isinstance(values, Mapping):
            raise InvalidArguments(f"{at}.{plugin_id}: must be an object of config keys and values")
        try:
            checked[plugin_id] = check_values(declared(plugin.manifest, scope), values)
        except InvalidArguments as exc:
            raise InvalidArguments(f"{at}.{plugin_id}: {exc.message}") from None
    return checked


async def write_capability_config(
    backend: ConfigBackend,
    plugins: Mapping[str, Plugin],
    owner_id: str,
    scope: ConfigScope,
    scope_id: str,
    config: Mapping[str, dict[str, object]],
) -> None:
    """Store checked `config` (from `check_capability_config`) at `scope` / `scope_id`."""
    for plugin_id, values in config.items():
        manifest = plugins[plugin_id].manifest
        await backend.for_plugin(plugin_id, manifest).set(owner_id, scope, scope_id, values)


class Role(BaseModel):
    """A role as the owner sees it; `config` holds every declared role_config key of each
    granted capability that is loaded (its default when unset)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    capabilities: tuple[str, ...]
    config: dict[str, dict[str, Any]]
    created_at: datetime
    updated_at: datetime

    def snapshot(self) -> RoleSnapshot:
        """What a session opened now freezes."""
        return RoleSnapshot(id=self.id, capabilities=self.capabilities, config=self.config)


_COLUMNS = "id, capabilities, created_at, updated_at"


class RoleBook:
    """Roles in `mcp_host.roles`, their config through `config`, checked against `plugins`."""

    def __init__(self, pool: PgPool, config: ConfigBackend, plugins: Sequence[Plugin]) -> None:
        self._pool = pool
        self._config = config
        # live when `plugins` is the registry: a plugin installed while the host runs is known
        self._plugins: Mapping[str, Plugin] = (
            plugins.by_id if isinstance(plugins, Registry) else {p.manifest.id: p for p in plugins}
        )

    async def ensure_public(self, owner_id: str) -> None:
        """Make sure `owner_id` has the role `public`; an existing one is left as it is.

        Idempotent and safe when replicas start at once (one INSERT … ON CONFLICT DO NOTHING).
        """
        await self._pool.execute(
            "INSERT INTO mcp_host.roles (owner_id, id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            owner_id,
            PUBLIC_ROLE_ID,
        )

    async def put(
        self,
        owner_id: str,
        role_id: str,
        capabilities: Sequence[str],
        config: CapabilityConfig | None = None,
    ) -> Role:
        """Create or replace the role `role_id`; return it as stored.

        `config`, when given, replaces the role config of every granted capability (a key it
        leaves out reads as its default); when None, stored role config is left alone.
        Raises `InvalidArguments` naming the id, capability or key at fault; then nothing
        is written.
        """
        if not is_role_id(role_id):
            raise InvalidArguments(
                f"id: a role id is 1-64 characters a-z 0-9 _ - starting with a letter or digit, got {_shown(role_id)}"
            )
        granted = self._check_capabilities(capabilities)
        if config is not None:
            outside = sorted(str(pid) for pid in config if pid not in granted)
            if outside:
                raise InvalidArguments(f"config: {', '.join(outside)} not among the role's capabilities")
            checked = check_capability_config(self._plugins, "role", config)
            # Replace: every declared key of every granted capability is written, None
            # (back to the default) for the ones the owner left out.
            full = {
                pid: {f.key: checked.get(pid, {}).get(f.key) for f in declared(self._plugins[pid].manifest, "role")}
                for pid in granted
            }
            # Config first: a role row never points at config that is not written yet.
            await write_capability_config(self._config, self._plugins, owner_id, "role", role_id, full)
        row = await self._pool.fetchrow(
            f"""
            INSERT INTO mcp_host.roles AS r (owner_id, id, capabilities) VALUES ($1, $2, $3)
            ON CONFLICT (owner_id, id) DO UPDATE SET capabilities = EXCLUDED.capabilities, updated_at = now()
            RETURNING {_COLUMNS}
            """,
            owner_id,
            role_id,
            list(granted),
        )
        assert row is not None  # INSERT … RETURNING of one row
        return await self._role_from_row(owner_id, row)

    async def get(self, owner_id: str, role_id: str) -> Role | None:
        """The role `role_id` with its config, or None."""
        if not is_role_id(role_id):
            return None
        row = await self._pool.fetchrow(
            f"SELECT {_COLUMNS} FROM mcp_host.roles WHERE owner_id = $1 AND id = $2", owner_id, role_id
        )
        return None if row is None else await self._role_from_row(owner_id, row)

    async def list(self, owner_id: str) -> list[Role]:
        """Every role of `owner_id`, by id."""
        rows = await self._pool.fetch(
            f"SELECT {_COLUMNS} FROM mcp_host.roles WHERE owner_id = $1 ORDER BY id", owner_id
        )
        return [await self._role_from_row(owner_id, row) for row in rows]

    async def exists(self, owner_id: str, role_id: str) -> bool:
        if not is_role_id(role_id):
            return False
        found = await self._pool.fetchval(
            "SELECT EXISTS (SELECT 1 FROM mcp_host.roles WHERE owner_id = $1 AND id = $2)", owner_id, role_id
        )
        return bool(found)

    def _check_capabilities(self, capabilities: Sequence[str]) -> tuple[str, ...]:
        if isinstance(capabilities, str) or not isinstance(capabilities, Sequence):
            raise InvalidArguments("capabilities: must be a list of capability ids")
        problems: list[str] = []
        for pid in capabilities:
            plugin = self._plugins.get(pid) if isinstance(pid, str) else None
            reason = "is not a loaded capability" if plugin is None else not_grantable_because(plugin)
            if reason is not None:
                problems.append(f"{_shown(pid)} {reason}")
        if problems:
            raise InvalidArguments(f"capabilities: {'; '.join(problems)}")
        return tuple(sorted(set(capabilities)))

    async def _role_from_row(self, owner_id: str, row: asyncpg.Record) -> Role:
        capabilities: tuple[str, ...] = tuple(row["capabilities"])
        config: dict[str, dict[str, Any]] = {}
        for pid in capabilities:
            plugin = self._plugins.get(pid)
            if plugin is not None:  # a capability no longer loaded has no declarations to read by
                handle = self._config.for_plugin(pid, plugin.manifest)
                config[pid] = await handle.get(owner_id, "role", row["id"])
        return Role(
            id=row["id"],
            capabilities=capabilities,
            config=config,
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )
