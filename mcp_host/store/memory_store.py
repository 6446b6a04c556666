"""The in-memory twin of a plugin's store, for unit tests of logic only.

Above: tests (and nothing in the running host). Below: `checks` (the same checks as
`plugin_store.PluginStore`, in the same order) and the plugin contract's containment
(`json_contains`) and in-memory search (`search_match`, an honest ranking). Both satisfy
`plugin_store.DocumentStore`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio.lowlevel

from mcp_host.errors import InvalidArguments
from mcp_host_kit.contract import json_contains, search_match

from .checks import (
    QuotaCheck,
    StoreLimits,
    check_doc,
    check_fields,
    check_filter,
    check_key,
    check_limit,
    check_record_id,
    check_scope,
    check_search_limit,
    check_search_query,
    check_ttl,
    exhausted,
    quota_cap,
    stamped,
)
from .plugin_store import Record, SearchHit

__all__ = ["InMemoryPluginStore"]


@dataclass
class _Row:
    id: str
    owner_id: str
    collection: str
    doc: dict[str, Any]
    created_at: datetime


class InMemoryPluginStore:
    """A store in lists and dicts, for unit tests of logic; same checks and contract as
    `PluginStore`. Docs are kept as JSON round-trips (nothing shared with the caller); jsonb's
    number normalisation is not mimicked. `clock` lets a test move claims past their expiry."""

    def __init__(self, limits: StoreLimits | None = None, *, clock: Callable[[], datetime] | None = None) -> None:
        self._limits = limits or StoreLimits()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._rows: list[_Row] = []
        self._claims: dict[tuple[str, str, str], datetime] = {}

    def _matching(self, owner_id: str, collection: str, pattern: dict[str, Any]) -> list[_Row]:
        """This owner's rows of `collection` containing `pattern`, oldest first (ties: insertion order)."""
        scope = (r for r in self._rows if r.owner_id == owner_id and r.collection == collection)
        return sorted((r for r in scope if json_contains(r.doc, pattern)), key=lambda r: r.created_at)

    async def insert(
        self, owner_id: str, collection: str, doc: dict[str, Any], *, quota: QuotaCheck | None = None
    ) -> str:
        await anyio.lowlevel.checkpoint()
        check_scope(owner_id, collection)
        stored = check_doc(self._limits, stamped(doc, quota), "doc")
        counted = quota_cap(quota)
        if counted is not None:
            subject, limit = counted
            if len(self._matching(owner_id, collection, subject)) >= limit:
                raise exhausted(limit)
        row = _Row(str(uuid.uuid4()), owner_id, collection, json.loads(json.dumps(stored)), self._clock())
        self._rows.append(row)
        return row.id

    async def query(
        self, owner_id: str, collection: str, filter: dict[str, Any] | None = None, limit: int | None = None
    ) -> list[Record]:
        await anyio.lowlevel.checkpoint()
        check_scope(owner_id, collection)
        pattern, count = check_filter(self._limits, filter), check_limit(self._limits, limit)
        found = self._matching(owner_id, collection, pattern)[:count]
        return [Record(id=r.id, doc=json.loads(json.dumps(r.doc)), created_at=r.created_at) for r in found]

    async def count(self, owner_id: str, collection: str, filter: dict[str, Any] | None = None) -> int:
        await anyio.lowlevel.checkpoint()
        check_scope(owner_id, collection)
        pattern = check_filter(self._limits, filter)
        return len(self._matching(owner_id, collection, pattern))

    async def search(
        self,
        owner_id: str,
        collection: str,
        query: str,
        *,
        fields: list[str] | None = None,
        filter: dict[str, Any] | None = None,
        limit: int | None = None,
    ) -> list[SearchHit]:
        await anyio.lowlevel.checkpoint()
        check_scope(owner_id, collection)
        text, keys = check_search_query(self._limits.search, query), check_fields(fields)
        pattern, count = check_filter(self._limits, filter), check_search_limit(self._limits.search, limit)
        found = []
        for row in self._matching(owner_id, collection, pattern):
            match = search_match(row.doc, text, keys)
            if match is not None:
                found.append((-match[0], row.created_at, match[1], row))
        found.sort(key=lambda hit: (hit[0], hit[1]))  # stable: insertion order breaks the last ties
        return [
            SearchHit(id=r.id, doc=json.loads(json.dumps(r.doc)), created_at=r.created_at, rank=-rank, snippet=snippet)
            for rank, _, snippet, r in found[:count]
        ]

    async def update(
        self, owner_id: str, collection: str, id: str, doc: dict[str, Any], *, keep_field: str | None = None
    ) -> bool:
        await anyio.lowlevel.checkpoint()
        check_scope(owner_id, collection)
        record_id, stored = check_record_id(id), json.loads(json.dumps(check_doc(self._limits, doc, "doc")))
        for row in self._matching(owner_id, collection, {}):
            if row.id == record_id:
                if keep_field is not None:
                    stored.pop(keep_field, None)
                    if keep_field in row.doc:
                        stored[keep_field] = row.doc[keep_field]
                row.doc = stored
                return True
        return False

    async def delete(
        self, owner_id: str, collection: str, *, id: str | None = None, filter: dict[str, Any] | None = None
    ) -> int:
        await anyio.lowlevel.checkpoint()
        check_scope(owner_id, collection)
        if id is None and filter is None:
            raise InvalidArguments("delete needs an id, a filter, or both")
        pattern = check_filter(self._limits, filter)
        record_id = None if id is None else check_record_id(id)
        doomed = {r.id for r in self._matching(owner_id, collection, pattern) if record_id in (None, r.id)}
        self._rows = [r for r in self._rows if r.id not in doomed]
        return len(doomed)

    async def claim(self, owner_id: str, collection: str, key: str, ttl_s: int) -> bool:
        await anyio.lowlevel.checkpoint()
        check_scope(owner_id, collection)
        check_key(self._limits, key)
        check_ttl(self._limits, ttl_s)
        now, expires = self._clock(), self._claims.get((owner_id, collection, key))
        if expires is not None and expires > now:
            return False
        self._claims[(owner_id, collection, key)] = now + timedelta(seconds=ttl_s)
        return True

    async def release(self, owner_id: str, collection: str, key: str) -> bool:
        await anyio.lowlevel.checkpoint()
        check_scope(owner_id, collection)
        check_key(self._limits, key)
        expires = self._claims.pop((owner_id, collection, key), None)
        return expires is not None and expires > self._clock()
