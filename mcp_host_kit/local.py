"""Standalone mode: the host ops served from memory in the plugin's own process.

Above: `host` (the typed ops), when `MCP_HOST_SOCKET` is not set — a plugin run by its author
with `python server.py` or under the MCP Inspector. Below: the plugin's `manifest.yaml`
(`manifest`), read once.

It behaves like the host where an author could trip over a difference: only the ops the
manifest names (`transport.sandbox.host_ops`) are served, arguments are checked the same
basic way (collection names, ttl 1..300, unknown keys refused), a filter matches like
jsonb's `doc @> filter`, rows come back in insertion order, claims expire, config reads
the manifest's defaults (null without one), and the quota collection gets the subject
stamped into `subject_field` and is capped by the subject scope's default limit;
`store.search` matches websearch syntax and ranks by weighted word counts (`local_search`).
It is not a database: everything is gone when the process ends, and nothing is shared
between processes.

`inference.generate` has its arguments checked and is then refused as `unavailable`: under
the host it asks the visitor's client that made the call (MCP sampling), and standalone
there is no such client — the answer a client without sampling gets, so a plugin's fallback
for that case is what runs. A made-up text would hide that the plugin never met a model.
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import anyio.lowlevel
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from .errors import Denied, InvalidArguments, QuotaExhausted, Unavailable
from .local_search import search_match
from .manifest import PluginManifest, QuotaSpec
from .session import SessionInfo

__all__ = ["MAX_TTL_S", "TEST_OWNER", "LocalHost", "contains"]

TEST_OWNER: Mapping[str, str] = {"name": "Test Owner", "email": "owner@example.test", "timezone": "UTC"}
# The host's store limits (mcp_host.store.plugin_store.StoreLimits defaults).
MAX_TTL_S = 300
MAX_QUERY_LIMIT = 500
DEFAULT_QUERY_LIMIT = 100
MAX_DOC_BYTES = 256 * 1024
MAX_DOC_DEPTH = 32
MAX_KEY_CHARS = 200
# The host's inference.generate limits (mcp_host.backchannel.ops.InferenceGenerate).
MAX_INFERENCE_MESSAGES = 100
MAX_INFERENCE_CHARS = 200_000
MAX_INFERENCE_TOKENS = 16_384
MAX_SYSTEM_CHARS = 50_000
_COLLECTION_RE = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
_RECORD_ID_RE = re.compile(r"\A[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\Z")
_KEY_RE = re.compile(rf"\A[^\x00-\x1f\x7f]{{1,{MAX_KEY_CHARS}}}\Z")
MAX_QUERY_CHARS = 1000
MAX_SEARCH_FIELDS = 8
MAX_SEARCH_LIMIT = 100
DEFAULT_SEARCH_LIMIT = 20
_FIELD_RE = re.compile(r"\A[^\x00-\x1f\x7f\ud800-\udfff]{1,64}\Z")
_NUL_OR_SURROGATE = re.compile("[\x00\ud800-\udfff]")
_LIMIT_SCOPE = {"code": "code_config", "api_key": "key_config"}


def _search_query(value: str) -> str:
    if not 0 < len(value) <= MAX_QUERY_CHARS:
        raise ValueError(f"must be 1-{MAX_QUERY_CHARS} characters")
    if not value.strip():
        raise ValueError("must contain a word")
    if _NUL_OR_SURROGATE.search(value):
        raise ValueError("contains U+0000 or a lone surrogate")
    return value


def _search_fields(value: list[str]) -> list[str]:
    if not 0 < len(value) <= MAX_SEARCH_FIELDS or len(set(value)) != len(value):
        raise ValueError(f"must name 1-{MAX_SEARCH_FIELDS} distinct keys")
    if not all(_FIELD_RE.match(field) for field in value):
        raise ValueError("each key must be 1-64 characters without control characters")
    return value


def _collection(value: str) -> str:
    if not _COLLECTION_RE.match(value):
        raise ValueError("must be 1-64 characters of a-z, 0-9 and _, starting with a letter")
    return value


def _record_id(value: str) -> str:
    if not _RECORD_ID_RE.match(value):
        raise ValueError("is not a record id (a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e)")
    return str(uuid.UUID(value))


def _key(value: str) -> str:
    if not _KEY_RE.match(value):
        raise ValueError(f"must be 1-{MAX_KEY_CHARS} characters without control characters")
    return value


def _document(value: dict[str, Any]) -> dict[str, Any]:
    if len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()) > MAX_DOC_BYTES:
        raise ValueError(f"is over {MAX_DOC_BYTES} bytes as JSON")
    depth, stack = 0, [(value, 1)]
    while stack:  # no recursion: a deep value must not exhaust the stack
        item, level = stack.pop()
        if isinstance(item, dict | list):
            depth = max(depth, level)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    if depth > MAX_DOC_DEPTH:
        raise ValueError(f"is nested deeper than {MAX_DOC_DEPTH} levels")
    return value


Collection = Annotated[str, AfterValidator(_collection)]
RecordId = Annotated[str, AfterValidator(_record_id)]
Key = Annotated[str, AfterValidator(_key)]
Json = Annotated[dict[str, Any], AfterValidator(_document)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class StoreInsert(_Args):
    collection: Collection
    doc: Json


class StoreQuery(_Args):
    collection: Collection
    filter: Json | None = None
    limit: int = Field(default=DEFAULT_QUERY_LIMIT, ge=1, le=MAX_QUERY_LIMIT)


class StoreCount(_Args):
    collection: Collection
    filter: Json | None = None


class StoreSearch(_Args):
    collection: Collection
    query: Annotated[str, AfterValidator(_search_query)]
    fields: Annotated[list[str], AfterValidator(_search_fields)] | None = None
    filter: Json | None = None
    limit: int = Field(default=DEFAULT_SEARCH_LIMIT, ge=1, le=MAX_SEARCH_LIMIT)


class StoreUpdate(_Args):
    collection: Collection
    id: RecordId
    doc: Json


class StoreDelete(_Args):
    collection: Collection
    id: RecordId | None = None
    filter: Json | None = None


class StoreClaim(_Args):
    collection: Collection
    key: Key
    ttl_s: int = Field(ge=1, le=MAX_TTL_S)


class StoreRelease(_Args):
    collection: Collection
    key: Key


class ConfigGet(_Args):
    pass


class ConversationRead(_Args):
    pass


class OwnerMeta(_Args):
    field: Literal["name", "email", "timezone"]


class InferenceMessage(_Args):
    role: Literal["user", "assistant"]
    content: str = Field(min_length=1, max_length=MAX_INFERENCE_CHARS)


class InferenceGenerate(_Args):
    messages: list[InferenceMessage] = Field(min_length=1, max_length=MAX_INFERENCE_MESSAGES)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_INFERENCE_TOKENS)
    system: str | None = Field(default=None, max_length=MAX_SYSTEM_CHARS)


@dataclass
class _Row:
    id: str
    doc: Json
    created_at: datetime


@dataclass
class _OwnerData:
    rows: dict[str, list[_Row]] = field(default_factory=dict)
    claims: dict[tuple[str, str], float] = field(default_factory=dict)


def contains(doc: Any, filter: Any) -> bool:
    """Whether JSON value `doc` contains `filter`, as jsonb's `doc @> filter` decides.

    Objects contain objects whose every key they hold with a contained value; arrays contain
    arrays whose every element some element of theirs contains; scalars must be equal
    (`true` is not `1`; `1` is `1.0`).
    """
    if isinstance(filter, dict):
        return isinstance(doc, dict) and all(key in doc and contains(doc[key], value) for key, value in filter.items())
    if isinstance(filter, list):
        return isinstance(doc, list) and all(any(contains(item, wanted) for item in doc) for wanted in filter)
    if isinstance(doc, dict | list):
        return False
    if isinstance(doc, bool) or isinstance(filter, bool):
        return type(doc) is type(filter) and doc == filter
    return bool(doc == filter)


class LocalHost:
    """The host ops of one plugin, in memory, per owner."""

    def __init__(self, manifest: PluginManifest, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.manifest = manifest
        self._clock = clock
        self._owners: dict[str, _OwnerData] = {}

    async def call(
        self, op: str, arguments: Mapping[str, Any], *, grant: str | None, session: SessionInfo | None
    ) -> dict[str, Any]:
        """Run `op` as the host would for `session`; the grant is not needed here.

        Raises Denied for an op the manifest does not name (or this kit does not emulate)
        and for a call without a session, InvalidArguments for arguments that do not fit,
        QuotaExhausted when the quota collection is full for the subject.
        """
        await anyio.lowlevel.checkpoint()  # an op is a cancellation point, as a real one is
        if op not in self.manifest.host_ops:
            raise Denied(f"{op} is not named in transport.sandbox.host_ops of {self.manifest.path}")
        if op not in _OPS:
            raise Denied(f"{op} is not emulated in standalone mode")
        if session is None:
            raise Denied(f"{op}: this call carries no session")
        model, handler = _OPS[op]
        try:
            args = model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise InvalidArguments(f"{op}: {_problems(exc)}") from None
        return handler(self, session, args)

    def _data(self, session: SessionInfo) -> _OwnerData:
        return self._owners.setdefault(session.owner_id, _OwnerData())

    def _matching(self, session: SessionInfo, collection: str, filter: Json | None) -> list[_Row]:
        rows = self._data(session).rows.get(collection, [])
        return [row for row in rows if filter is None or contains(row.doc, filter)]

    def _insert(self, session: SessionInfo, args: StoreInsert) -> Json:
        doc = copy.deepcopy(args.doc)
        quota = self.manifest.quota
        if quota is not None and args.collection == quota.collection:
            self._stamp_within_quota(session, quota, doc)
        row = _Row(str(uuid.uuid4()), doc, datetime.now(UTC))
        self._data(session).rows.setdefault(args.collection, []).append(row)
        return {"id": row.id}

    def _stamp_within_quota(self, session: SessionInfo, quota: QuotaSpec, doc: Json) -> None:
        """Stamp the subject into a quota collection's doc, as the host does; raise
        QuotaExhausted when the subject's limit (its scope's default) is reached."""
        subject = session.subject
        doc[quota.subject_field] = subject.id if subject is not None else None
        if subject is None:
            return  # a public session is never counted
        limit = self.manifest.defaults[_LIMIT_SCOPE[subject.kind]].get(quota.config_key)
        if type(limit) is not int or limit <= 0:
            return
        if len(self._matching(session, quota.collection, {quota.subject_field: subject.id})) >= limit:
            raise QuotaExhausted(f"the quota of {limit} is used up")

    def _query(self, session: SessionInfo, args: StoreQuery) -> Json:
        rows = self._matching(session, args.collection, args.filter)[: args.limit]
        return {
            "records": [
                {"id": row.id, "doc": copy.deepcopy(row.doc), "created_at": row.created_at.isoformat()} for row in rows
            ]
        }

    def _count(self, session: SessionInfo, args: StoreCount) -> Json:
        return {"count": len(self._matching(session, args.collection, args.filter))}

    def _search(self, session: SessionInfo, args: StoreSearch) -> Json:
        hits = []
        for row in self._matching(session, args.collection, args.filter):
            found = search_match(row.doc, args.query, args.fields or ())
            if found is not None:
                hits.append((found, row))
        hits.sort(key=lambda hit: -hit[0][0])  # stable: insertion order breaks ties, as oldest-first does
        return {
            "records": [
                {
                    "id": row.id,
                    "doc": copy.deepcopy(row.doc),
                    "created_at": row.created_at.isoformat(),
                    "rank": rank,
                    "snippet": snippet,
                }
                for (rank, snippet), row in hits[: args.limit]
            ]
        }

    def _update(self, session: SessionInfo, args: StoreUpdate) -> Json:
        quota = self.manifest.quota
        for row in self._data(session).rows.get(args.collection, []):
            if row.id == args.id:
                doc = copy.deepcopy(args.doc)
                if quota is not None and args.collection == quota.collection:
                    # The stamp stays: an update cannot move a row out of a subject's count.
                    # (Every row here was stamped by `_insert`.)
                    doc[quota.subject_field] = row.doc[quota.subject_field]
                row.doc = doc
                return {"updated": True}
        return {"updated": False}

    def _delete(self, session: SessionInfo, args: StoreDelete) -> Json:
        if args.id is None and args.filter is None:
            raise InvalidArguments("store.delete: give id, filter or both")
        rows = self._data(session).rows.get(args.collection, [])
        kept = [row for row in rows if not _doomed(row, args)]
        deleted = len(rows) - len(kept)
        rows[:] = kept
        return {"deleted": deleted}

    def _claim(self, session: SessionInfo, args: StoreClaim) -> Json:
        claims = self._data(session).claims
        now = self._clock()
        if claims.get((args.collection, args.key), now) > now:
            return {"claimed": False}
        claims[(args.collection, args.key)] = now + args.ttl_s
        return {"claimed": True}

    def _release(self, session: SessionInfo, args: StoreRelease) -> Json:
        expires_at = self._data(session).claims.pop((args.collection, args.key), None)
        return {"released": expires_at is not None and expires_at > self._clock()}

    def _config_get(self, session: SessionInfo, args: ConfigGet) -> Json:
        return {"values": copy.deepcopy({scope: dict(values) for scope, values in self.manifest.defaults.items()})}

    def _owner_meta(self, session: SessionInfo, args: OwnerMeta) -> Json:
        return {"value": TEST_OWNER[args.field]}

    def _conversation_read(self, session: SessionInfo, args: ConversationRead) -> Json:
        # Standalone there is no visitor conversation (no turns are opened): an empty transcript.
        return {"turns": []}

    def _inference_generate(self, session: SessionInfo, args: InferenceGenerate) -> Json:
        raise Unavailable("inference.generate: standalone there is no visitor's client to write the text")


_Handler = Callable[[LocalHost, SessionInfo, Any], Json]
_OPS: dict[str, tuple[type[_Args], _Handler]] = {
    "store.insert": (StoreInsert, LocalHost._insert),
    "store.query": (StoreQuery, LocalHost._query),
    "store.count": (StoreCount, LocalHost._count),
    "store.search": (StoreSearch, LocalHost._search),
    "store.update": (StoreUpdate, LocalHost._update),
    "store.delete": (StoreDelete, LocalHost._delete),
    "store.claim": (StoreClaim, LocalHost._claim),
    "store.release": (StoreRelease, LocalHost._release),
    "config.get": (ConfigGet, LocalHost._config_get),
    "owner.meta": (OwnerMeta, LocalHost._owner_meta),
    "conversation.read": (ConversationRead, LocalHost._conversation_read),
    "inference.generate": (InferenceGenerate, LocalHost._inference_generate),
}


def _doomed(row: _Row, args: StoreDelete) -> bool:
    return (args.id is None or row.id == args.id) and (args.filter is None or contains(row.doc, args.filter))


def _problems(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)
