"""Checks on JSON values that came from outside (a child, a visitor, an owner) before the host
keeps them, raising the host's `InvalidArguments` (docs/security.md A4, A5, A8, F4).

Above: the host code that stores values (a plugin's store through `store.checks`, config,
host-op arguments). Below: the plugin contract (`mcp_host_kit.contract`), which holds the
checks and jsonb's containment (`json_contains`) and says what passes — the kit's standalone
store applies the same ones.
"""

from __future__ import annotations

from typing import Any

from mcp_host.errors import InvalidArguments
from mcp_host_kit import contract
from mcp_host_kit.contract import MAX_JSON_INTEGER, json_contains, json_size

__all__ = ["MAX_JSON_INTEGER", "check_json_object", "check_json_value", "json_contains", "json_size"]


def check_json_value(value: object, *, what: str, max_bytes: int, max_depth: int) -> object:
    """Return `value` if it is plain JSON within the limits (see `contract.values`).

    Raises `InvalidArguments` whose message names `what` and the problem, never the value.
    """
    try:
        return contract.check_json_value(value, what=what, max_bytes=max_bytes, max_depth=max_depth)
    except contract.ArgumentError as exc:
        raise InvalidArguments(exc.message) from None


def check_json_object(value: object, *, what: str, max_bytes: int, max_depth: int) -> dict[str, Any]:
    """Like `check_json_value`, and `value` must be a JSON object (a dict)."""
    try:
        return contract.check_json_object(value, what=what, max_bytes=max_bytes, max_depth=max_depth)
    except contract.ArgumentError as exc:
        raise InvalidArguments(exc.message) from None
