"""Each plugin's own document store: one PostgreSQL schema per plugin, holding `records` (JSON
documents in named collections) and `claims` (single-winner keys with a time to live).

Above: the host ops (`store.insert` … `store.release`, `store.search`), which take `owner_id`
from the grant, never from the plugin; `quota`, which counts rows; and installing or
uninstalling a plugin (`PluginStores.ensure` / `PluginStores.drop`). Below: the pool of
`database` (jsonb decoded to Python values), `checks` and `search` (the SQL).
`memory_store.InMemoryPluginStore` is the twin for unit tests of logic; both satisfy
`DocumentStore`; `checks` holds the argument checks both apply (the plugin contract's, which
the kit's standalone store applies too).

Isolation (docs/security.md D9, F3): the schema name comes only from the trusted (kind, plugin id)
pair through `store_schema`, is checked by `check_schema_name` and quoted before it is spliced
into SQL; everything a plugin supplies travels as a bind parameter. Every statement carries
`owner_id = $1 AND collection = $2` (or inserts them), so one owner never reaches another's
rows. All arguments are checked before the database sees them (`InvalidArguments`, nothing
written): collections match `[a-z][a-z0-9_]{0,63}`; documents and filters pass
the contract's `check_json_object` (depth, size, NaN, U+0000, lone surrogates, integers within
±10**30); record ids are UUIDs in their 36-character form; claim keys are 1..`max_key_chars`
characters without control characters; search arguments as `search` says. Database
failures become `Unavailable` with a fixed message; the cause is logged, never returned.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from mcp_host.errors import InvalidArguments, Unavailable, as_unavailable
from mcp_host.plugins import PluginKind
from mcp_host_kit.contract import Record, SearchHit  # what a query and a search return, as plugins read them

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
from .search import ALL_TEXT, search_sql

if TYPE_CHECKING:
    from .database import PgPool

__all__ = [
    "DocumentStore",
    "PluginStore",
    "PluginStores",
    "QuotaCheck",
    "Record",
    "SearchHit",
    "StoreLimits",
    "check_schema_name",
    "store_schema",
]


_logger = logging.getLogger("mcp_host.store.plugin_store")
_tracer = trace.get_tracer("mcp_host.store")

# The manifest's plugin id grammar (manifest.PLUGIN_ID_RE).
_PLUGIN_ID = re.compile(r"\A(?=.{1,64}\Z)[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*\Z")
_SCHEMA_PREFIX: dict[str, str] = {"capability": "plugin_cap_", "connector": "plugin_con_"}
_SCHEMA_NAME = re.compile(r"\Aplugin_[a-z0-9_]+\Z")
_CORE_SCHEMAS = frozenset({"mcp_host", "public", "information_schema"})
_MAX_IDENTIFIER_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1; longer names are cut silently
_HASH_HEX = 10
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"


def store_schema(kind: PluginKind, plugin_id: str) -> str:
    """The schema of plugin (`kind`, `plugin_id`): `plugin_cap_<slug>_<hash>` or `plugin_con_…`.

    The slug is the id with dots as underscores, cut so the name fits 63 bytes; the hash (10
    hex digits of sha256 of `kind:id`) keeps `a.b` and `a_b`, and long ids sharing a prefix,
    apart. Raises `ValueError` for an unknown kind or an id outside the manifest grammar.
    """
    prefix = _SCHEMA_PREFIX.get(kind)
    if prefix is None:
        raise ValueError(f"unknown plugin kind {kind!r:.40}")
    if not isinstance(plugin_id, str) or _PLUGIN_ID.fullmatch(plugin_id) is None:
        raise ValueError(f"not a plugin id: {plugin_id!r:.80}")
    digest = hashlib.sha256(f"{kind}:{plugin_id}".encode()).hexdigest()[:_HASH_HEX]
    slug = plugin_id.replace(".", "_")[: _MAX_IDENTIFIER_BYTES - len(prefix) - 1 - _HASH_HEX]
    return check_schema_name(f"{prefix}{slug}_{digest}")


def check_schema_name(name: str) -> str:
    """Return `name` if it may be spliced into DDL as a plugin store's schema, else `ValueError`.

    Allowed: `plugin_` followed by `[a-z0-9_]`, at most 63 bytes, never a core schema.
    """
    if (
        not isinstance(name, str)
        or _SCHEMA_NAME.fullmatch(name) is None
        or len(name.encode()) > _MAX_IDENTIFIER_BYTES
        or name in _CORE_SCHEMAS
        or name.startswith("pg_")
    ):
        raise ValueError(f"not a plugin store schema name: {name!r:.80}")
    return name


def _quoted(schema: str) -> str:
    return '"' + check_schema_name(schema).replace('"', '""') + '"'


class DocumentStore(Protocol):
    """One plugin's store; every method is scoped to `owner_id`, which the caller takes from a
    grant, never from a plugin. Bad arguments raise `InvalidArguments` before anything is
    read or written; a failing database raises `Unavailable`."""

    async def insert(
        self, owner_id: str, collection: str, doc: dict[str, Any], *, quota: QuotaCheck | None = None
    ) -> str:
        """Store `doc`; return its id. With `quota`, the host stamps `doc[subject_field] =
        subject_id` (JSON null for a public session) and, for a subject with a positive
        limit, raises `QuotaExhausted` once that many rows carry the subject's id."""
        ...

    async def query(
        self, owner_id: str, collection: str, filter: dict[str, Any] | None = None, limit: int | None = None
    ) -> list[Record]:
        """Records whose doc contains `filter` (jsonb `@>`), oldest first, at most `limit`."""
        ...

    async def count(self, owner_id: str, collection: str, filter: dict[str, Any] | None = None) -> int:
        """How many records' docs contain `filter`."""
        ...

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
        """Records whose doc contains `filter` and whose text matches `query` (websearch
        syntax; see `store.search`), best rank first (ties: oldest first), at most `limit`
        (1..100, default 20). A query without a word in it finds nothing."""
        ...

    async def update(
        self, owner_id: str, collection: str, id: str, doc: dict[str, Any], *, keep_field: str | None = None
    ) -> bool:
        """Replace the doc of record `id`; False when this owner's collection has no such record.

        With `keep_field` (a quota's subject field) the stored value of that field survives
        the update, and the field stays absent if it was, so an update cannot move a row
        out of a subject's count."""
        ...

    async def delete(
        self, owner_id: str, collection: str, *, id: str | None = None, filter: dict[str, Any] | None = None
    ) -> int:
        """Delete the record `id` and/or the records containing `filter` (both must match when
        both are given; at least one is required); return how many were deleted."""
        ...

    async def claim(self, owner_id: str, collection: str, key: str, ttl_s: int) -> bool:
        """Take `key` for `ttl_s` seconds (1..max_claim_ttl_s); True for the one winner. A
        claim whose time is up may be taken by anyone."""
        ...

    async def release(self, owner_id: str, collection: str, key: str) -> bool:
        """Give `key` back; True if a live claim was released."""
        ...


# -- PostgreSQL -------------------------------------------------------------------------------


def _translated(schema: str, op: str) -> AbstractContextManager[None]:
    """asyncpg's failures as `Unavailable`: the log says what happened, the caller does not.

    Inside a recorded trace (a host op's span), the statements are a span `store.<op>` of it.
    Otherwise no span is started: even OpenTelemetry's non-recording one costs ~20 µs an op.
    """
    return _traced(schema, op) if trace.get_current_span().is_recording() else _mapped(schema)


@contextmanager
def _traced(schema: str, op: str) -> Iterator[None]:
    attributes = {"db.system.name": "postgresql", "db.namespace": schema, "db.operation.name": op}
    with _tracer.start_as_current_span(f"store.{op}", kind=SpanKind.CLIENT, attributes=attributes), _mapped(schema):
        yield


@contextmanager
def _mapped(schema: str) -> Iterator[None]:
    try:
        yield
    except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
        _logger.error("plugin store %s has no tables: never ensured, or dropped meanwhile", schema)
        raise Unavailable("this plugin's store is not set up") from None
    except (asyncpg.LockNotAvailableError, asyncpg.QueryCanceledError, asyncpg.DeadlockDetectedError):
        _logger.warning("plugin store %s: the database did not answer in time", schema, exc_info=True)
        raise Unavailable("the store is busy; try again") from None
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
        if (outage := as_unavailable(exc)) is not None:
            raise outage from exc  # an outage: the database watch logs it, once
        _logger.exception("plugin store %s failed", schema)
        raise Unavailable("the store is unavailable") from None


def _ddl(q: str) -> str:
    return f"""
    CREATE SCHEMA IF NOT EXISTS {q};
    CREATE TABLE IF NOT EXISTS {q}.records (
        id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        owner_id    text NOT NULL,
        collection  text NOT NULL CHECK (collection ~ '^[a-z][a-z0-9_]{{0,63}}$'),
        doc         jsonb NOT NULL CHECK (jsonb_typeof(doc) = 'object'),
        created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX IF NOT EXISTS records_scope ON {q}.records (owner_id, collection, created_at, id);
    CREATE INDEX IF NOT EXISTS records_doc ON {q}.records USING gin (doc jsonb_path_ops);
    -- The text `store.search` matches and ranks (`store.search`), kept so no search parses
    -- documents; added to tables made before it (a one-time rewrite of the table).
    ALTER TABLE {q}.records ADD COLUMN IF NOT EXISTS text_vector tsvector
        GENERATED ALWAYS AS ({ALL_TEXT}) STORED;
    CREATE INDEX IF NOT EXISTS records_text ON {q}.records USING gin (text_vector);
    CREATE TABLE IF NOT EXISTS {q}.claims (
        owner_id    text NOT NULL,
        collection  text NOT NULL,
        key         text NOT NULL,
        expires_at  timestamptz NOT NULL,
        PRIMARY KEY (owner_id, collection, key)
    );
    """


_SCOPE = "WHERE owner_id = $1 AND collection = $2"
_SQL = {
    "insert": "INSERT INTO {records} (owner_id, collection, doc) VALUES ($1, $2, $3) RETURNING id",
    "query": f"SELECT id, doc, created_at FROM {{records}} {_SCOPE} AND doc @> $3 ORDER BY created_at, id LIMIT $4",
    "count": f"SELECT count(*) FROM {{records}} {_SCOPE} AND doc @> $3",
    # $5, when given, names a field whose stored value (or absence) survives the update.
    "update": f"""UPDATE {{records}} SET doc = CASE WHEN $5::text IS NULL THEN $4::jsonb
        WHEN doc ? $5::text THEN $4::jsonb || jsonb_build_object($5::text, doc -> $5::text)
        ELSE $4::jsonb - $5::text END {_SCOPE} AND id = $3""",
    "delete": f"DELETE FROM {{records}} {_SCOPE} AND doc @> $3",
    "delete_id": f"DELETE FROM {{records}} {_SCOPE} AND doc @> $3 AND id = $4",
    # The primary key lets one INSERT win; a loser's DO UPDATE applies only to a claim whose
    # time is up, re-checked on the row's newest version, so a takeover has one winner too.
    "claim": """INSERT INTO {claims} AS c (owner_id, collection, key, expires_at)
        VALUES ($1, $2, $3, now() + make_interval(secs => $4::int))
        ON CONFLICT (owner_id, collection, key)
        DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE c.expires_at <= now() RETURNING true""",
    "release": f"DELETE FROM {{claims}} {_SCOPE} AND key = $3 RETURNING expires_at > now()",
}


class PluginStore:
    """One plugin's store in its PostgreSQL schema (see `DocumentStore` for the contract)."""

    def __init__(self, pool: PgPool, schema: str, limits: StoreLimits | None = None) -> None:
        self.schema = check_schema_name(schema)
        self._pool = pool
        self._limits = limits or StoreLimits()
        tables = {"records": f"{_quoted(schema)}.records", "claims": f"{_quoted(schema)}.claims"}
        self._sql = {name: template.format(**tables) for name, template in _SQL.items()}
        self._search_sql = [search_sql(tables["records"], count) for count in range(9)]

    async def insert(
        self, owner_id: str, collection: str, doc: dict[str, Any], *, quota: QuotaCheck | None = None
    ) -> str:
        check_scope(owner_id, collection)
        stored, counted = check_doc(self._limits, stamped(doc, quota), "doc"), quota_cap(quota)
        with _translated(self.schema, "insert"):
            if counted is None:
                return str(await self._pool.fetchval(self._sql["insert"], owner_id, collection, stored))
            subject, limit = counted
            # Count and insert under one lock per subject, so racing inserts (on any replica)
            # are serialised and exactly `limit` rows can exist.
            key = json.dumps([self.schema, owner_id, collection, subject], sort_keys=True)
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(_LOCK, key)
                if await conn.fetchval(self._sql["count"], owner_id, collection, subject) >= limit:
                    raise exhausted(limit)
                return str(await conn.fetchval(self._sql["insert"], owner_id, collection, stored))

    async def query(
        self, owner_id: str, collection: str, filter: dict[str, Any] | None = None, limit: int | None = None
    ) -> list[Record]:
        check_scope(owner_id, collection)
        pattern, count = check_filter(self._limits, filter), check_limit(self._limits, limit)
        with _translated(self.schema, "query"):
            rows = await self._pool.fetch(self._sql["query"], owner_id, collection, pattern, count)
        return [Record(id=str(row["id"]), doc=row["doc"], created_at=row["created_at"]) for row in rows]

    async def count(self, owner_id: str, collection: str, filter: dict[str, Any] | None = None) -> int:
        check_scope(owner_id, collection)
        pattern = check_filter(self._limits, filter)
        with _translated(self.schema, "count"):
            return int(await self._pool.fetchval(self._sql["count"], owner_id, collection, pattern))

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
        check_scope(owner_id, collection)
        text, keys = check_search_query(self._limits.search, query), check_fields(fields)
        pattern, count = check_filter(self._limits, filter), check_search_limit(self._limits.search, limit)
        with _translated(self.schema, "search"):
            rows = await self._pool.fetch(
                self._search_sql[len(keys)], owner_id, collection, text, pattern, count, *keys
            )
        return [
            SearchHit(id=str(r["id"]), doc=r["doc"], created_at=r["created_at"], rank=r["rank"], snippet=r["snippet"])
            for r in rows
        ]

    async def update(
        self, owner_id: str, collection: str, id: str, doc: dict[str, Any], *, keep_field: str | None = None
    ) -> bool:
        check_scope(owner_id, collection)
        args = (owner_id, collection, check_record_id(id), check_doc(self._limits, doc, "doc"), keep_field)
        with _translated(self.schema, "update"):
            status = await self._pool.execute(self._sql["update"], *args)
        return status == "UPDATE 1"

    async def delete(
        self, owner_id: str, collection: str, *, id: str | None = None, filter: dict[str, Any] | None = None
    ) -> int:
        check_scope(owner_id, collection)
        if id is None and filter is None:
            raise InvalidArguments("delete needs an id, a filter, or both")
        args: tuple[object, ...] = (owner_id, collection, check_filter(self._limits, filter))
        if id is not None:
            args += (check_record_id(id),)
        with _translated(self.schema, "delete"):
            status = await self._pool.execute(self._sql["delete" if id is None else "delete_id"], *args)
        return int(status.split()[-1])

    async def claim(self, owner_id: str, collection: str, key: str, ttl_s: int) -> bool:
        check_scope(owner_id, collection)
        check_key(self._limits, key)
        check_ttl(self._limits, ttl_s)
        with _translated(self.schema, "claim"):
            return await self._pool.fetchval(self._sql["claim"], owner_id, collection, key, ttl_s) is True

    async def release(self, owner_id: str, collection: str, key: str) -> bool:
        check_scope(owner_id, collection)
        check_key(self._limits, key)
        with _translated(self.schema, "release"):
            return await self._pool.fetchval(self._sql["release"], owner_id, collection, key) is True


class PluginStores:
    """Every plugin's store on one pool: binding, creating and dropping schemas."""

    def __init__(self, pool: PgPool, limits: StoreLimits | None = None) -> None:
        self._pool = pool
        self._limits = limits or StoreLimits()

    def bound(self, kind: PluginKind, plugin_id: str) -> PluginStore:
        """The store of (`kind`, `plugin_id`), without touching the database."""
        return PluginStore(self._pool, store_schema(kind, plugin_id), self._limits)

    async def ensure(self, kind: PluginKind, plugin_id: str) -> PluginStore:
        """Create the plugin's schema and tables if missing; return its store.

        Safe when several replicas run it at once: the DDL runs under a transaction-scoped
        advisory lock on the schema's name (`CREATE SCHEMA IF NOT EXISTS` alone can still fail
        with a unique violation when two sessions race).
        """
        store = self.bound(kind, plugin_id)
        with _translated(store.schema, "ensure"):
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(_LOCK, f"mcp_host.store.plugin_store:{store.schema}")
                await conn.execute(_ddl(_quoted(store.schema)))
        return store

    async def drop(self, kind: PluginKind, plugin_id: str) -> bool:
        """Uninstall: drop the plugin's schema with every row in it; True if it existed.

        This is the only place in the code base that drops a schema; the name is the checked
        one from `store_schema`, never a plugin-supplied string.
        """
        schema = store_schema(kind, plugin_id)
        with _translated(schema, "drop"):
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(_LOCK, f"mcp_host.store.plugin_store:{schema}")
                existed = await conn.fetchval("SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema)
                await conn.execute(f"DROP SCHEMA IF EXISTS {_quoted(schema)} CASCADE")
        if existed:
            _logger.warning("dropped plugin store %s (%s %s) with all its rows", schema, kind, plugin_id)
        return bool(existed)
