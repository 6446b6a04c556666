"""JSON values from outside (a plugin, a visitor, an owner): the checks before anything keeps them,
and jsonb's containment (docs/security.md A4, A5, A8, F4).

Above: the store checks (`checks`: documents and filters), the host's `wire.json_guard` (the
same checks raising the host's `InvalidArguments`) and the kit's standalone emulation. Below:
`json` and `math` only.

A value passes when it is plain JSON that PostgreSQL's `jsonb` stores and Python's `json`
reads back unchanged:

- dicts with `str` keys, lists, `str`, `int`, `float`, `bool`, `None`; nothing else (no
  tuples, sets, bytes, `Decimal`);
- nested at most `max_depth` containers deep (`{}` is depth 1, `{"a": []}` depth 2), checked
  with an explicit stack, so a 100 000-deep value costs no recursion;
- at most `max_bytes` long as compact UTF-8 JSON (`separators=(",", ":")`, non-ASCII
  unescaped); a running lower bound stops the walk early, so an oversized value is refused
  without being serialised;
- floats finite (no NaN or ±Infinity; `1e400` parses to Infinity and is refused too);
- integers within ±`MAX_JSON_INTEGER` (10**30): jsonb would store a 5000-digit integer, but
  Python refuses to read more than 4300 digits back, which would leave a row nobody can load;
- strings and keys without U+0000 (jsonb refuses it) and without lone surrogates (they have
  no UTF-8 form).

Normalisation that remains (jsonb's, documented, not refused): key order is not kept; `-0.0`
comes back as `0.0`; a whole float written with an exponent comes back as an int (`1e20` →
`100000000000000000000`); integers come back exact, also above 2**53 and 2**63.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .codes import INVALID_ARGUMENTS

__all__ = [
    "MAX_JSON_INTEGER",
    "ArgumentError",
    "check_json_object",
    "check_json_value",
    "json_contains",
    "json_size",
]

MAX_JSON_INTEGER = 10**30


class ArgumentError(Exception):
    """An argument that does not fit the contract: `message` says what, for the caller (never
    the value). The host raises it as its `InvalidArguments`, the kit as its own; `code` is
    always `invalid_arguments`."""

    code = INVALID_ARGUMENTS

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# Compact JSON's shortest spelling of each scalar, for the running lower bound of the size.
_LITERAL_BYTES = {True: 4, False: 5, None: 4}


def check_json_value(value: object, *, what: str, max_bytes: int, max_depth: int) -> object:
    """Return `value` if it is plain JSON within the limits (see the module docstring).

    Raises `ArgumentError` whose message names `what` and the problem, never the value.
    """
    if _walk(value, what, max_bytes, max_depth) > max_bytes or json_size(value) > max_bytes:
        raise ArgumentError(f"{what} is larger than {max_bytes} bytes of JSON")
    return value


def check_json_object(value: object, *, what: str, max_bytes: int, max_depth: int) -> dict[str, Any]:
    """Like `check_json_value`, and `value` must be a JSON object (a dict)."""
    if not isinstance(value, dict):
        raise ArgumentError(f"{what} must be a JSON object")
    check_json_value(value, what=what, max_bytes=max_bytes, max_depth=max_depth)
    return value


def json_size(value: object) -> int:
    """Bytes of `value` as compact UTF-8 JSON; call it on checked values only."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return len(text.encode("utf-8"))


def _walk(root: object, what: str, max_bytes: int, max_depth: int) -> int:
    """Check every node; return a lower bound of the compact size (stops once past `max_bytes`)."""
    used = 0
    stack: list[tuple[object, int]] = [(root, 1)]
    while stack and used <= max_bytes:
        node, depth = stack.pop()
        if not isinstance(node, dict | list):
            used += _scalar_bytes(node, what, max_bytes - used)
            continue
        if depth > max_depth:
            raise ArgumentError(f"{what} is nested deeper than {max_depth} levels")
        # Brackets and separators: `[a,b]` n + 1 bytes, `{"k":v}` 2n + 1. Each member costs at
        # least one byte more, so a container too long for the budget is refused before its
        # members are stacked.
        used += 1 + len(node) * (2 if isinstance(node, dict) else 1)
        if used + len(node) > max_bytes:
            return used + len(node)
        if isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
            continue
        for key, child in node.items():
            if not isinstance(key, str):
                raise ArgumentError(f"{what} has a key that is not a string")
            used += _string_bytes(key, what, max_bytes - used)
            stack.append((child, depth + 1))
    return used


def _scalar_bytes(node: object, what: str, budget: int) -> int:
    if isinstance(node, str):
        return _string_bytes(node, what, budget)
    if node is None or isinstance(node, bool):
        return _LITERAL_BYTES[node]
    if isinstance(node, int):
        if not -MAX_JSON_INTEGER <= node <= MAX_JSON_INTEGER:
            raise ArgumentError(f"{what} holds an integer beyond ±10**30")
        return 1
    if isinstance(node, float):
        if not math.isfinite(node):
            raise ArgumentError(f"{what} holds a number that is not finite (NaN or Infinity)")
        return 3
    raise ArgumentError(f"{what} holds a value that is not JSON: {type(node).__name__}")


def _string_bytes(text: str, what: str, budget: int) -> int:
    """Bytes of `text` as a JSON string (at least); refuses U+0000 and lone surrogates."""
    if len(text) > budget:  # each character is at least one byte: no need to look closer
        return len(text) + 2
    if "\x00" in text:
        raise ArgumentError(f"{what} holds a string with U+0000, which cannot be stored")
    try:
        return len(text.encode("utf-8")) + 2
    except UnicodeEncodeError:
        raise ArgumentError(f"{what} holds a string that is not valid Unicode (a lone surrogate)") from None


def json_contains(doc: object, pattern: object) -> bool:
    """jsonb's `doc @> pattern` for checked values (what the in-memory stores filter by).

    Objects: every key of `pattern` is in `doc` with a contained value. Arrays: every element
    of `pattern` is contained in some element of `doc` (order and repeats ignored). Scalars:
    equal and of the same JSON type (`1` equals `1.0`, `true` is not `1`). Not modelled:
    jsonb's top-level exception where an array contains a bare scalar (the store's filters are
    objects). Objects nest through an explicit stack; only an array element that is itself
    a container calls this again, so the depth is bounded by the checked depth of `pattern`.
    """
    pending = [(doc, pattern)]
    while pending:
        have, want = pending.pop()
        if isinstance(want, dict):
            if not isinstance(have, dict) or not want.keys() <= have.keys():
                return False
            pending.extend((have[key], value) for key, value in want.items())
        elif isinstance(want, list):
            if not isinstance(have, list):
                return False
            for item in want:
                if isinstance(item, dict | list):
                    if not any(json_contains(element, item) for element in have):
                        return False
                elif not any(_same_scalar(element, item) for element in have):
                    return False
        elif not _same_scalar(have, want):
            return False
    return True


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, int | float) else type(value).__name__


def _same_scalar(have: object, want: object) -> bool:
    return _json_type(have) == _json_type(want) and have == want
