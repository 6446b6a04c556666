"""Quota: how many more times a session's subject may use a capability, counted in its store.

Above: the visitor door (which hides a capability at zero remaining and refuses its calls)
and the host ops (`store.insert` into the quota collection goes through `insert_check`).
Below: `config` (the limit is a config value) and `plugin_store` (usage is a row count).

A manifest's `quota: {config_key, collection, subject_field}` reads: the limit is the
subject's `config_key` value — from the access code's `code_config` for a code session, from
the API key's `key_config` for an API-key session; usage is the number of rows of the plugin's
own `collection` whose `subject_field` is the subject's id, for this owner. A limit that is
unset, null or ≤ 0 means unlimited; a public session (no subject) is never counted; an
incomplete declaration gates nothing (the manifest loader warned about it).

The count is advisory for lists and a first refusal for calls; the exact cap is enforced when
the row is written: `PluginStore.insert` counts and inserts under one per-subject advisory
lock, so with a cap of N exactly N rows exist however many calls race, on any number of
replicas (docs/security.md E13).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mcp_host.access import Subject
from mcp_host.errors import QuotaExhausted
from mcp_host.plugins import Plugin, Quota
from mcp_host.store import ConfigScope, ConfigStore, PluginStores, QuotaCheck, declared

__all__ = ["QuotaGate", "QuotaState", "exhausted"]

_MAX_CACHED_LIMITS = 10_000
_SCOPE_OF_SUBJECT: dict[str, ConfigScope] = {"code": "code", "api_key": "key"}
_WHOSE = {"code": "this access code's", "api_key": "this API key's"}


@dataclass(frozen=True)
class QuotaState:
    """The subject's limit and usage, from one count."""

    limit: int
    used: int

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)


class QuotaGate:
    """Reads limits and usage. `limit_ttl_s`: how long a limit read for the list and call gate
    is reused (0: never); the insert check always reads it afresh, so a cached limit can let a
    call through to the child but never lets a row past the cap."""

    def __init__(self, stores: PluginStores, config: ConfigStore, *, limit_ttl_s: float = 0.0) -> None:
        self._stores = stores
        self._config = config
        self._limit_ttl_s = limit_ttl_s
        self._limits: dict[tuple[str, str, str, str], tuple[float, int | None]] = {}

    async def state(self, plugin: Plugin, owner_id: str, subject: Subject | None) -> QuotaState | None:
        """The subject's quota of `plugin`, or None when nothing limits it.

        Database errors pass through: the caller fails closed (hides, refuses) and logs.
        """
        gate = plugin.manifest.quota_gate()
        if gate is None or subject is None:
            return None
        limit = await self._cached_limit(plugin, gate, owner_id, subject)
        if limit is None:
            return None
        store = self._stores.bound(plugin.manifest.kind, plugin.manifest.id)
        used = await store.count(owner_id, _collection(gate), {_field(gate): subject.id})
        return QuotaState(limit, used)

    async def insert_check(
        self, plugin: Plugin, owner_id: str, subject: Subject | None, collection: str
    ) -> QuotaCheck | None:
        """How `store.insert` into `collection` must be guarded; None when it is not the quota's."""
        gate = plugin.manifest.quota_gate()
        if gate is None or collection != gate.collection:
            return None
        limit = None if subject is None else await self._limit(plugin, gate, owner_id, subject)
        return QuotaCheck(_field(gate), subject.id if subject else None, limit)

    async def _cached_limit(self, plugin: Plugin, gate: Quota, owner_id: str, subject: Subject) -> int | None:
        key = (plugin.manifest.id, owner_id, subject.kind, subject.id)
        now = time.monotonic()
        cached = self._limits.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        limit = await self._limit(plugin, gate, owner_id, subject)
        if self._limit_ttl_s > 0:
            if len(self._limits) >= _MAX_CACHED_LIMITS:
                self._limits.clear()
            self._limits[key] = (now + self._limit_ttl_s, limit)
        return limit

    async def _limit(self, plugin: Plugin, gate: Quota, owner_id: str, subject: Subject) -> int | None:
        scope = _SCOPE_OF_SUBJECT[subject.kind]
        manifest = plugin.manifest
        if all(field.key != gate.config_key for field in declared(manifest, scope)):
            return None  # this kind of credential carries no limit for it
        values = await self._config.for_plugin(manifest.id, manifest).get(owner_id, scope, subject.id)
        limit = values.get(str(gate.config_key))
        if type(limit) is not int or limit <= 0:
            return None
        return limit


def exhausted(plugin_id: str, subject: Subject | None, state: QuotaState | None = None) -> QuotaExhausted:
    """The refusal a visitor gets, saying whose quota it is: the access code's or the API key's
    (the subject's limit is its `code_config` or `key_config` value), and of which capability."""
    whose = _WHOSE.get(subject.kind, "this session's") if subject is not None else "this session's"
    figures = f" ({state.used} of {state.limit})" if state is not None else ""
    return QuotaExhausted(f"{whose} quota for {plugin_id} is used up{figures}; the owner can raise it")


def _collection(gate: Quota) -> str:
    assert gate.collection is not None  # quota_gate() returns complete declarations only
    return gate.collection


def _field(gate: Quota) -> str:
    assert gate.subject_field is not None
    return gate.subject_field
