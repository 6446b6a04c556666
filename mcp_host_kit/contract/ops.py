"""The host ops: their names, the model of each op's arguments and of its result.

Above: the host's op table (`mcp_host.backchannel.ops`, which validates a plugin's arguments
with these models and then runs the op), the kit's typed client (`host`, which reads results
with these models) and its standalone emulation (`local`, which validates as the host does).
Below: pydantic.

Argument models forbid unknown keys and are strict (no `"5"` for 5, no `true` for 1); they
check shape, and the store checks (`checks`) check values, in that order, as the host does.
Result models ignore unknown keys: a newer host may add some, and a plugin built on an older
kit keeps working. `connector.invoke` answers with the connector's own tool result, so it has
no result model.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "OPS",
    "OP_NAMES",
    "ClaimResult",
    "ConfigGet",
    "ConfigResult",
    "ConfigValues",
    "ConnectorInvoke",
    "ConversationRead",
    "ConversationResult",
    "CountResult",
    "DeleteResult",
    "InferenceGenerate",
    "Message",
    "InferenceResult",
    "InsertResult",
    "OpArgs",
    "OpResult",
    "OwnerMeta",
    "ParentInvoke",
    "OwnerMetaResult",
    "QueryResult",
    "Record",
    "ReleaseResult",
    "SearchHit",
    "SearchResult",
    "StoreClaim",
    "StoreCount",
    "StoreDelete",
    "StoreInsert",
    "StoreQuery",
    "StoreRelease",
    "StoreSearch",
    "StoreUpdate",
    "UpdateResult",
    "argument_problems",
]

JsonObject = dict[str, Any]


class OpArgs(BaseModel):
    """The arguments of one op: unknown keys refused, strict types, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class StoreInsert(OpArgs):
    collection: str
    doc: JsonObject


class StoreQuery(OpArgs):
    collection: str
    filter: JsonObject | None = None
    limit: int | None = None


class StoreCount(OpArgs):
    collection: str
    filter: JsonObject | None = None


class StoreSearch(OpArgs):
    collection: str
    query: str
    fields: list[str] | None = None
    filter: JsonObject | None = None
    limit: int | None = None


class StoreUpdate(OpArgs):
    collection: str
    id: str
    doc: JsonObject


class StoreDelete(OpArgs):
    collection: str
    id: str | None = None
    filter: JsonObject | None = None


class StoreClaim(OpArgs):
    collection: str
    key: str
    ttl_s: int = Field(ge=1)


class StoreRelease(OpArgs):
    collection: str
    key: str


class ConfigGet(OpArgs):
    pass


class OwnerMeta(OpArgs):
    field: Literal["name", "email", "timezone"]


class ConnectorInvoke(OpArgs):
    category: str
    verb: str
    args: JsonObject = Field(default_factory=dict)


class ParentInvoke(OpArgs):
    """A node's plugin calling a capability its parent host lent this node (the parent decides)."""

    capability: str = Field(min_length=1, max_length=200)
    tool: str = Field(min_length=1, max_length=200)
    arguments: JsonObject = Field(default_factory=dict)


class ConversationRead(OpArgs):
    pass


class Message(OpArgs):
    role: Literal["user", "assistant"]
    content: str = Field(min_length=1, max_length=200_000)


class InferenceGenerate(OpArgs):
    messages: list[Message] = Field(min_length=1, max_length=100)
    max_tokens: int = Field(default=1024, ge=1, le=16_384)
    system: str | None = Field(default=None, max_length=50_000)


class OpResult(BaseModel):
    """The structured result of one op, as a plugin reads it."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class Record(OpResult):
    """A stored document: its id, the document, and when it was inserted."""

    id: str
    doc: dict[str, Any]
    created_at: datetime


class SearchHit(Record):
    """A document a search found: the record, its rank (higher is better) and a snippet of its
    searched text with the matched words in `**`."""

    rank: float
    snippet: str = ""


class ConfigValues(OpResult):
    """Every declared config key of each scope, with its value for this call (or its
    default; None when it has none)."""

    config: dict[str, Any] = {}
    code_config: dict[str, Any] = {}
    role_config: dict[str, Any] = {}
    key_config: dict[str, Any] = {}


class InsertResult(OpResult):
    id: str


class QueryResult(OpResult):
    records: list[Record]


class CountResult(OpResult):
    count: int


class SearchResult(OpResult):
    records: list[SearchHit]


class UpdateResult(OpResult):
    updated: bool


class DeleteResult(OpResult):
    deleted: int


class ClaimResult(OpResult):
    claimed: bool


class ReleaseResult(OpResult):
    released: bool


class ConfigResult(OpResult):
    values: ConfigValues


class OwnerMetaResult(OpResult):
    value: str | None


class ConversationResult(OpResult):
    turns: list[dict[str, Any]]


class InferenceResult(OpResult):
    text: str
    model: str | None = None


OPS: dict[str, tuple[type[OpArgs], type[OpResult] | None]] = {
    "store.insert": (StoreInsert, InsertResult),
    "store.query": (StoreQuery, QueryResult),
    "store.count": (StoreCount, CountResult),
    "store.search": (StoreSearch, SearchResult),
    "store.update": (StoreUpdate, UpdateResult),
    "store.delete": (StoreDelete, DeleteResult),
    "store.claim": (StoreClaim, ClaimResult),
    "store.release": (StoreRelease, ReleaseResult),
    "config.get": (ConfigGet, ConfigResult),
    "owner.meta": (OwnerMeta, OwnerMetaResult),
    "conversation.read": (ConversationRead, ConversationResult),
    "inference.generate": (InferenceGenerate, InferenceResult),
    "connector.invoke": (ConnectorInvoke, None),
    "parent.invoke": (ParentInvoke, None),
}
"""Each op's name → (argument model, result model; None: the connector's or parent's own tool result)."""

OP_NAMES = frozenset(OPS)
"""The host ops a manifest may name (`transport.sandbox.host_ops`)."""


def argument_problems(exc: ValidationError) -> str:
    """The first three problems of arguments that did not validate, each `where: what`."""
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)
