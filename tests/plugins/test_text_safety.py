"""Text and schema safety: hostile characters refused by code point, tool schemas bounded and local."""

from __future__ import annotations

import pytest
from inline_snapshot import snapshot

from mcp_host.plugins import manifest, text_safety
from mcp_host.plugins.text_safety import check_text, check_tool_schema, printable, schema_validator, shown


def nested_schema(levels: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "object"}
    for _ in range(levels - 1):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("text", "multiline"),
    [
        ("\x1b[31m", True),
        ("\x07", True),
        ("\x85", True),
        ("\u202e", True),
        ("\u2067", True),
        ("\u200b", True),
        ("\u200f", True),
        ("\ufeff", True),
        ("\U000e0001", True),
        ("\U000e007f", True),
        ("\ud800", True),
        ("\r", True),
        ("\n", False),
        ("\t", False),
    ],
)
def test_check_text_refuses_hostile_characters(text: str, multiline: bool) -> None:
    with pytest.raises(ValueError, match=r"^description contains .* \(U\+[0-9A-F]{4,5}\) at index 3$"):
        check_text(f"abc{text}def", "description", multiline=multiline)


def test_check_text_allows_tabs_and_newlines_in_multiline_text() -> None:
    text = "Line one,\twith a tab.\nLine two — ünïcode and emoji 📅 are fine."

    assert check_text(text, "description", multiline=True) is text


def test_check_text_counts_the_limit_in_utf8_bytes() -> None:
    with pytest.raises(ValueError, match="^label is 9 bytes long; the limit is 8$"):
        check_text("xéééé", "label", max_bytes=8)


def test_check_text_limit_defaults_to_8_kib() -> None:
    assert check_text("x" * 8192, "description") == "x" * 8192
    with pytest.raises(ValueError, match="^description is 8193 bytes long; the limit is 8192$"):
        check_text("x" * 8193, "description")


def test_shown_escapes_and_cuts_to_40_characters() -> None:
    assert shown("\x1b[2J") == "'\\x1b[2J'"
    assert shown("x" * 50) == "'" + "x" * 38 + "…"


def test_printable_escapes_unprintable_characters_and_cuts_to_200() -> None:
    assert printable("a\x1b[2Jb\u202e") == "a\\x1b[2Jb\\u202e"
    assert printable("y" * 300) == "y" * 199 + "…"


def test_check_tool_schema_parses_a_json_string_into_a_mapping() -> None:
    schema = check_tool_schema('{"type": "object", "properties": {"q": {"type": "string"}}}')

    assert schema == {"type": "object", "properties": {"q": {"type": "string"}}}


def test_check_tool_schema_allows_subschemas_30_deep() -> None:
    schema = nested_schema(30)

    assert check_tool_schema(schema) is schema


def test_check_tool_schema_allows_local_refs_and_the_2020_12_dialect() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"when": {"$ref": "#/$defs/time"}},
        "$defs": {"time": {"type": "string"}},
    }

    assert check_tool_schema(schema) is schema


# What the TypeScript SDK (1.x, zod-to-json-schema) writes for every tool: draft-07, with its
# own keywords (`definitions`, `dependencies`, a tuple `items` array with `additionalItems`).
DRAFT_07_TOOL = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "definitions": {"name": {"type": "string", "minLength": 1}},
    "properties": {
        "who": {"$ref": "#/definitions/name"},
        "point": {"type": "array", "items": [{"type": "number"}, {"type": "number"}], "additionalItems": False},
        "unit": {"type": "string"},
    },
    "dependencies": {"point": ["unit"]},
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "dialect",
    [
        "http://json-schema.org/draft-07/schema#",
        "http://json-schema.org/draft-07/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2019-09/schema#",
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    ],
)
def test_check_tool_schema_accepts_each_dialect_the_ecosystem_writes(dialect: str) -> None:
    schema = {"$schema": dialect, "type": "object", "properties": {"q": {"type": "string"}}}

    assert check_tool_schema(schema) is schema


def test_a_draft_07_schema_is_checked_and_validates_under_draft_07() -> None:
    schema = check_tool_schema(DRAFT_07_TOOL)
    validator = schema_validator(schema)

    def problems(value: object) -> list[str]:
        return sorted(e.message for e in validator.iter_errors(value))

    assert problems({"who": "ann", "point": [1, 2], "unit": "m"}) == []
    assert problems({"who": "", "point": [1, "x", 3]}) == snapshot(
        [
            "'' should be non-empty",
            "'unit' is a dependency of 'point'",
            "'x' is not of type 'number'",
            "Additional items are not allowed (3 was unexpected)",
        ]
    )


def test_without_schema_a_tool_schema_is_2020_12_mcps_default() -> None:
    schema = {
        "type": "object",
        "prefixItems": [],
        "properties": {"t": {"type": "array", "prefixItems": [{"type": "string"}]}},
    }

    assert [e.message for e in schema_validator(schema).iter_errors({"t": [1]})] == ["1 is not of type 'string'"]


def test_2019_09_keywords_validate_under_2019_09() -> None:
    schema = check_tool_schema(
        {
            "$schema": "https://json-schema.org/draft/2019-09/schema",
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "dependentRequired": {"a": ["b"]},
            "unevaluatedProperties": False,
        }
    )

    assert sorted(e.message for e in schema_validator(schema).iter_errors({"a": "x", "c": 1})) == snapshot(
        ["'b' is a dependency of 'a'", "Unevaluated properties are not allowed ('c' was unexpected)"]
    )


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        pytest.param(
            {"type": "object", "$schema": "http://json-schema.org/draft-04/schema#"},
            snapshot(
                "$schema 'http://json-schema.org/draft-04/schema#' is not an accepted dialect "
                "(JSON Schema draft-07, 2019-09 or 2020-12)"
            ),
            id="older-dialect",
        ),
        pytest.param(
            {"type": "object", "$schema": "https://evil.example/my-meta-schema"},
            snapshot(
                "$schema 'https://evil.example/my-meta-schema' is not an accepted dialect "
                "(JSON Schema draft-07, 2019-09 or 2020-12)"
            ),
            id="remote-dialect",
        ),
        pytest.param(
            {"type": "object", "$schema": ["http://json-schema.org/draft-07/schema#"]},
            snapshot("$schema ['http://json-schema.org/draft-07/schem… is not a string"),
            id="dialect-not-a-string",
        ),
        pytest.param(
            {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {"a": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"}},
            },
            snapshot(
                "mixes dialects: 'http://json-schema.org/draft-07/schema#' below a "
                "https://json-schema.org/draft/2020-12/schema root"
            ),
            id="mixed-dialects",
        ),
        pytest.param(
            {"type": "object", "properties": {"t": {"type": "array", "items": [{"type": "string"}]}}},
            snapshot(
                "is not a valid JSON Schema at $.properties.t.items: "
                "[{'type': 'string'}] is not of type 'object', 'boolean'"
            ),
            id="draft-07-tuple-items-without-saying-draft-07",
        ),
        pytest.param(
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "definitions": {"far": {"$ref": "https://evil.example/x"}},
            },
            snapshot("$ref 'https://evil.example/x' is remote; only local '#…' pointers are allowed"),
            id="draft-07-remote-ref",
        ),
        pytest.param(
            {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "$id": "http://x.example/s"},
            snapshot("$id is refused; a tool schema is one local document"),
            id="draft-07-id",
        ),
        pytest.param(
            {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "minProperties": -1},
            snapshot("is not a valid JSON Schema at $.minProperties: -1 is less than the minimum of 0"),
            id="invalid-in-draft-07",
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"$dynamicRef": "https://evil.example/x"}}},
            snapshot("$dynamicRef 'https://evil.example/x' is remote; only local '#…' pointers are allowed"),
            id="remote-dynamic-ref",
        ),
        pytest.param(
            {"type": "object", "x-vendor": {"deep": {"$ref": "//evil.example/x"}}},
            snapshot("$ref '//evil.example/x' is remote; only local '#…' pointers are allowed"),
            id="remote-ref-under-unknown-keyword",
        ),
        pytest.param(
            {"type": "object", "allOf": [{"type": "object"}] * 1001},
            snapshot("has more than 1000 subschemas"),
            id="1001-subschemas",
        ),
        pytest.param(nested_schema(31), snapshot("nests subschemas deeper than 30"), id="31-deep"),
        pytest.param(
            {"type": "object", "maximum": float("nan")},
            snapshot("holds a number that is not finite"),
            id="nan",
        ),
        pytest.param(
            {"type": "object", "default": {1: 2}},
            snapshot("has a key that is not a string: 1"),
            id="int-key",
        ),
        pytest.param(
            {"type": "object", "default": (1,)},
            snapshot("holds a value that is not JSON: tuple"),
            id="tuple",
        ),
        pytest.param(
            {"type": "object", "properties": {"a": {"type": "strnig"}}},
            snapshot(
                "is not a valid JSON Schema at $.properties.a.type: "
                "'strnig' is not valid under any of the given schemas"
            ),
            id="not-json-schema",
        ),
        pytest.param({"type": "string"}, snapshot('must have "type": "object" at its root'), id="root-not-object"),
        pytest.param(
            ["type", "object"],
            snapshot("must be a JSON object (a mapping or a JSON string of one)"),
            id="not-a-mapping",
        ),
        pytest.param(
            "not json",
            snapshot("is not valid JSON: Expecting value (line 1, column 1)"),
            id="string-not-json",
        ),
    ],
)
def test_check_tool_schema_refuses_what_a_child_may_report(schema: object, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_tool_schema(schema)

    assert str(caught.value) == problem


def test_manifest_re_exports_the_same_checks() -> None:
    assert manifest.check_text is text_safety.check_text
    assert manifest.check_tool_schema is text_safety.check_tool_schema
