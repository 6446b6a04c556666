"""The checks every plugin store applies to a plugin's arguments, and the limits they check against.

Above: `plugin_store` (PostgreSQL) and `memory_store` (its in-memory twin), which apply the
same checks in the same order so they refuse the same inputs. Below: `json_guard` and
`plugin_search` (the search arguments).

Everything a plugin supplies is checked before a store reads or writes anything, and a bad
value raises `InvalidArguments` naming what was wrong: collections match
`[a-z][a-z0-9_]{0,63}`; documents and filters pass `json_guard.check_json_object`; record ids
are UUIDs in their 36-character form; claim keys are 1..`max_key_chars` characters without
control characters; ttls and limits are integers in range.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from mcp_host.errors import InvalidArguments, QuotaExhausted
from mcp_host.wire import check_json_object

from .search import SearchLimits

__all__ = [
    "QuotaCheck",
    "StoreLimits",
    "check_doc",
    "check_filter",
    "check_key",
    "check_limit",
    "check_record_id",
    "check_scope",
    "check_ttl",
    "quota_cap",
    "exhausted",
    "stamped",
]

_COLLECTION = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
_RECORD_ID = re.compile(r"\A[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\Z")
_CONTROL_OR_SURROGATE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


@dataclass(frozen=True)
class StoreLimits:
    """What one call may put in or take out of a store."""

    max_doc_bytes: int = 256 * 1024  # compact JSON size of one doc or filter
    max_doc_depth: int = 32
    max_query_limit: int = 500
    default_query_limit: int = 100
    max_claim_ttl_s: int = 300
    max_key_chars: int = 200
    search: SearchLimits = field(default_factory=SearchLimits)


@dataclass(frozen=True)
class QuotaCheck:
    """How `insert` guards a quota collection (see `PluginStore.insert`)."""

    subject_field: str  # the doc field the quota counts by
    subject_id: str | None  # the session's subject id (None: public session, never counted)
    limit: int | None  # None or <= 0: unlimited


def check_scope(owner_id: str, collection: str) -> None:
    # owner_id comes from a grant: a bad one is a host bug, not the plugin's mistake.
    if not isinstance(owner_id, str) or not 0 < len(owner_id) <= 128 or _CONTROL_OR_SURROGATE.search(owner_id):
        raise ValueError("owner_id is not an owner id")
    if not isinstance(collection, str) or _COLLECTION.fullmatch(collection) is None:
        raise InvalidArguments("collection must be 1-64 characters of a-z, 0-9 and _, starting with a letter")


def check_doc(limits: StoreLimits, value: object, what: str) -> dict[str, Any]:
    return check_json_object(value, what=what, max_bytes=limits.max_doc_bytes, max_depth=limits.max_doc_depth)


def check_filter(limits: StoreLimits, value: object) -> dict[str, Any]:
    return {} if value is None else check_doc(limits, value, "filter")


def stamped(doc: dict[str, Any], quota: QuotaCheck | None) -> dict[str, Any]:
    if quota is None or not isinstance(doc, dict):
        return doc  # a non-dict doc is refused by _check_doc
    return {**doc, quota.subject_field: quota.subject_id}


def quota_cap(quota: QuotaCheck | None) -> tuple[dict[str, Any], int] | None:
    """The containment filter and the cap when `quota` limits this insert."""
    if quota is None or quota.subject_id is None or quota.limit is None or quota.limit <= 0:
        return None
    return {quota.subject_field: quota.subject_id}, quota.limit


def check_limit(limits: StoreLimits, value: object) -> int:
    if value is None:
        return limits.default_query_limit
    if type(value) is not int or not 1 <= value <= limits.max_query_limit:
        raise InvalidArguments(f"limit must be an integer from 1 to {limits.max_query_limit}")
    return value


def check_record_id(value: object) -> str:
    if not isinstance(value, str) or _RECORD_ID.fullmatch(value) is None:
        raise InvalidArguments("id is not a record id (a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e)")
    return str(uuid.UUID(value))


def check_key(limits: StoreLimits, key: object) -> None:
    if not isinstance(key, str) or not 1 <= len(key) <= limits.max_key_chars or _CONTROL_OR_SURROGATE.search(key):
        raise InvalidArguments(f"key must be 1-{limits.max_key_chars} characters without control characters")


def check_ttl(limits: StoreLimits, ttl_s: object) -> None:
    if type(ttl_s) is not int or not 1 <= ttl_s <= limits.max_claim_ttl_s:
        raise InvalidArguments(f"ttl_s must be an integer from 1 to {limits.max_claim_ttl_s}")


def exhausted(limit: int) -> QuotaExhausted:
    return QuotaExhausted(f"the quota of {limit} is used up")
