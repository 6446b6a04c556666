"""Owner calls: arguments are checked under the declared schema's own dialect."""

from __future__ import annotations

import pytest
from inline_snapshot import snapshot

from mcp_host.errors import InvalidArguments
from mcp_host.owner.calls import check_arguments

DRAFT_07 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": False},
        "unit": {"type": "string"},
    },
    "dependencies": {"pair": ["unit"]},
}


def test_arguments_pass_a_draft_07_schema_under_draft_07() -> None:
    check_arguments(DRAFT_07, {"pair": ["a", 1], "unit": "m"})


def test_arguments_failing_a_draft_07_schema_name_each_draft_07_problem() -> None:
    with pytest.raises(InvalidArguments) as caught:
        check_arguments(DRAFT_07, {"pair": ["a", "b", 3]})

    assert caught.value.message == snapshot(
        "arguments: 'unit' is a dependency of 'pair'; arguments.pair: Additional items are not allowed (3 was "
        "unexpected); arguments.pair.1: 'b' is not of type 'integer'"
    )


def test_a_schema_without_dialect_is_checked_as_2020_12() -> None:
    schema = {"type": "object", "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}]}}}

    with pytest.raises(InvalidArguments) as caught:
        check_arguments(schema, {"pair": [1]})

    assert caught.value.message == snapshot("arguments.pair.0: 1 is not of type 'string'")


def test_a_schema_of_an_unknown_dialect_fails_closed() -> None:
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}

    with pytest.raises(InvalidArguments) as caught:
        check_arguments(schema, {})

    assert caught.value.message == snapshot("the tool's declared input schema cannot be used")
