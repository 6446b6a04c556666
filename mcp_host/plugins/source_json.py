"""Reading the JSON documents a plugin source brings (an MCP Bundle's `manifest.json`, a
registry `server.json`) into typed models, with one sentence for the caller on any problem.

Above: `bundles`, `registry_entries`. Below: pydantic and `errors`.
The input is hostile: its size is capped before parsing, duplicate keys and non-JSON constants
(`NaN`, `Infinity`) are refused, and a validation failure names the first field at fault and
pydantic's description of the problem, never the offending value.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mcp_host.errors import InvalidArguments

from .text_safety import shown

__all__ = ["MAX_DOCUMENT_BYTES", "parse_document"]

MAX_DOCUMENT_BYTES = 1024 * 1024
"""The largest `manifest.json` or `server.json` read; real ones are a few kilobytes."""

ModelT = TypeVar("ModelT", bound=BaseModel)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"it repeats the key {shown(key)}")
        seen.add(key)
    return dict(pairs)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "the document"


def parse_document(data: bytes, model: type[ModelT], what: str) -> ModelT:
    """`data` (UTF-8 JSON, one object) validated as `model`; `what` names it in messages
    ("the bundle's manifest.json").

    Raises `InvalidArguments` with one sentence: too large, not UTF-8, not JSON, or the first
    field that does not validate.
    """
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InvalidArguments(f"{what} is {len(data)} bytes long; the limit is {MAX_DOCUMENT_BYTES}.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArguments(f"{what} is not valid UTF-8.") from None
    try:
        raw = json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InvalidArguments(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno}).") from None
    except ValueError as exc:  # raised by the two hooks above, with our own text
        raise InvalidArguments(f"{what} is not usable: {exc.args[0]}.") from None
    except RecursionError:
        raise InvalidArguments(f"{what} is nested too deeply.") from None
    if not isinstance(raw, dict):
        raise InvalidArguments(f"{what} is not a JSON object.")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        message = str(first["msg"]).rstrip(".")
        raise InvalidArguments(f"{what} is invalid at {_field(first['loc'])}: {message}.") from None
