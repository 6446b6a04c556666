"""The checks every plugin store applies to a plugin's arguments, and the limits they check against,
raising the host's `InvalidArguments`.

Above: `plugin_store` (PostgreSQL). Below: the plugin contract (`mcp_host_kit.contract`),
which holds the checks themselves; the kit's standalone store (the host's in-memory twin too,
`memory_store`) applies the very same ones in the same order, so it refuses what the host
refuses.

Everything a plugin supplies is checked before a store reads or writes anything, and a bad
value raises `InvalidArguments` naming what was wrong: collections match
`[a-z][a-z0-9_]{0,63}`; documents and filters are plain JSON within size and depth; record
ids are UUIDs in their 36-character form; claim keys are 1..`max_key_chars` characters
without control characters; ttls and limits are integers in range; search queries, fields
and limits as `search` describes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from mcp_host.errors import InvalidArguments, QuotaExhausted
from mcp_host_kit import contract
from mcp_host_kit.contract import QuotaCheck, SearchLimits, StoreLimits, quota_cap, stamped

__all__ = [
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
    "exhausted",
    "stamped",
]

P = ParamSpec("P")
R = TypeVar("R")


def _host(check: Callable[P, R]) -> Callable[P, R]:
    """`check` raising the host's `InvalidArguments` where the contract raises `ArgumentError`."""

    @functools.wraps(check)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return check(*args, **kwargs)
        except contract.ArgumentError as exc:
            raise InvalidArguments(exc.message) from None

    return checked


# check_scope raises ValueError for an owner id no grant could carry: a host bug, not the plugin's.
check_scope = _host(contract.check_scope)
check_doc = _host(contract.check_doc)
check_filter = _host(contract.check_filter)
check_limit = _host(contract.check_limit)
check_record_id = _host(contract.check_record_id)
check_key = _host(contract.check_key)
check_ttl = _host(contract.check_ttl)
check_search_query = _host(contract.check_search_query)
check_fields = _host(contract.check_fields)
check_search_limit = _host(contract.check_search_limit)


def exhausted(limit: int) -> QuotaExhausted:
    return QuotaExhausted(contract.quota_message(limit))
