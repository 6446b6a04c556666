"""The host-op table: exactly the ops a manifest may name, each a valid MCP tool."""

from __future__ import annotations

import pytest
from inline_snapshot import snapshot

from mcp_host.backchannel.ops import OPS
from mcp_host.plugins.manifest import HOST_OPS, check_tool_schema


def test_the_table_implements_exactly_the_ops_manifests_may_name() -> None:
    assert set(OPS) == HOST_OPS


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_is_a_tool_with_a_safe_closed_schema(name: str) -> None:
    tool = OPS[name].tool()

    assert tool.name == name
    assert check_tool_schema(tool.input_schema) == tool.input_schema
    assert tool.input_schema["additionalProperties"] is False


def test_op_arguments_are_described_for_plugin_authors() -> None:
    assert {name: sorted(op.tool().input_schema.get("required", [])) for name, op in OPS.items()} == snapshot(
        {
            "store.insert": ["collection", "doc"],
            "store.query": ["collection"],
            "store.count": ["collection"],
            "store.search": ["collection", "query"],
            "store.update": ["collection", "doc", "id"],
            "store.delete": ["collection"],
            "store.claim": ["collection", "key", "ttl_s"],
            "store.release": ["collection", "key"],
            "config.get": [],
            "owner.meta": ["field"],
            "conversation.read": [],
            "inference.generate": ["messages"],
            "connector.invoke": ["category", "verb"],
            "parent.invoke": ["capability", "tool"],
        }
    )
