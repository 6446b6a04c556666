"""Declared config: the values an owner sets for a plugin's declared fields, in four scopes.

Above: the owner door's `config_get` / `config_set`, the back-channel's `config.get`, quota
(which reads its limit here) and the session opener, whose role snapshot freezes role config
(read back with `role_values`). Below: `manifest` (the `ConfigField` declarations) and
asyncpg (table `mcp_host.config_values`, migration 002), or a dict (`InMemoryConfigStore`,
for unit tests of logic).

A manifest declares fields in four lists with one format: `config` (scope `owner`),
`code_config` (`code`, per access code), `role_config` (`role`) and `key_config` (`key`, per
API key). A write is checked against the declaration (`check_values`): an undeclared key or a
value of the wrong type is refused and nothing is written. A read is checked again
(`read_values`): a stored value that no longer fits (the declaration changed) reads as the
default, a key no longer declared is not returned, and no default reads as None (JSON null),
never "".

A `PluginConfig` is bound to one plugin when it is made; none of its methods takes a plugin
id, so whoever holds it cannot reach another plugin's values.

A `secret` field (owner scope only) is sealed with the host key (`secrets_box`, bound to the
owner, the plugin and the key) before it is written, and reads as `{"set": true}` or
`{"set": false}`: no reader of config (the owner door, the catalogue, `config.get`) sees it.
Only `PluginConfig.child_config` opens it, for the child's environment
(`Transport.env_from_config`, `${config.KEY}` in `env`); a write to a key a child takes
(those, `${config.KEY}` in `args`, a required one) calls `on_env_changed(plugin_id)`, so the
plugin's children restart with the new value.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, Protocol

import anyio.lowlevel

from mcp_host.errors import InvalidArguments, Unavailable
from mcp_host.plugins import ChildConfig, ConfigField, Manifest, Plugin, config_keys, resolve_config, value_text

from .secrets_box import SealError, SecretBox

if TYPE_CHECKING:
    from .database import PgPool

__all__ = [
    "MAX_LIST_ITEMS",
    "MAX_STRING_CHARS",
    "SCOPES",
    "SCOPE_LISTS",
    "ConfigBackend",
    "ConfigRows",
    "ConfigScope",
    "ConfigStore",
    "ConfigUnset",
    "InMemoryConfigStore",
    "OwnerEnv",
    "PluginConfig",
    "RowKey",
    "check_value",
    "check_values",
    "declared",
    "read_values",
    "role_values",
]

_logger = logging.getLogger("mcp_host.store.config")

ConfigScope = Literal["owner", "code", "role", "key"]
SCOPES: tuple[ConfigScope, ...] = ("owner", "code", "role", "key")
# The manifest list that declares each scope's fields.
SCOPE_LISTS: dict[ConfigScope, str] = {
    "owner": "config",
    "code": "code_config",
    "role": "role_config",
    "key": "key_config",
}

MAX_STRING_CHARS = 4096
MAX_LIST_ITEMS = 256
# Integers a JSON peer (and jsonb) reads without loss.
_SAFE_INT = 2**53 - 1
_SHOWN_CHARS = 60
_MAX_PROBLEMS = 10
_TIME = re.compile(r"\A(?:[01][0-9]|2[0-3]):[0-5][0-9]\Z")
_KEY = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
# The grammar of a session subject's id (sessions.Subject), which code and key ids share.
_SCOPE_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
# C0 and C1 controls but tab and newline (a value may be a paragraph), and lone surrogates,
# which neither UTF-8 nor jsonb can hold.
_FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_EXPECTED = {
    "string": "a string",
    "int": "an integer",
    "bool": "true or false",
    "time": 'a 24-hour time "HH:MM"',
    "string_list": "a list of strings",
}

JsonValues = dict[str, object]
# A stored row: owner id, plugin id, scope, scope id.
RowKey = tuple[str, str, ConfigScope, str]


def declared(manifest: Manifest, scope: ConfigScope) -> tuple[ConfigField, ...]:
    """The fields `manifest` declares for `scope`."""
    return manifest.config_lists()[SCOPE_LISTS[scope]]


# ---------------------------------------------------------------------------------------------
# Checking values against a declaration


def _shown(value: object) -> str:
    """`value` as a short JSON literal that is safe to print: escaped, cut to ~60 characters."""
    if isinstance(value, str | list | tuple):
        value = value[:_SHOWN_CHARS]  # cut before escaping, so a huge value costs nothing
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        return f"a value of type {type(value).__name__}"
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _expected(field: ConfigField, value: object) -> InvalidArguments:
    return InvalidArguments(f"{field.key}: must be {_EXPECTED[field.type]} (type {field.type}), got {_shown(value)}")


def _text(at: str, value: str) -> str:
    if len(value) > MAX_STRING_CHARS:
        raise InvalidArguments(f"{at}: is {len(value)} characters long; the limit is {MAX_STRING_CHARS}")
    match = _FORBIDDEN.search(value)
    if match is not None:
        char = match.group()
        kind = "a lone surrogate" if "\ud800" <= char <= "\udfff" else "a control character"
        raise InvalidArguments(f"{at}: contains {kind} (U+{ord(char):04X}) at index {match.start()}")
    return value


def _check_string(field: ConfigField, value: object) -> object:
    if not isinstance(value, str):
        raise _expected(field, value)
    return _text(field.key, value)


def _check_int(field: ConfigField, value: object) -> object:
    if type(value) is not int:  # bool is an int subclass; 5.0 is not an integer here
        raise _expected(field, value)
    if not -_SAFE_INT <= value <= _SAFE_INT:
        raise InvalidArguments(f"{field.key}: must be within ±{_SAFE_INT}, the range a JSON number holds exactly")
    if field.min is not None and value < field.min:
        raise InvalidArguments(f"{field.key}: {value} is below min ({field.min})")
    if field.max is not None and value > field.max:
        raise InvalidArguments(f"{field.key}: {value} is above max ({field.max})")
    return value


def _check_bool(field: ConfigField, value: object) -> object:
    if not isinstance(value, bool):
        raise _expected(field, value)
    return value


def _check_time(field: ConfigField, value: object) -> object:
    if not isinstance(value, str) or _TIME.match(value) is None:
        raise _expected(field, value)
    return value


def _check_string_list(field: ConfigField, value: object) -> object:
    if not isinstance(value, list | tuple):
        raise _expected(field, value)
    if len(value) > MAX_LIST_ITEMS:
        raise InvalidArguments(f"{field.key}: has {len(value)} items; the limit is {MAX_LIST_ITEMS}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidArguments(f"{field.key}.{index}: must be a string, got {_shown(item)}")
        _text(f"{field.key}.{index}", item)
    return list(value)


_CHECKS: dict[str, Callable[[ConfigField, object], object]] = {
    "string": _check_string,
    "int": _check_int,
    "bool": _check_bool,
    "time": _check_time,
    "string_list": _check_string_list,
}


def check_value(field: ConfigField, value: object) -> object:
    """`value` as JSON if it fits `field` (a string_list comes back as a new list).

    Raises `InvalidArguments` whose message names the key and what was expected, showing at
    most ~60 escaped characters of the value.
    """
    return _CHECKS[field.type](field, value)


def _key_name(key: object) -> str:
    return key if isinstance(key, str) and _KEY.match(key) else _shown(key)


def check_values(fields: Sequence[ConfigField], values: Mapping[str, object]) -> JsonValues:
    """`values` checked against `fields`; None (reset to the default) stays None.

    Every key is checked; raises one `InvalidArguments` listing every problem in key order
    (at most 10, then a count), so the caller can fix them all at once. An undeclared key is
    a problem that names it; the message then ends with the declared keys.
    """
    by_key = {field.key: field for field in fields}
    checked: JsonValues = {}
    problems: list[str] = []
    undeclared = False
    for key in sorted(values, key=str):
        field = by_key.get(key) if isinstance(key, str) else None
        if field is None:
            undeclared = True
            problems.append(f"{_key_name(key)}: not a declared config key")
            continue
        value = values[key]
        try:
            checked[key] = None if value is None else check_value(field, value)
        except InvalidArguments as exc:
            problems.append(_secret_problem(field) if field.secret else exc.message)
    if problems:
        more = len(problems) - _MAX_PROBLEMS
        message = "; ".join(problems[:_MAX_PROBLEMS]) + (f"; and {more} more" if more > 0 else "")
        if undeclared:
            message += f". Declared keys: {', '.join(by_key)}" if by_key else ". No key is declared here"
        raise InvalidArguments(message)
    return checked


def _secret_problem(field: ConfigField) -> str:
    """What is wrong with a secret's value, without a word of the value."""
    return f"{field.key}: must be a string of at most {MAX_STRING_CHARS} characters without control characters"


def _default(field: ConfigField) -> object:
    return list(field.default) if isinstance(field.default, tuple) else field.default


def _read_one(field: ConfigField, stored: Mapping[str, object]) -> object:
    value = stored.get(field.key)
    if field.secret:  # sealed; only `PluginConfig.env` opens it
        return {"set": value is not None}
    if value is None:
        return _default(field)
    try:
        return check_value(field, value)
    except InvalidArguments as exc:
        _logger.warning("a stored config value no longer fits its declaration; reading the default: %s", exc)
        return _default(field)


def read_values(fields: Sequence[ConfigField], stored: Mapping[str, object]) -> JsonValues:
    """Every declared key with its stored value, or its default (None when it has none).

    A stored value that no longer fits its field reads as the default (and is logged as a
    warning); a stored key that is no longer declared is left out.
    """
    return {field.key: _read_one(field, stored) for field in fields}


def role_values(
    source: Manifest | Sequence[ConfigField],
    snapshot_config: Mapping[str, Mapping[str, object]],
    plugin_id: str,
) -> JsonValues:
    """The role config of `plugin_id` as frozen into a session's `RoleSnapshot.config`.

    `source` is the plugin's manifest or its `role_config` fields.
    """
    fields = source.role_config if isinstance(source, Manifest) else source
    return read_values(fields, snapshot_config.get(plugin_id, {}))


def _known_scope(scope: str) -> ConfigScope:
    if scope not in SCOPES:
        raise InvalidArguments(f"scope: must be one of {', '.join(SCOPES)}, got {_shown(scope)}")
    return scope


def _checked_scope(scope: str, scope_id: str) -> ConfigScope:
    """`scope` if it is one and `scope_id` fits it; raises `InvalidArguments` otherwise."""
    known = _known_scope(scope)
    if known == "owner":
        if scope_id != "":
            raise InvalidArguments("scope_id: the owner scope takes no scope_id")
    elif not isinstance(scope_id, str) or _SCOPE_ID.match(scope_id) is None:
        raise InvalidArguments(
            f"scope_id: a {known} scope needs an id of 1-128 characters A-Z a-z 0-9 . _ - "
            f"starting with a letter or digit, got {_shown(scope_id)}"
        )
    return known


# ---------------------------------------------------------------------------------------------
# Storage


class ConfigRows(Protocol):
    """Where values live: one JSON object per owner, plugin, scope and scope id; unchecked."""

    async def fetch_rows(
        self, owner_id: str, plugin_id: str, wanted: Sequence[tuple[ConfigScope, str]]
    ) -> dict[tuple[ConfigScope, str], Mapping[str, object]]:
        """The stored objects of the `wanted` (scope, scope_id) pairs that have one."""
        ...

    async def merge_row(self, row: RowKey, new: Mapping[str, object], removed: Sequence[str]) -> Mapping[str, object]:
        """Atomically merge `new` into the stored object and drop `removed`; return the result."""
        ...


class ConfigBackend(Protocol):
    """Hands out config handles, each bound to one plugin."""

    def for_plugin(self, plugin_id: str, manifest: Manifest) -> PluginConfig:
        """A handle on `plugin_id`'s values; raises `ValueError` if `manifest` is another's."""
        ...


class ConfigUnset(Unavailable):
    """A required owner setting of a plugin is unset: its children are not started."""


EnvChanged = Callable[[str], None]


def _bound_to(owner_id: str, plugin_id: str, key: str) -> str:
    return f"config\x00{owner_id}\x00{plugin_id}\x00{key}"


class PluginConfig:
    """One plugin's config values, checked against its manifest; made by `for_plugin`.

    box: seals and opens secret values (a host without one refuses to store a secret).
    on_env_changed: called with the plugin id after an owner write to a key that feeds the
    child's environment or is required.
    """

    def __init__(
        self,
        rows: ConfigRows,
        plugin_id: str,
        manifest: Manifest,
        *,
        box: SecretBox | None = None,
        on_env_changed: EnvChanged | None = None,
    ) -> None:
        if manifest.id != plugin_id:
            raise ValueError(f"the manifest of {manifest.id!r} does not declare {plugin_id!r}'s config")
        self._rows = rows
        self._plugin_id = plugin_id
        self._fields = {scope: declared(manifest, scope) for scope in SCOPES}
        self._box = box
        self._on_env_changed = on_env_changed
        self._transport = manifest.transport
        self._feeds_child = config_keys(manifest.transport) | {f.key for f in manifest.config if f.required}

    @property
    def plugin_id(self) -> str:
        return self._plugin_id

    def fields(self, scope: ConfigScope) -> tuple[ConfigField, ...]:
        """The fields declared for `scope`; raises `InvalidArguments` for an unknown scope."""
        return self._fields[_known_scope(scope)]

    async def get(self, owner_id: str, scope: ConfigScope, scope_id: str = "") -> JsonValues:
        """Every declared key of `scope` with its value (see `read_values`).

        Raises `InvalidArguments` for an unknown scope or a scope_id that does not fit it.
        """
        return (await self.get_many(owner_id, [(scope, scope_id)]))[scope]

    async def get_many(self, owner_id: str, scopes: Sequence[tuple[ConfigScope, str]]) -> dict[ConfigScope, JsonValues]:
        """The values of several scopes, read in one query (none when no field is declared).

        Raises `InvalidArguments` for a bad scope or scope_id, or a scope named twice.
        """
        wanted = [(_checked_scope(scope, scope_id), scope_id) for scope, scope_id in scopes]
        if len({scope for scope, _ in wanted}) != len(wanted):
            raise InvalidArguments("scopes: each scope may be named once")
        to_read = [(scope, scope_id) for scope, scope_id in wanted if self._fields[scope]]
        rows = await self._rows.fetch_rows(owner_id, self._plugin_id, to_read) if to_read else {}
        return {scope: read_values(self._fields[scope], rows.get((scope, sid), {})) for scope, sid in wanted}

    async def set(self, owner_id: str, scope: ConfigScope, scope_id: str, values: Mapping[str, object]) -> JsonValues:
        """Check `values`, merge them into the stored ones (None removes a key, so it reads
        as its default), and return every declared key's value after the write.

        Raises `InvalidArguments` (see `check_values`, `get`); then nothing is written.
        """
        fields = self._fields[_checked_scope(scope, scope_id)]
        checked = check_values(fields, values)
        if not checked:
            return await self.get(owner_id, scope, scope_id)
        seal = scope == "owner"
        new = {k: self._sealed(owner_id, k, v) if seal else v for k, v in checked.items() if v is not None}
        removed = sorted(key for key, value in checked.items() if value is None)
        stored = await self._rows.merge_row((owner_id, self._plugin_id, scope, scope_id), new, removed)
        if scope == "owner" and self._on_env_changed is not None and self._feeds_child & checked.keys():
            self._on_env_changed(self._plugin_id)
        return read_values(fields, stored)

    def _sealed(self, owner_id: str, key: str, value: object) -> object:
        if not any(f.secret and f.key == key for f in self._fields["owner"]):
            return value
        if self._box is None:
            raise Unavailable("this host keeps no secrets (no host key); the value was not stored")
        return self._box.seal(value, bound_to=_bound_to(owner_id, self._plugin_id, key))

    async def env(self, owner_id: str) -> dict[str, str]:
        """The variables the owner's config gives the child (`child_config`), and a remote
        plugin's headers from it (`Transport.headers_from_config`, name -> value).

        Raises `ConfigUnset` naming the first required key that has no value (nor default).
        """
        return dict((await self.child_config(owner_id)).env)

    async def child_config(self, owner_id: str) -> ChildConfig:
        """What the owner's config gives one start of the child: its variables
        (`Transport.env_from_config`, `${config.KEY}` in `env`; a remote's
        `headers_from_config`), secrets opened, and its arguments with `${config.KEY}`
        resolved — each the owner's value, else the field's default (`plugins.config_refs`).

        Raises `ConfigUnset` naming the first required key that has no value (nor default).
        """
        transport = self._transport
        if not self._feeds_child:
            return ChildConfig(args=transport.args if transport is not None else ())
        owner = self._fields["owner"]
        rows = await self._rows.fetch_rows(owner_id, self._plugin_id, [("owner", "")])
        stored = rows.get(("owner", ""), {})
        values = {f.key: self._opened(owner_id, f, stored) if f.secret else _read_one(f, stored) for f in owner}
        for field in owner:
            if field.required and values[field.key] is None:
                raise ConfigUnset(
                    f"the owner must set {field.key!r} of {self._plugin_id} (config_set) before it can start"
                )
        resolved = resolve_config(transport, values)
        headers = transport.headers_from_config if transport is not None else {}
        env = {**resolved.env, **{h: value_text(values[k]) for h, k in headers.items() if values.get(k) is not None}}
        return ChildConfig(env, resolved.args)

    def _opened(self, owner_id: str, field: ConfigField, stored: Mapping[str, object]) -> object:
        sealed = stored.get(field.key)
        if not isinstance(sealed, str) or self._box is None:
            return None
        try:
            return self._box.open(sealed, bound_to=_bound_to(owner_id, self._plugin_id, field.key))
        except SealError:  # the host key changed: the secret is lost, as a connector's would be
            _logger.warning("%s: the secret setting %r does not open with this host key", self._plugin_id, field.key)
            return None


class OwnerEnv:
    """What each plugin's child gets in its environment from the owner's config: the env source
    the child factory reads when a child starts (through `children.OnceOpen`)."""

    def __init__(self, backend: ConfigBackend, owner_id: str) -> None:
        self._backend = backend
        self._owner_id = owner_id

    async def env_for(self, plugin: Plugin) -> dict[str, str]:
        """`plugin`'s variables; raises `ConfigUnset` for a required setting left unset."""
        return dict((await self.child_config(plugin)).env)

    async def child_config(self, plugin: Plugin) -> ChildConfig:
        """`plugin`'s variables and arguments (`PluginConfig.child_config`); raises
        `ConfigUnset` for a required setting left unset."""
        manifest = plugin.manifest
        return await self._backend.for_plugin(manifest.id, manifest).child_config(self._owner_id)


class ConfigStore:
    """Config values in `mcp_host.config_values`, shared by replicas (see `PluginConfig` for
    `box` and `on_env_changed`; a change restarts children on this replica only)."""

    def __init__(self, pool: PgPool, *, box: SecretBox | None = None, on_env_changed: EnvChanged | None = None) -> None:
        self._pool = pool
        self._box = box
        self._on_env_changed = on_env_changed

    def for_plugin(self, plugin_id: str, manifest: Manifest) -> PluginConfig:
        return PluginConfig(self, plugin_id, manifest, box=self._box, on_env_changed=self._on_env_changed)

    async def fetch_rows(
        self, owner_id: str, plugin_id: str, wanted: Sequence[tuple[ConfigScope, str]]
    ) -> dict[tuple[ConfigScope, str], Mapping[str, object]]:
        rows = await self._pool.fetch(
            'SELECT scope, scope_id, "values" FROM mcp_host.config_values '
            "WHERE owner_id = $1 AND plugin_id = $2 "
            "AND (scope, scope_id) IN (SELECT * FROM unnest($3::text[], $4::text[]))",
            owner_id,
            plugin_id,
            [scope for scope, _ in wanted],
            [scope_id for _, scope_id in wanted],
        )
        return {(row["scope"], row["scope_id"]): row["values"] for row in rows}

    async def forget_plugin(self, plugin_id: str) -> int:
        """Delete every stored value of `plugin_id`, for every owner (uninstall); how many rows."""
        status: str = await self._pool.execute("DELETE FROM mcp_host.config_values WHERE plugin_id = $1", plugin_id)
        return int(status.rsplit(" ", 1)[-1])

    async def merge_row(self, row: RowKey, new: Mapping[str, object], removed: Sequence[str]) -> Mapping[str, object]:
        # One statement: concurrent writers of different keys of one row queue on its row
        # lock and each merges into the other's committed result.
        stored: Mapping[str, object] = await self._pool.fetchval(
            'INSERT INTO mcp_host.config_values AS c (owner_id, plugin_id, scope, scope_id, "values") '
            "VALUES ($1, $2, $3, $4, $5::jsonb) "
            "ON CONFLICT (owner_id, plugin_id, scope, scope_id) DO UPDATE "
            'SET "values" = (c."values" || EXCLUDED."values") - $6::text[], updated_at = now() '
            'RETURNING "values"',
            *row,
            dict(new),
            list(removed),
        )
        return stored


class InMemoryConfigStore:
    """Config values in a dict, for unit tests of logic; values pass through JSON as in jsonb."""

    def __init__(self, *, box: SecretBox | None = None, on_env_changed: EnvChanged | None = None) -> None:
        self._rows: dict[RowKey, dict[str, object]] = {}
        self._box = box
        self._on_env_changed = on_env_changed

    def for_plugin(self, plugin_id: str, manifest: Manifest) -> PluginConfig:
        return PluginConfig(self, plugin_id, manifest, box=self._box, on_env_changed=self._on_env_changed)

    async def fetch_rows(
        self, owner_id: str, plugin_id: str, wanted: Sequence[tuple[ConfigScope, str]]
    ) -> dict[tuple[ConfigScope, str], Mapping[str, object]]:
        await anyio.lowlevel.checkpoint()
        found = {(scope, sid): self._rows.get((owner_id, plugin_id, scope, sid)) for scope, sid in wanted}
        return {key: json.loads(json.dumps(row)) for key, row in found.items() if row is not None}

    async def merge_row(self, row: RowKey, new: Mapping[str, object], removed: Sequence[str]) -> Mapping[str, object]:
        await anyio.lowlevel.checkpoint()
        stored = self._rows.setdefault(row, {})
        stored.update(json.loads(json.dumps(dict(new))))
        for key in removed:
            stored.pop(key, None)
        return json.loads(json.dumps(stored))  # type: ignore[no-any-return]
