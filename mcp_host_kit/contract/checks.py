"""The checks every plugin store applies to a plugin's arguments, and the limits they check against.

Above: the host's stores (`mcp_host.store.checks` raises these as its `InvalidArguments`; the
PostgreSQL store and its in-memory twin apply them in the same order) and the kit's
standalone store (`mcp_host_kit.local_store`), so all three refuse the same inputs with the
same words. Below: `values` (JSON documents and filters).

Everything a plugin supplies is checked before a store reads or writes anything, and a bad
value raises `ArgumentError` naming what was wrong: collections match
`[a-z][a-z0-9_]{0,63}`; documents and filters pass `values.check_json_object`; record ids are
UUIDs in their 36-character form; claim keys are 1..`max_key_chars` characters without
control characters; ttls and limits are integers in range; a search query has a word and no
U+0000 or lone surrogate, its fields are 1-8 distinct keys.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from .values import ArgumentError, check_json_object

__all__ = [
    "MAX_SEARCH_FIELDS",
    "QuotaCheck",
    "SearchLimits",
    "StoreLimits",
    "check_doc",
    "check_fields",
    "check_filter",
    "check_key",
    "check_limit",
    "check_record_id",
    "check_scope",
    "check_search_limit",
    "check_search_query",
    "check_ttl",
    "quota_cap",
    "quota_message",
    "stamped",
]

MAX_SEARCH_FIELDS = 8
_COLLECTION = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
_RECORD_ID = re.compile(r"\A[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}\Z")
_CONTROL_OR_SURROGATE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_FIELD = re.compile(r"\A[^\x00-\x1f\x7f\ud800-\udfff]{1,64}\Z")
_NUL_OR_SURROGATE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class SearchLimits:
    """What one search may ask for."""

    max_query_chars: int = 1000
    max_limit: int = 100
    default_limit: int = 20


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
    """How `insert` guards a quota collection: the subject is stamped into `subject_field`,
    and an insert past `limit` rows for that subject is refused `quota_exhausted`."""

    subject_field: str  # the doc field the quota counts by
    subject_id: str | None  # the session's subject id (None: public session, never counted)
    limit: int | None  # None or <= 0: unlimited


def check_scope(owner_id: str, collection: str) -> None:
    """Raises ValueError for an owner id no grant could carry (a host bug, not the plugin's
    mistake) and `ArgumentError` for a collection outside the grammar."""
    if not isinstance(owner_id, str) or not 0 < len(owner_id) <= 128 or _CONTROL_OR_SURROGATE.search(owner_id):
        raise ValueError("owner_id is not an owner id")
    if not isinstance(collection, str) or _COLLECTION.fullmatch(collection) is None:
        raise ArgumentError("collection must be 1-64 characters of a-z, 0-9 and _, starting with a letter")


def check_doc(limits: StoreLimits, value: object, what: str) -> dict[str, Any]:
    return check_json_object(value, what=what, max_bytes=limits.max_doc_bytes, max_depth=limits.max_doc_depth)


def check_filter(limits: StoreLimits, value: object) -> dict[str, Any]:
    return {} if value is None else check_doc(limits, value, "filter")


def stamped(doc: dict[str, Any], quota: QuotaCheck | None) -> dict[str, Any]:
    if quota is None or not isinstance(doc, dict):
        return doc  # a non-dict doc is refused by check_doc
    return {**doc, quota.subject_field: quota.subject_id}


def quota_cap(quota: QuotaCheck | None) -> tuple[dict[str, Any], int] | None:
    """The containment filter and the cap when `quota` limits this insert."""
    if quota is None or quota.subject_id is None or quota.limit is None or quota.limit <= 0:
        return None
    return {quota.subject_field: quota.subject_id}, quota.limit


def quota_message(limit: int) -> str:
    """What a `quota_exhausted` refusal of an insert says."""
    return f"the quota of {limit} is used up"


def check_limit(limits: StoreLimits, value: object) -> int:
    if value is None:
        return limits.default_query_limit
    if type(value) is not int or not 1 <= value <= limits.max_query_limit:
        raise ArgumentError(f"limit must be an integer from 1 to {limits.max_query_limit}")
    return value


def check_record_id(value: object) -> str:
    if not isinstance(value, str) or _RECORD_ID.fullmatch(value) is None:
        raise ArgumentError("id is not a record id (a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e)")
    return str(uuid.UUID(value))


def check_key(limits: StoreLimits, key: object) -> None:
    if not isinstance(key, str) or not 1 <= len(key) <= limits.max_key_chars or _CONTROL_OR_SURROGATE.search(key):
        raise ArgumentError(f"key must be 1-{limits.max_key_chars} characters without control characters")


def check_ttl(limits: StoreLimits, ttl_s: object) -> None:
    if type(ttl_s) is not int or not 1 <= ttl_s <= limits.max_claim_ttl_s:
        raise ArgumentError(f"ttl_s must be an integer from 1 to {limits.max_claim_ttl_s}")


def check_search_query(limits: SearchLimits, query: object) -> str:
    """`query` if it is a string of 1..max_query_chars characters with a non-space in it and
    no U+0000 or lone surrogate (which PostgreSQL cannot take)."""
    if not isinstance(query, str) or not 0 < len(query) <= limits.max_query_chars:
        raise ArgumentError(f"query must be a string of 1-{limits.max_query_chars} characters")
    if not query.strip():
        raise ArgumentError("query must contain a word")
    if _NUL_OR_SURROGATE.search(query):
        raise ArgumentError("query contains U+0000 or a lone surrogate")
    return query


def check_fields(fields: object) -> tuple[str, ...]:
    """`fields` as a tuple (empty for None): 1-8 distinct keys of 1-64 characters without
    control characters."""
    if fields is None:
        return ()
    if not isinstance(fields, list | tuple) or not 0 < len(fields) <= MAX_SEARCH_FIELDS:
        raise ArgumentError(f"fields must be a list of 1-{MAX_SEARCH_FIELDS} keys of the doc")
    for name in fields:
        if not isinstance(name, str) or _FIELD.fullmatch(name) is None:
            raise ArgumentError("fields: each key must be 1-64 characters without control characters")
    if len(set(fields)) != len(fields):
        raise ArgumentError("fields: each key may be named once")
    return tuple(fields)


def check_search_limit(limits: SearchLimits, value: object) -> int:
    """`value` (default_limit for None) if it is an integer 1..max_limit."""
    if value is None:
        return limits.default_limit
    if type(value) is not int or not 1 <= value <= limits.max_limit:
        raise ArgumentError(f"limit must be an integer from 1 to {limits.max_limit}")
    return value
