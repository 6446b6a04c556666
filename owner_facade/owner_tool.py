"""A row of the owner tool table (`OwnerTool`): the tool as listed, its argument model, its
handler and its audit summary; and the lookup the slices share (`loaded_capability`).

Above: `tools` (the one table) and each domain's slice of it (`access_tools`, `approvals`,
`capability_tools`, `config_tools`, `connector_tools`, `host_tools`, `plugin_tools`,
`policy_tools`). Below: `services` (the host's parts). A handler returns a dict, answered as
structured content, or — for the tools that run a plugin's own tool — that tool's result as it
came back. Handlers raise `mcp_host`'s `HostError`s; the door turns them into `{code, message}`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import mcp.types as types
from pydantic import BaseModel

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import Plugin
from mcp_host.policy import summarize

from .services import OwnerServices

__all__ = ["Answer", "OwnerTool", "Summary", "loaded_capability"]

A = TypeVar("A", bound=BaseModel)
Answer = dict[str, Any] | types.CallToolResult
Summary = Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class OwnerTool(Generic[A]):
    """A row of the table: the tool as listed, its argument model, its handler, its audit summary."""

    name: str
    description: str
    model: type[A]
    handler: Callable[[OwnerServices, str, A], Awaitable[Answer]]
    summary: Summary = summarize

    def listed(self) -> types.Tool:
        return types.Tool(name=self.name, description=self.description, input_schema=self.input_schema())

    def input_schema(self) -> dict[str, Any]:
        return self.model.model_json_schema()


def loaded_capability(s: OwnerServices, capability: str) -> Plugin:
    """The loaded capability named `capability`; `InvalidArguments` when none is."""
    plugin = s.plugin(capability, "capability")
    if plugin is None:
        raise InvalidArguments(f"capability: no capability named {capability[:80]!r} is loaded")
    return plugin
