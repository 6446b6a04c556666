"""Host ops: what a child may ask the host for, one table of typed ops dispatched by name.

Above: `backchannel` (which serves each plugin's ops as MCP tools on its own socket, redeems
the grant, and calls `run_op`). Below: `plugin_store`, `config`, `quota`, `owners`, `turns`.

Each op has a pydantic model of its arguments (unknown keys refused), the plugin contract's
(`mcp_host_kit.contract.OPS`, which the kit validates with too), and a handler. A handler
gets the plugin (known by the socket the op came in on) and the grant (who the forwarded call
is for); owner, subject and conversation come from the grant, never from the arguments, and a
plugin reaches only its own store and config. `manifest.HOST_OPS` (the contract's `OP_NAMES`)
is the list a manifest may name; a test keeps this table equal to the contract's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import mcp.types as types
from mcp import MCPError
from pydantic import ValidationError

from mcp_host.access import OwnerStore
from mcp_host.connectors import ConnectorGateway
from mcp_host.errors import CallTimeout, Denied, InvalidArguments, QuotaExhausted, Unavailable
from mcp_host.plugins import Plugin
from mcp_host.policy import QuotaGate, TurnStore
from mcp_host.store import ConfigScope, ConfigStore, PluginStore, PluginStores, declared, read_values
from mcp_host_kit.contract import (
    ConfigGet,
    ConnectorInvoke,
    ConversationRead,
    InferenceGenerate,
    OpArgs,
    OwnerMeta,
    ParentInvoke,
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

from .grants import Grant

__all__ = ["OPS", "Op", "OpServices", "run_op"]

logger = logging.getLogger(__name__)


class ParentCalls(Protocol):
    """A node's calls to the capabilities its parent lent it (`children.ParentLink`)."""

    async def invoke(self, capability: str, tool: str, arguments: JsonObject) -> types.CallToolResult: ...


@dataclass(frozen=True)
class OpServices:
    """The parts of the host that ops use."""

    stores: PluginStores
    config: ConfigStore
    owners: OwnerStore
    quota: QuotaGate
    connectors: ConnectorGateway
    turns: TurnStore
    input_timeout_s: float = 600.0
    """How long the visitor's client may take to answer `inference.generate`."""
    input_budget: int = 16
    """Requests one call may put to its visitor's client (`inference.generate` included)."""
    parent: ParentCalls | None = None
    """A node's parent capabilities (`parent.invoke`); None: this host has no parent."""


@dataclass(frozen=True)
class _Call:
    plugin: Plugin
    grant: Grant
    services: OpServices

    @property
    def owner_id(self) -> str:
        return self.grant.scope.owner_id

    def store(self) -> PluginStore:
        return self.services.stores.bound(self.plugin.manifest.kind, self.plugin.manifest.id)


JsonObject = dict[str, Any]


async def _store_insert(call: _Call, args: StoreInsert) -> JsonObject:
    scope = call.grant.scope
    check = await call.services.quota.insert_check(call.plugin, call.owner_id, scope.subject, args.collection)
    try:
        record_id = await call.store().insert(call.owner_id, args.collection, args.doc, quota=check)
    except QuotaExhausted:
        call.grant.refusals.append(QuotaExhausted.code)
        raise
    return {"id": record_id}


async def _store_query(call: _Call, args: StoreQuery) -> JsonObject:
    records = await call.store().query(call.owner_id, args.collection, args.filter, args.limit)
    return {"records": [{"id": r.id, "doc": r.doc, "created_at": r.created_at.isoformat()} for r in records]}


async def _store_count(call: _Call, args: StoreCount) -> JsonObject:
    return {"count": await call.store().count(call.owner_id, args.collection, args.filter)}


async def _store_search(call: _Call, args: StoreSearch) -> JsonObject:
    hits = await call.store().search(
        call.owner_id, args.collection, args.query, fields=args.fields, filter=args.filter, limit=args.limit
    )
    return {
        "records": [
            {**hit.model_dump(exclude={"created_at"}), "created_at": hit.created_at.isoformat()} for hit in hits
        ]
    }


async def _store_update(call: _Call, args: StoreUpdate) -> JsonObject:
    # A quota row keeps the subject it was counted for: an update cannot move it out of a count.
    gate = call.plugin.manifest.quota_gate()
    keep = gate.subject_field if gate is not None and gate.collection == args.collection else None
    updated = await call.store().update(call.owner_id, args.collection, args.id, args.doc, keep_field=keep)
    return {"updated": updated}


async def _store_delete(call: _Call, args: StoreDelete) -> JsonObject:
    deleted = await call.store().delete(call.owner_id, args.collection, id=args.id, filter=args.filter)
    return {"deleted": deleted}


async def _store_claim(call: _Call, args: StoreClaim) -> JsonObject:
    return {"claimed": await call.store().claim(call.owner_id, args.collection, args.key, args.ttl_s)}


async def _store_release(call: _Call, args: StoreRelease) -> JsonObject:
    return {"released": await call.store().release(call.owner_id, args.collection, args.key)}


async def _config_get(call: _Call, args: ConfigGet) -> JsonObject:
    manifest = call.plugin.manifest
    scope = call.grant.scope
    subject = scope.subject
    wanted: list[tuple[ConfigScope, str]] = [("owner", "")]
    if subject is not None:
        wanted.append(("code" if subject.kind == "code" else "key", subject.id))
    stored = await call.services.config.for_plugin(manifest.id, manifest).get_many(call.owner_id, wanted)
    role_stored: Mapping[str, Any] = scope.session.role.config.get(manifest.id, {}) if scope.session else {}
    return {
        "values": {
            "config": stored.get("owner") or read_values(declared(manifest, "owner"), {}),
            "code_config": stored.get("code") or read_values(declared(manifest, "code"), {}),
            "role_config": read_values(declared(manifest, "role"), role_stored),
            "key_config": stored.get("key") or read_values(declared(manifest, "key"), {}),
        }
    }


async def _owner_meta(call: _Call, args: OwnerMeta) -> JsonObject:
    # The owner's profile as the owner set it (owner_profile_set); None until then.
    owner = await call.services.owners.get(call.owner_id)
    if owner is None:
        raise Unavailable("the owner is not known")
    return {"value": getattr(owner, args.field)}


async def _connector_invoke(call: _Call, args: ConnectorInvoke) -> types.CallToolResult:
    # A capability reaches only the categories its manifest requires.
    if args.category not in call.plugin.manifest.requires:
        raise Denied(f"category {args.category[:32]!r} is not in its requires")
    return await call.services.connectors.invoke(call.owner_id, args.category, args.verb, args.args)


async def _parent_invoke(call: _Call, args: ParentInvoke) -> types.CallToolResult:
    # A capability the parent lent this node, decided at the parent; its result as the parent gave it.
    if call.services.parent is None:
        raise Unavailable("this host has no parent")
    return await call.services.parent.invoke(args.capability, args.tool, args.arguments)


async def _conversation_read(call: _Call, args: ConversationRead) -> JsonObject:
    # The grant's session, never one named in the arguments; the owner context has none.
    session = call.grant.scope.session
    if session is None:
        return {"turns": []}
    return {"turns": [turn.wire() for turn in await call.services.turns.transcript(session.id)]}


async def _inference_generate(call: _Call, args: InferenceGenerate) -> JsonObject:
    # The text is written by the client of the call this grant is for: MCP sampling, put to
    # that client only (2025-11-25: a request on its call's stream; 2026-07-28: an input round).
    in_flight = call.grant.call
    client = in_flight.client if in_flight is not None else None
    if in_flight is None or client is None:
        raise Unavailable("no visitor's client is behind this call to write the text")
    if not in_flight.spend(call.services.input_budget):  # the same budget as the child's own requests
        raise Denied("this call has asked its visitor's client as often as it may")
    request = types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[
                types.SamplingMessage(role=m.role, content=types.TextContent(type="text", text=m.content))
                for m in args.messages
            ],
            max_tokens=args.max_tokens,
            system_prompt=args.system,
        )
    )
    try:
        with in_flight.waiting_for_visitor():
            answer = await client.request(request, timeout_s=call.services.input_timeout_s)
    except MCPError:
        raise Unavailable("the visitor's client declined to write the text") from None
    except TimeoutError:
        raise CallTimeout("the visitor's client did not write the text in time") from None
    return {"text": sampled_text(answer), "model": getattr(answer, "model", None)}


def sampled_text(answer: object) -> str:
    """The text parts of a sampling answer, joined."""
    content = getattr(answer, "content", None)
    parts = content if isinstance(content, list) else [content]
    return "".join(p.text for p in parts if isinstance(p, types.TextContent))


Handler = Callable[[_Call, Any], Awaitable[JsonObject | types.CallToolResult]]


@dataclass(frozen=True)
class Op:
    name: str
    args: type[OpArgs]
    handler: Handler
    description: str

    def tool(self) -> types.Tool:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return types.Tool(name=self.name, description=self.description, input_schema=schema)


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("store.insert", StoreInsert, _store_insert, "Add a document to a collection; returns its id."),
        Op("store.query", StoreQuery, _store_query, "Documents containing `filter`, oldest first."),
        Op("store.count", StoreCount, _store_count, "How many documents contain `filter`."),
        Op(
            "store.search",
            StoreSearch,
            _store_search,
            "Ranked full-text search (websearch syntax) over the doc's strings or `fields`; best first, with snippets.",
        ),
        Op("store.update", StoreUpdate, _store_update, "Replace the document with this id."),
        Op("store.delete", StoreDelete, _store_delete, "Delete by id and/or filter; returns how many."),
        Op("store.claim", StoreClaim, _store_claim, "Take a key for ttl_s seconds; one winner."),
        Op("store.release", StoreRelease, _store_release, "Give a claimed key back."),
        Op("config.get", ConfigGet, _config_get, "This plugin's declared config for this call."),
        Op(
            "owner.meta",
            OwnerMeta,
            _owner_meta,
            "One field of the owner's profile: name, email or timezone (IANA); null until the owner sets it.",
        ),
        Op("conversation.read", ConversationRead, _conversation_read, "This session's turns and their receipts."),
        Op(
            "inference.generate",
            InferenceGenerate,
            _inference_generate,
            "Text written by the client of this call (MCP sampling): {messages, max_tokens?, system?} -> {text}.",
        ),
        Op(
            "connector.invoke",
            ConnectorInvoke,
            _connector_invoke,
            "Call a verb of the owner's connector for a category this plugin requires.",
        ),
        Op(
            "parent.invoke",
            ParentInvoke,
            _parent_invoke,
            "Call a tool of a capability this host's parent lent it: {capability, tool, arguments}.",
        ),
    )
}


async def run_op(
    name: str, arguments: Mapping[str, Any] | None, plugin: Plugin, grant: Grant, services: OpServices
) -> JsonObject | types.CallToolResult:
    """Run op `name` (one the plugin named; the caller checked) for `grant`: its structured
    answer, or (`connector.invoke`, `parent.invoke`) the connector's or the parent's own result.

    Raises InvalidArguments for arguments that do not fit the op, and the HostErrors of the
    parts below.
    """
    op = OPS[name]
    try:
        args = op.args.model_validate(dict(arguments or {}))
    except ValidationError as exc:
        raise InvalidArguments(f"{name}: {argument_problems(exc)}") from None
    return await op.handler(_Call(plugin, grant, services), args)
