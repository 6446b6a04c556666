"""The in-memory twin of a plugin's store, for unit tests of logic only: the plugin kit's
standalone store (`mcp_host_kit.local_store.LocalStore`), seen as the host's `DocumentStore`.

One in-memory emulation for the host's tests and for plugins run without a host, so the two
cannot drift: `tests/store/test_plugin_store.py` runs it and the PostgreSQL store through the
same contract tests. Above: tests (and nothing in the running host). Below: the kit's store,
which applies the plugin contract's checks in the host's order and words; its refusals are
raised here as the host's exceptions; its records are the contract's, as the host's are.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import anyio.lowlevel

import mcp_host_kit
from mcp_host.errors import InvalidArguments, QuotaExhausted
from mcp_host_kit.contract import ArgumentError, QuotaCheck, Record, SearchHit, StoreLimits
from mcp_host_kit.local_store import LocalStore

__all__ = ["InMemoryPluginStore"]

_T = TypeVar("_T")


class InMemoryPluginStore:
    """A store in lists and dicts, for unit tests of logic; same checks and contract as
    `PluginStore`. Docs are kept as JSON round-trips (nothing shared with the caller); jsonb's
    number normalisation is not mimicked. `clock` lets a test move claims past their expiry."""

    def __init__(self, limits: StoreLimits | None = None, *, clock: Callable[[], datetime] | None = None) -> None:
        self._local = LocalStore(limits, clock=clock)

    async def _run(self, call: Callable[[], _T]) -> _T:
        await anyio.lowlevel.checkpoint()  # a store call is a checkpoint, as a database round trip is
        try:
            return call()
        except ArgumentError as exc:
            raise InvalidArguments(exc.message) from None
        except mcp_host_kit.QuotaExhausted as exc:
            raise QuotaExhausted(exc.message) from None

    async def insert(
        self, owner_id: str, collection: str, doc: dict[str, Any], *, quota: QuotaCheck | None = None
    ) -> str:
        return await self._run(lambda: self._local.insert(owner_id, collection, doc, quota=quota))

    async def query(
        self, owner_id: str, collection: str, filter: dict[str, Any] | None = None, limit: int | None = None
    ) -> list[Record]:
        return await self._run(lambda: self._local.query(owner_id, collection, filter, limit))

    async def count(self, owner_id: str, collection: str, filter: dict[str, Any] | None = None) -> int:
        return await self._run(lambda: self._local.count(owner_id, collection, filter))

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
        return await self._run(
            lambda: self._local.search(owner_id, collection, query, fields=fields, filter=filter, limit=limit)
        )

    async def update(
        self, owner_id: str, collection: str, id: str, doc: dict[str, Any], *, keep_field: str | None = None
    ) -> bool:
        return await self._run(lambda: self._local.update(owner_id, collection, id, doc, keep_field=keep_field))

    async def delete(
        self, owner_id: str, collection: str, *, id: str | None = None, filter: dict[str, Any] | None = None
    ) -> int:
        return await self._run(lambda: self._local.delete(owner_id, collection, id=id, filter=filter))

    async def claim(self, owner_id: str, collection: str, key: str, ttl_s: int) -> bool:
        return await self._run(lambda: self._local.claim(owner_id, collection, key, ttl_s))

    async def release(self, owner_id: str, collection: str, key: str) -> bool:
        return await self._run(lambda: self._local.release(owner_id, collection, key))
