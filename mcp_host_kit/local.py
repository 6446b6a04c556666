"""Standalone mode: the host ops served from memory in the plugin's own process.

Above: `host` (the typed ops), when `MCP_HOST_SOCKET` is not set — a plugin run by its author
with `python server.py` or under the MCP Inspector. Below: the plugin's `manifest.yaml`
(`manifest`), read once.

It behaves like the host where an author could trip over a difference: only the ops the
manifest names (`transport.sandbox.host_ops`) are served, and arguments are checked with the
host's own models and checks (the plugin contract, `contract`), so what the host refuses is
refused here with the same words; the store (`local_store`) keeps rows in insertion order,
matches filters like jsonb's `doc @> filter`, expires claims and searches in websearch
syntax; config reads the manifest's defaults (null without one), and the quota collection
gets the subject stamped into `subject_field` and is capped by the subject scope's default
limit. It is not a database: everything is gone when the process ends, and nothing is shared
between processes.

`inference.generate` has its arguments checked and is then refused as `unavailable`: under
the host it asks the visitor's client that made the call (MCP sampling), and standalone
there is no such client — the answer a client without sampling gets, so a plugin's fallback
for that case is what runs. A made-up text would hide that the plugin never met a model.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio.lowlevel
from pydantic import ValidationError

from .contract import (
    OPS,
    ArgumentError,
    ConfigGet,
    ConversationRead,
    InferenceGenerate,
    OwnerMeta,
    QuotaCheck,
    StoreClaim,
    StoreCount,
    StoreDelete,
    StoreInsert,
    StoreQuery,
    StoreRelease,
    StoreSearch,
    StoreUpdate,
    argument_problems,
)
from .errors import Denied, InvalidArguments, Unavailable
from .local_store import LocalStore
from .manifest import PluginManifest
from .session import SessionInfo

__all__ = ["TEST_OWNER", "LocalHost"]

TEST_OWNER: Mapping[str, str] = {"name": "Test Owner", "email": "owner@example.test", "timezone": "UTC"}
_LIMIT_SCOPE = {"code": "code_config", "api_key": "key_config"}
Json = dict[str, Any]


class LocalHost:
    """The host ops of one plugin, in memory, per owner."""

    def __init__(self, manifest: PluginManifest, *, clock: Callable[[], float] = time.time) -> None:
        self.manifest = manifest
        self._store = LocalStore(clock=lambda: datetime.fromtimestamp(clock(), UTC))

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
        if op not in _HANDLERS:
            raise Denied(f"{op} is not emulated in standalone mode")
        if session is None:
            raise Denied(f"{op}: this call carries no session")
        model, _ = OPS[op]
        try:
            args = model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise InvalidArguments(f"{op}: {argument_problems(exc)}") from None
        try:
            return _HANDLERS[op](self, session, args)
        except ArgumentError as exc:
            raise InvalidArguments(exc.message) from None

    def _quota(self, session: SessionInfo, collection: str) -> QuotaCheck | None:
        """The quota check the host makes for an insert into `collection`: the subject stamped
        into `subject_field`, capped by its scope's default limit (there is no stored config)."""
        quota = self.manifest.quota
        if quota is None or collection != quota.collection:
            return None
        subject = session.subject
        if subject is None:
            return QuotaCheck(quota.subject_field, None, None)  # a public session is never counted
        limit = self.manifest.defaults[_LIMIT_SCOPE[subject.kind]].get(quota.config_key)
        return QuotaCheck(quota.subject_field, subject.id, limit if type(limit) is int else None)

    def _insert(self, session: SessionInfo, args: StoreInsert) -> Json:
        quota = self._quota(session, args.collection)
        return {"id": self._store.insert(session.owner_id, args.collection, args.doc, quota=quota)}

    def _query(self, session: SessionInfo, args: StoreQuery) -> Json:
        records = self._store.query(session.owner_id, args.collection, args.filter, args.limit)
        return {"records": [{**r.model_dump(), "created_at": r.created_at.isoformat()} for r in records]}

    def _count(self, session: SessionInfo, args: StoreCount) -> Json:
        return {"count": self._store.count(session.owner_id, args.collection, args.filter)}

    def _search(self, session: SessionInfo, args: StoreSearch) -> Json:
        hits = self._store.search(
            session.owner_id, args.collection, args.query, fields=args.fields, filter=args.filter, limit=args.limit
        )
        return {"records": [{**h.model_dump(), "created_at": h.created_at.isoformat()} for h in hits]}

    def _update(self, session: SessionInfo, args: StoreUpdate) -> Json:
        # A quota row keeps the subject it was counted for: an update cannot move it out of a count.
        quota = self.manifest.quota
        keep = quota.subject_field if quota is not None and quota.collection == args.collection else None
        return {"updated": self._store.update(session.owner_id, args.collection, args.id, args.doc, keep_field=keep)}

    def _delete(self, session: SessionInfo, args: StoreDelete) -> Json:
        return {"deleted": self._store.delete(session.owner_id, args.collection, id=args.id, filter=args.filter)}

    def _claim(self, session: SessionInfo, args: StoreClaim) -> Json:
        return {"claimed": self._store.claim(session.owner_id, args.collection, args.key, args.ttl_s)}

    def _release(self, session: SessionInfo, args: StoreRelease) -> Json:
        return {"released": self._store.release(session.owner_id, args.collection, args.key)}

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
# Every op of the contract but `connector.invoke` and `parent.invoke` (standalone there is no owner's
# connector, and no parent host).
_HANDLERS: dict[str, _Handler] = {
    "store.insert": LocalHost._insert,
    "store.query": LocalHost._query,
    "store.count": LocalHost._count,
    "store.search": LocalHost._search,
    "store.update": LocalHost._update,
    "store.delete": LocalHost._delete,
    "store.claim": LocalHost._claim,
    "store.release": LocalHost._release,
    "config.get": LocalHost._config_get,
    "owner.meta": LocalHost._owner_meta,
    "conversation.read": LocalHost._conversation_read,
    "inference.generate": LocalHost._inference_generate,
}
