"""Standalone `store.*`: one plugin's document store in memory, checked as the host checks.

Above: `local` (the standalone host ops), which validates each op's arguments with the
contract's models and turns `ArgumentError` into `InvalidArguments`. Below: the plugin
contract (`contract`): the same argument checks, in the same order, as the host's PostgreSQL
store and its in-memory twin, jsonb's containment, and the in-memory search matcher.
`tests/store/test_plugin_store.py` runs this store through the host stores' contract tests.

Per owner, as under the host: rows come back oldest first (insertion order breaks ties), a
filter matches like jsonb's `doc @> filter`, claims expire, and a quota collection gets the
subject stamped and is capped per subject. Docs are kept as JSON round-trips (nothing shared
with the caller); jsonb's number normalisation is not mimicked. Nothing outlives the process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .contract import (
    ArgumentError,
    QuotaCheck,
    Record,
    SearchHit,
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
    json_contains,
    quota_cap,
    quota_message,
    search_match,
    stamped,
)
from .errors import QuotaExhausted

__all__ = ["LocalStore"]


@dataclass
class _Row:
    id: str
    owner_id: str
    collection: str
    doc: dict[str, Any]
    created_at: datetime


def _copy(doc: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = json.loads(json.dumps(doc))
    return copied


class LocalStore:
    """A plugin's store in lists and dicts.

    Raises `ArgumentError` for arguments the host refuses (with the host's words), ValueError
    for an owner id no grant could carry, and `QuotaExhausted` past a quota's limit. `clock`
    stamps rows and times claims (a test moves it past a claim's expiry).
    """

    def __init__(self, limits: StoreLimits | None = None, *, clock: Callable[[], datetime] | None = None) -> None:
        self._limits = limits or StoreLimits()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._rows: list[_Row] = []
        self._claims: dict[tuple[str, str, str], datetime] = {}

    def _matching(self, owner_id: str, collection: str, pattern: dict[str, Any]) -> list[_Row]:
        """This owner's rows of `collection` containing `pattern`, oldest first (ties: insertion order)."""
        scope = (r for r in self._rows if r.owner_id == owner_id and r.collection == collection)
        return sorted((r for r in scope if json_contains(r.doc, pattern)), key=lambda r: r.created_at)

    def insert(self, owner_id: str, collection: str, doc: dict[str, Any], *, quota: QuotaCheck | None = None) -> str:
        check_scope(owner_id, collection)
        stored = check_doc(self._limits, stamped(doc, quota), "doc")
        counted = quota_cap(quota)
        if counted is not None:
            subject, limit = counted
            if len(self._matching(owner_id, collection, subject)) >= limit:
                raise QuotaExhausted(quota_message(limit))
        row = _Row(str(uuid.uuid4()), owner_id, collection, _copy(stored), self._clock())
        self._rows.append(row)
        return row.id

    def query(
        self, owner_id: str, collection: str, filter: dict[str, Any] | None = None, limit: int | None = None
    ) -> list[Record]:
        check_scope(owner_id, collection)
        pattern, count = check_filter(self._limits, filter), check_limit(self._limits, limit)
        found = self._matching(owner_id, collection, pattern)[:count]
        return [Record(id=r.id, doc=_copy(r.doc), created_at=r.created_at) for r in found]

    def count(self, owner_id: str, collection: str, filter: dict[str, Any] | None = None) -> int:
        check_scope(owner_id, collection)
        pattern = check_filter(self._limits, filter)
        return len(self._matching(owner_id, collection, pattern))

    def search(
        self,
        owner_id: str,
        collection: str,
        query: str,
        *,
        fields: list[str] | None = None,
        filter: dict[str, Any] | None = None,
        limit: int | None = None,
    ) -> list[SearchHit]:
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
            SearchHit(id=r.id, doc=_copy(r.doc), created_at=r.created_at, rank=-rank, snippet=snippet)
            for rank, _, snippet, r in found[:count]
        ]

    def update(
        self, owner_id: str, collection: str, id: str, doc: dict[str, Any], *, keep_field: str | None = None
    ) -> bool:
        """Replace the doc of record `id`; `keep_field` (a quota's subject field) keeps its stored value."""
        check_scope(owner_id, collection)
        record_id, stored = check_record_id(id), _copy(check_doc(self._limits, doc, "doc"))
        for row in self._matching(owner_id, collection, {}):
            if row.id == record_id:
                if keep_field is not None:
                    stored.pop(keep_field, None)
                    if keep_field in row.doc:
                        stored[keep_field] = row.doc[keep_field]
                row.doc = stored
                return True
        return False

    def delete(
        self, owner_id: str, collection: str, *, id: str | None = None, filter: dict[str, Any] | None = None
    ) -> int:
        check_scope(owner_id, collection)
        if id is None and filter is None:
            raise ArgumentError("delete needs an id, a filter, or both")
        pattern = check_filter(self._limits, filter)
        record_id = None if id is None else check_record_id(id)
        doomed = {r.id for r in self._matching(owner_id, collection, pattern) if record_id in (None, r.id)}
        self._rows = [r for r in self._rows if r.id not in doomed]
        return len(doomed)

    def claim(self, owner_id: str, collection: str, key: str, ttl_s: int) -> bool:
        check_scope(owner_id, collection)
        check_key(self._limits, key)
        check_ttl(self._limits, ttl_s)
        now, expires = self._clock(), self._claims.get((owner_id, collection, key))
        if expires is not None and expires > now:
            return False
        self._claims[(owner_id, collection, key)] = now + timedelta(seconds=ttl_s)
        return True

    def release(self, owner_id: str, collection: str, key: str) -> bool:
        check_scope(owner_id, collection)
        check_key(self._limits, key)
        expires = self._claims.pop((owner_id, collection, key), None)
        return expires is not None and expires > self._clock()
