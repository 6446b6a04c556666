"""Text and JSON-schema safety: what may be shown to a person or a model, and what a tool's
input schema may hold (docs/security.md A10, A11).

Above: `manifest`, which checks every title, label, description and owner-tool input schema
a plugin's `manifest.yaml` declares; and, at runtime, `bindings`, which checks the titles and
descriptions of the tools children report in `tools/list` before any visitor sees them.
`check_tool_schema` takes a schema as a child reports it (a mapping) as readily as one a
manifest declares (a mapping or a JSON string), in any dialect the ecosystem writes (draft-07,
as every TypeScript-SDK tool declares; 2019-09; 2020-12, MCP's default when `$schema` is
absent), each checked under its own meta-schema; `schema_validator` validates values under the
schema's own dialect (owner calls). Below: `re`, `json` and `jsonschema`'s validators and their
bundled meta-schemas (no network); nothing here knows of manifests, plugins or children.

Each check returns its value (for a schema, the parsed mapping) or raises `ValueError` whose
message is itself safe to print: it names a field, a code point or a short escaped excerpt,
never the raw text.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft7Validator, Draft201909Validator, Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator

__all__ = [
    "MAX_DESCRIPTION_BYTES",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_SUBSCHEMAS",
    "MAX_SCHEMA_VALUES",
    "check_text",
    "check_tool_schema",
    "printable",
    "schema_validator",
    "shown",
    "text_problem",
]

MAX_DESCRIPTION_BYTES = 8 * 1024
MAX_SCHEMA_DEPTH = 30
MAX_SCHEMA_SUBSCHEMAS = 1000
MAX_SCHEMA_VALUES = 50_000


# ---------------------------------------------------------------------------------------------
# Text


_CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f"
_BIDI = "\u061c\u202a-\u202e\u2066-\u2069"
_INVISIBLE = "\u200b-\u200f\u2060-\u2064\ufeff"
_TAGS = "\U000e0000-\U000e007f"
_SURROGATES = "\ud800-\udfff"
_HOSTILE_MULTILINE = re.compile(f"[{_CONTROL}{_BIDI}{_INVISIBLE}{_TAGS}{_SURROGATES}]")
_HOSTILE_LINE = re.compile(f"[\t\n{_CONTROL}{_BIDI}{_INVISIBLE}{_TAGS}{_SURROGATES}]")
_CHAR_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(f"[\t\n{_CONTROL}]"), "a control character"),
    (re.compile(f"[{_BIDI}]"), "a bidi control"),
    (re.compile(f"[{_INVISIBLE}]"), "an invisible character"),
    (re.compile(f"[{_TAGS}]"), "a tag character"),
    (re.compile(f"[{_SURROGATES}]"), "a lone surrogate"),
)


def check_text(value: str, field: str, *, multiline: bool = True, max_bytes: int = MAX_DESCRIPTION_BYTES) -> str:
    """Return `value` if it is safe to show a person or a model, else raise `ValueError`.

    Refused: C0/C1 control characters and ESC (tab and newline too when not `multiline`), bidi
    controls, zero-width and other invisible characters, Unicode tag characters, lone
    surrogates, and more than `max_bytes` of UTF-8. The message names `field` and the code
    point, never the text itself.
    """
    problem = text_problem(value, field, multiline=multiline, max_bytes=max_bytes)
    if problem is not None:
        raise ValueError(problem)
    return value


def text_problem(
    value: str, field: str, *, multiline: bool = True, max_bytes: int = MAX_DESCRIPTION_BYTES
) -> str | None:
    """Why `check_text` refuses `value` (a message naming `field` and the code point, never the
    text itself), or None when it is safe."""
    match = (_HOSTILE_MULTILINE if multiline else _HOSTILE_LINE).search(value)
    if match is not None:
        char = match.group()
        kind = next(name for pattern, name in _CHAR_KINDS if pattern.match(char))
        return f"{field} contains {kind} (U+{ord(char):04X}) at index {match.start()}"
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return f"{field} is {size} bytes long; the limit is {max_bytes}"
    return None


def shown(value: object, limit: int = 40) -> str:
    """`value` as a short, escaped literal that is safe to print."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def printable(text: str, limit: int = 200) -> str:
    """`text` cut to `limit` characters, with anything unprintable escaped."""
    cut = text if len(text) <= limit else text[: limit - 1] + "…"
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in cut)


# ---------------------------------------------------------------------------------------------
# Tool input and output schemas (docs/security.md A10)

# Each accepted `$schema` (an empty fragment is the same URI) → the validator of its dialect.
# Only these: an older draft or a meta-schema of one's own would be checked by rules nobody wrote
# for it, and a remote one would need fetching.
_DIALECTS: dict[str, type[Validator]] = {
    "http://json-schema.org/draft-07/schema": Draft7Validator,
    "https://json-schema.org/draft/2019-09/schema": Draft201909Validator,
    "https://json-schema.org/draft/2020-12/schema": Draft202012Validator,
}
_DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"  # MCP's, when `$schema` is absent
_REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
# Keywords whose value is one subschema, a list of subschemas, or a map of subschemas.
_ONE_SUBSCHEMA = (
    "additionalProperties", "propertyNames", "items", "contains", "not", "if", "then", "else",
    "unevaluatedItems", "unevaluatedProperties", "contentSchema", "additionalItems",
)  # fmt: skip
_LIST_OF_SUBSCHEMAS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP_OF_SUBSCHEMAS = (
    "properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies",
)  # fmt: skip


def _refuse_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise ValueError(f"duplicate key {shown(key)} in the JSON")
    return dict(pairs)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _parse_json(text: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicate_pairs, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise ValueError("is nested too deeply") from None


def _check_json_value(root: object) -> None:
    """Refuse anything that is not plain JSON, too large, or a `$ref`/`$id` leaving the schema."""
    stack: list[tuple[object, int]] = [(root, 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_SCHEMA_VALUES or depth > 2 * MAX_SCHEMA_DEPTH + 4:
            raise ValueError(f"is too large (more than {MAX_SCHEMA_VALUES} values or too deeply nested)")
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise ValueError(f"has a key that is not a string: {shown(key)}")
                _check_reference(key, value)
                stack.append((value, depth + 1))
        elif isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
        elif isinstance(node, float) and not math.isfinite(node):
            raise ValueError("holds a number that is not finite")
        elif node is not None and not isinstance(node, str | int | float):
            raise ValueError(f"holds a value that is not JSON: {type(node).__name__}")


def _check_reference(key: str, value: object) -> None:
    if not isinstance(value, str):
        return
    if key in _REF_KEYS and not value.startswith("#"):
        raise ValueError(f"{key} {shown(value)} is remote; only local '#…' pointers are allowed")
    if key == "$id":
        raise ValueError("$id is refused; a tool schema is one local document")
    if key == "$schema":
        _dialect(value)


def _dialect(value: object) -> str:
    """The accepted dialect `value` (a `$schema`) names, without its empty fragment."""
    if not isinstance(value, str):
        raise ValueError(f"$schema {shown(value)} is not a string")
    uri = value.removesuffix("#")
    if uri not in _DIALECTS:
        raise ValueError(
            f"$schema {shown(value, 80)} is not an accepted dialect (JSON Schema draft-07, 2019-09 or 2020-12)"
        )
    return uri


def _validator_class(schema: dict[str, Any]) -> type[Validator]:
    """The validator of `schema`'s dialect: its root `$schema`, else 2020-12. A `$schema`
    below the root must name the same dialect (without `$id` there is no other resource)."""
    root = _dialect(schema.get("$schema", _DEFAULT_DIALECT))
    stack: list[object] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node is not schema and "$schema" in node and _dialect(node["$schema"]) != root:
                raise ValueError(f"mixes dialects: {shown(node['$schema'], 80)} below a {root} root")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return _DIALECTS[root]


def _subschemas(schema: dict[str, Any]) -> Iterator[object]:
    for keyword in _ONE_SUBSCHEMA:
        if isinstance(schema.get(keyword), dict | bool):
            yield schema[keyword]
    for keyword in _LIST_OF_SUBSCHEMAS:
        if isinstance(schema.get(keyword), list):
            yield from schema[keyword]
    for keyword in _MAP_OF_SUBSCHEMAS:
        if isinstance(schema.get(keyword), dict):
            yield from schema[keyword].values()


def _check_schema_bounds(root: dict[str, Any]) -> None:
    stack: list[tuple[object, int]] = [(root, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_SCHEMA_SUBSCHEMAS:
            raise ValueError(f"has more than {MAX_SCHEMA_SUBSCHEMAS} subschemas")
        if depth > MAX_SCHEMA_DEPTH:
            raise ValueError(f"nests subschemas deeper than {MAX_SCHEMA_DEPTH}")
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in _subschemas(node))


def check_tool_schema(value: object) -> dict[str, Any]:
    """Return a tool's input (or output) schema as a mapping, or raise `ValueError` saying what
    is wrong.

    `value` is a mapping or a JSON string (duplicate keys refused). The schema must be plain
    JSON, a valid JSON Schema of its dialect (`$schema`: draft-07, 2019-09 or 2020-12; absent
    means 2020-12; any other is refused, naming it) with root `"type": "object"`, every `$ref` a
    local `#…` pointer, no `$id`, nesting at most `MAX_SCHEMA_DEPTH` subschemas deep and at most
    `MAX_SCHEMA_SUBSCHEMAS` subschemas in all.
    """
    schema = _parse_json(value) if isinstance(value, str) else value
    if not isinstance(schema, dict):
        raise ValueError("must be a JSON object (a mapping or a JSON string of one)")
    _check_json_value(schema)
    _check_schema_bounds(schema)
    validator = _validator_class(schema)
    try:
        validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"is not a valid JSON Schema at {exc.json_path}: {printable(exc.message)}") from None
    if schema.get("type") != "object":
        raise ValueError('must have "type": "object" at its root')
    return schema


def schema_validator(schema: dict[str, Any]) -> Validator:
    """A validator of values against `schema` under its own dialect (`check_tool_schema`'s rules).

    Raises `ValueError` for a dialect `check_tool_schema` refuses; `SchemaError` (from the first
    validation) for a schema that is not valid in its dialect.
    """
    return _validator_class(schema)(schema)
