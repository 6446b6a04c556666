"""JSON guard: what plain JSON within limits means, and jsonb containment on Python values.
The store-level consequences (nothing written, both stores alike) are in test_plugin_store."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest

from mcp_host.errors import InvalidArguments
from mcp_host.wire.json_guard import MAX_JSON_INTEGER, check_json_object, check_json_value, json_contains, json_size

LIMITS: dict[str, Any] = {"what": "value", "max_bytes": 64, "max_depth": 3}


def _refusal(value: object, **limits: Any) -> str:
    with pytest.raises(InvalidArguments) as caught:
        check_json_value(value, **{**LIMITS, **limits})
    return caught.value.message


def test_plain_json_passes_unchanged_and_is_the_same_object() -> None:
    value = {"s": "é😀", "i": -(2**63), "f": -0.0, "b": [True, False, None], "o": {"k": 1.5}}
    assert check_json_object(value, what="doc", max_bytes=1024, max_depth=3) is value


@pytest.mark.parametrize("value", [[], "x", 1, 1.5, True, None])
def test_a_scalar_or_list_is_json_but_not_a_json_object(value: object) -> None:
    assert check_json_value(value, **LIMITS) is value
    with pytest.raises(InvalidArguments) as caught:
        check_json_object(value, **LIMITS)
    assert caught.value.message == "value must be a JSON object"


def test_depth_counts_containers_and_max_depth_is_allowed() -> None:
    assert check_json_value({"a": [{}]}, **LIMITS) == {"a": [{}]}
    assert _refusal({"a": [{"b": []}]}) == "value is nested deeper than 3 levels"
    assert _refusal([[[[1]]]]) == "value is nested deeper than 3 levels"


def test_size_is_compact_utf8_json_and_the_limit_is_inclusive() -> None:
    exact = {"k": "é" * 27}  # {"k":""} is 8 bytes, each é two
    assert json_size(exact) == len(json.dumps(exact, ensure_ascii=False, separators=(",", ":")).encode()) == 62
    assert check_json_value(exact, **{**LIMITS, "max_bytes": 62}) is exact
    assert _refusal(exact, max_bytes=61) == "value is larger than 61 bytes of JSON"
    assert _refusal({"k": "\n" * 30}) == "value is larger than 64 bytes of JSON"  # escapes count


def test_an_oversized_container_is_refused_without_walking_its_members() -> None:
    huge = [0] * 5_000_000
    started = time.perf_counter()
    assert _refusal(huge, max_depth=2) == "value is larger than 64 bytes of JSON"
    assert _refusal({str(i): 0 for i in range(100)}) == "value is larger than 64 bytes of JSON"
    assert _refusal(["x" * 10_000_000]) == "value is larger than 64 bytes of JSON"
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.nan, "value holds a number that is not finite (NaN or Infinity)"),
        (float("1e400"), "value holds a number that is not finite (NaN or Infinity)"),
        (MAX_JSON_INTEGER + 1, "value holds an integer beyond ±10**30"),
        (-MAX_JSON_INTEGER - 1, "value holds an integer beyond ±10**30"),
        ("\x00", "value holds a string with U+0000, which cannot be stored"),
        ({"\ud83d": 1}, "value holds a string that is not valid Unicode (a lone surrogate)"),
        ({("a",): 1}, "value has a key that is not a string"),
        (object(), "value holds a value that is not JSON: object"),
        (b"", "value holds a value that is not JSON: bytes"),
    ],
)
def test_values_json_or_jsonb_cannot_carry_are_refused(value: object, message: str) -> None:
    assert _refusal(value) == message


def test_integers_at_the_bound_pass() -> None:
    value = [MAX_JSON_INTEGER, -MAX_JSON_INTEGER]
    assert check_json_value(value, **{**LIMITS, "max_bytes": 100}) == [10**30, -(10**30)]


def test_a_surrogate_pair_written_properly_passes() -> None:
    assert check_json_value("😀", **LIMITS) == "\U0001f600"


@pytest.mark.parametrize(
    ("doc", "pattern", "contained"),
    [
        ({"a": 1}, {}, True),
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": True}, {"a": 1}, False),
        ({"a": 0}, {"a": False}, False),
        ({"a": None}, {"a": None}, True),
        ({}, {"a": None}, False),
        ({"a": [1, [2, 3]]}, {"a": [[3]]}, True),
        ({"a": [1, [2, 3]]}, {"a": [[4]]}, False),
        ({"a": [{"b": 1, "c": 2}]}, {"a": [{"c": 2}]}, True),
        ({"a": [{"b": 1}]}, {"a": {"b": 1}}, False),
        ({"a": ["x"]}, {"a": "x"}, False),
        ({"a": "x"}, {"a": ["x"]}, False),
        ({"a": {"b": 1}}, {"a": 1}, False),
    ],
)
def test_json_contains_follows_jsonb_containment(doc: Any, pattern: Any, contained: bool) -> None:
    assert json_contains(doc, pattern) is contained
