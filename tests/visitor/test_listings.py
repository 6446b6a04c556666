"""Listings as logic: collisions expose neither child, routing reuses the last lists while the
child runs and has not said they changed, and lists are asked afresh for every list call.

The children are stand-ins that count what they were asked; test_passthrough.py and the
conformance suite exercise the real thing through a host.
"""

from __future__ import annotations

from typing import Any

import mcp.types as types
import pytest

from mcp_host.children.lifecycle import ChildHealth, ChildState
from mcp_host.plugins.loading import Plugin
from mcp_host.plugins.manifest import load_manifest
from mcp_host.visitor.listings import Listings, UnknownItem
from tests.hosting import PLUGINS

pytestmark = pytest.mark.anyio


class _Child:
    def __init__(self, uris: list[str], prompts: list[str]) -> None:
        self.uris, self.prompts = uris, prompts
        self.asked: list[str] = []
        self.starts = 1
        self.running = True
        self.session_id: str | None = None

    def health(self) -> ChildHealth:
        return ChildHealth(ChildState.RUNNING, None, 1, self.starts)

    async def capabilities(self) -> types.ServerCapabilities:
        return types.ServerCapabilities(prompts=types.PromptsCapability(), resources=types.ResourcesCapability())

    async def forward(self, request: Any, result_type: Any, *, timeout_s: float) -> Any:
        self.asked.append(request.method)
        if isinstance(request, types.ListPromptsRequest):
            return types.ListPromptsResult(prompts=[types.Prompt(name=n) for n in self.prompts])
        if isinstance(request, types.ListResourcesRequest):
            return types.ListResourcesResult(resources=[types.Resource(uri=u, name=u) for u in self.uris])
        return types.ListResourceTemplatesResult(resource_templates=[])


class _Children:
    """A `ChildSource` over stand-ins: one per plugin id, whatever the session."""

    def __init__(self, children: dict[str, _Child]) -> None:
        self._children = children

    def __call__(self, plugin: Plugin, session_id: str | None = None) -> Any:
        return self._children[plugin.manifest.id]

    def lister(self, plugin: Plugin, session_id: str | None = None) -> Any:
        return self._children[plugin.manifest.id]


def _plugin(folder: str) -> Plugin:
    return Plugin(load_manifest(PLUGINS / folder), PLUGINS / folder, builtin=False)


async def test_a_name_or_uri_two_children_list_is_exposed_by_neither() -> None:
    a, b = _plugin("twin_a"), _plugin("twin_b")
    children = {
        a.manifest.id: _Child(["test://same", "test://a"], ["hello", "only_a"]),
        b.manifest.id: _Child(["test://same"], ["hello"]),
    }
    listings = Listings(_Children(children), timeout_s=5)
    surface = await listings.surface([a, b])
    assert sorted(surface.resources) == ["test://a"]
    assert sorted(surface.prompts) == ["only_a"]
    with pytest.raises(UnknownItem):
        listings.resource_owner(surface, "test://same")
    with pytest.raises(UnknownItem):
        listings.prompt_owner(surface, "hello")
    assert listings.prompt_owner(surface, "only_a") == a.manifest.id


async def test_routing_reuses_the_last_lists_until_the_child_changes() -> None:
    a = _plugin("twin_a")
    child = _Child(["test://a"], [])
    listings = Listings(_Children({a.manifest.id: child}), timeout_s=5)
    await listings.surface([a])  # a list call: asks the child
    asked = len(child.asked)
    await listings.surface([a], fresh=False)  # routing a read: no new question
    assert len(child.asked) == asked
    listings.forget(a.manifest.id)  # the child said its resources changed
    await listings.surface([a], fresh=False)
    assert len(child.asked) == 2 * asked
    child.starts = 2  # a restarted child is asked again too
    await listings.surface([a], fresh=False)
    assert len(child.asked) == 3 * asked
    await listings.surface([a])  # and a list call always asks
    assert len(child.asked) == 4 * asked
