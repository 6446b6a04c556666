"""Typed host ops for one forwarded call: `host.session`, `host.store`, `host.config`, `host.owner`,
`host.inference`.

Above: the plugin's tools, which get a `Host` from `kit.host(ctx)`. Below: a `Backend` — the
back-channel client (`channel.SocketChannel`) under the host, or the in-memory emulation
(`local.LocalHost`) when the plugin runs standalone. The two are the seam's two sides: the
same op names, arguments and results (docs/design.md "Plugin ABI"), the plugin contract's
(`contract`: results are read with its models).

A `Host` is bound to one call: its grant goes with every op, so keep it no longer than the
tool call (the host ends the grant when the call returns).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from .contract import (
    ClaimResult,
    ConfigResult,
    ConfigValues,
    CountResult,
    DeleteResult,
    InferenceResult,
    InsertResult,
    OwnerMetaResult,
    QueryResult,
    Record,
    ReleaseResult,
    SearchHit,
    SearchResult,
    UpdateResult,
)
from .errors import Denied, InvalidArguments, Unavailable
from .session import SessionInfo

__all__ = ["Backend", "Config", "ConfigValues", "Host", "Inference", "Owner", "Record", "SearchHit", "Store"]

M = TypeVar("M", bound=BaseModel)


class Backend(Protocol):
    """What runs an op: returns the result's structured content or raises a HostOpError."""

    async def call(
        self, op: str, arguments: Mapping[str, Any], *, grant: str | None, session: SessionInfo | None
    ) -> dict[str, Any]: ...


class Host:
    """The host, as one call of a plugin's tool sees it."""

    def __init__(self, backend: Backend, *, grant: str | None, session: SessionInfo | None) -> None:
        self._backend = backend
        self._grant = grant
        self._session = session
        self.store = Store(self)
        self.config = Config(self)
        self.owner = Owner(self)
        self.inference = Inference(self)

    @property
    def session(self) -> SessionInfo:
        """Who this call is for. Raises Denied when the call carried no (valid) session."""
        if self._session is None:
            raise Denied("this call carries no session from the host")
        return self._session

    async def call(self, op: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Run any op by name and return its structured content (for ops newer than this kit).

        Raises InvalidArguments when `arguments` is not JSON, and the op's HostOpError.
        """
        try:
            plain = json.loads(json.dumps(dict(arguments or {}), allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidArguments(f"{op}: arguments must be JSON values ({exc})") from None
        return await self._backend.call(op, plain, grant=self._grant, session=self._session)

    async def _typed(self, op: str, model: type[M], **arguments: Any) -> M:
        content = await self.call(op, {key: value for key, value in arguments.items() if value is not None})
        try:
            return model.model_validate(content)
        except ValidationError:
            raise Unavailable(f"{op}: the host's answer does not have the op's shape") from None


class Store:
    """The plugin's own store: documents in named collections, and claims on keys."""

    def __init__(self, host: Host) -> None:
        self._host = host

    async def insert(self, collection: str, doc: Mapping[str, Any]) -> str:
        """Add `doc`; return its id. Raises QuotaExhausted in a quota collection that is full."""
        return (await self._host._typed("store.insert", InsertResult, collection=collection, doc=doc)).id

    async def query(
        self, collection: str, filter: Mapping[str, Any] | None = None, limit: int | None = None
    ) -> list[Record]:
        """Documents that contain `filter` (jsonb `@>`), oldest first, at most `limit`."""
        result = await self._host._typed("store.query", QueryResult, collection=collection, filter=filter, limit=limit)
        return result.records

    async def count(self, collection: str, filter: Mapping[str, Any] | None = None) -> int:
        """How many documents contain `filter`."""
        return (await self._host._typed("store.count", CountResult, collection=collection, filter=filter)).count

    async def search(
        self,
        collection: str,
        query: str,
        *,
        fields: Sequence[str] | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> list[SearchHit]:
        """Documents containing `filter` whose text matches `query`, best rank first, at most
        `limit` (1..100, default 20).

        `query` is websearch syntax: words (all must appear), `"a phrase"`, `or`, `-word`; a
        query with no word in it finds nothing. The text is every string of the doc, or the
        strings under `fields` (1-8 top-level keys, the first weighing most).
        """
        result = await self._host._typed(
            "store.search",
            SearchResult,
            collection=collection,
            query=query,
            fields=None if fields is None else list(fields),
            filter=filter,
            limit=limit,
        )
        return result.records

    async def update(self, collection: str, id: str, doc: Mapping[str, Any]) -> bool:
        """Replace the document `id` with `doc`; False when there is none."""
        return (await self._host._typed("store.update", UpdateResult, collection=collection, id=id, doc=doc)).updated

    async def delete(self, collection: str, id: str | None = None, filter: Mapping[str, Any] | None = None) -> int:
        """Delete the document `id`, the documents containing `filter`, or those that match
        both; return how many."""
        return (
            await self._host._typed("store.delete", DeleteResult, collection=collection, id=id, filter=filter)
        ).deleted

    async def claim(self, collection: str, key: str, ttl_s: int) -> bool:
        """Take `key` for `ttl_s` seconds (1..300); False while someone else holds it."""
        return (
            await self._host._typed("store.claim", ClaimResult, collection=collection, key=key, ttl_s=ttl_s)
        ).claimed

    async def release(self, collection: str, key: str) -> bool:
        """Give `key` back; False when it was not held."""
        return (await self._host._typed("store.release", ReleaseResult, collection=collection, key=key)).released


class Config:
    """The plugin's declared config, as it applies to this call."""

    def __init__(self, host: Host) -> None:
        self._host = host

    async def get(self) -> ConfigValues:
        """The owner's `config`, and the `code_config`, `role_config` and `key_config` of
        this call's code, role and API key (defaults where nothing applies)."""
        return (await self._host._typed("config.get", ConfigResult)).values


class Owner:
    """What the plugin may know about the owner it works for."""

    def __init__(self, host: Host) -> None:
        self._host = host

    async def meta(self, field: Literal["name", "email", "timezone"]) -> str | None:
        """The owner's `field`; None when the owner has not set it."""
        return (await self._host._typed("owner.meta", OwnerMetaResult, field=field)).value


class Inference:
    """Text written by the model of the visitor's client that made this call (MCP sampling,
    through the host)."""

    def __init__(self, host: Host) -> None:
        self._host = host

    async def generate(
        self,
        messages: str | Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        system: str | None = None,
    ) -> str:
        """The client model's answer to `messages` (`[{role: "user"|"assistant", content}]`;
        a string is one user message), at most `max_tokens` long, under `system`.

        Raises Unavailable when there is no client that can sample (it did not declare the
        capability; standalone), InvalidArguments for messages the host does not accept, and
        any other refusal of the host as its HostOpError (e.g. `timeout`).
        """
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        wire = [dict(message) for message in messages]
        result = await self._host._typed(
            "inference.generate", InferenceResult, messages=wire, max_tokens=max_tokens, system=system
        )
        return result.text
