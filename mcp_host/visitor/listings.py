"""Prompts, resources and resource templates of the children a session can see.

Above: the visitor server (`prompts/list`, `prompts/get`, `resources/list`,
`resources/templates/list`, `resources/read`, `resources/subscribe`, `completion/complete`).
Below: `children` (each child's real lists, asked afresh for every list, as tools are).

Names and URIs pass through unchanged, so a client sees what the child serves. They cannot
collide across children: a prompt name or resource URI that two visible children both list
is exposed by neither (as with tools), and the log says which. A `prompts/get` or
`resources/read` reaches only a child this session can see, and only:
- the child that listed that prompt name or URI; or
- for a URI nobody listed, the one visible child whose resource template matches it (two
  matching children: neither), or the only visible child serving resources at all.
Anything else answers "not found" — the same answer for "not allowed" and "not there".

A per-session plugin's lists are its session's own instance's while that runs, else its
owner-context instance's (`ChildSource.lister`): no instance is started only to be listed. Only
the lists of shared and owner-context children are kept between requests.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import anyio
import mcp.types as types
from mcp.shared.uri_template import UriTemplate

from mcp_host.children import Child, ChildSource
from mcp_host.errors import HostError, UnknownTool
from mcp_host.plugins import Plugin

__all__ = ["Listings", "Surface", "UnknownItem"]

logger = logging.getLogger(__name__)

_MAX_PAGES = 20
_R = TypeVar("_R")


class UnknownItem(UnknownTool):
    """No prompt or resource by that name this session may reach."""


@dataclass
class Surface:
    """What one session's visible children list: by name or URI, the child that answers."""

    prompts: dict[str, tuple[str, types.Prompt]] = field(default_factory=dict)
    resources: dict[str, tuple[str, types.Resource]] = field(default_factory=dict)
    templates: list[tuple[str, types.ResourceTemplate]] = field(default_factory=list)
    serving_resources: list[str] = field(default_factory=list)


def _unique(kind: str, found: list[tuple[str, str, _R]]) -> dict[str, tuple[str, _R]]:
    """Keep the keys listed by one child only; log the rest."""
    owners: dict[str, set[str]] = {}
    for pid, key, _ in found:
        owners.setdefault(key, set()).add(pid)
    kept: dict[str, tuple[str, _R]] = {}
    for pid, key, item in found:
        if len(owners[key]) > 1:
            continue
        kept.setdefault(key, (pid, item))
    for key, pids in owners.items():
        if len(pids) > 1:
            logger.warning("%s %r is listed by %s; exposed by none of them", kind, key[:200], ", ".join(sorted(pids)))
    return kept


@dataclass(frozen=True)
class _ChildItems:
    """What one child listed, and which run of the child listed it."""

    starts: int
    prompts: tuple[types.Prompt, ...] = ()
    resources: tuple[types.Resource, ...] = ()
    templates: tuple[types.ResourceTemplate, ...] = ()
    serves_resources: bool = False


class Listings:
    def __init__(self, child_of: ChildSource, *, timeout_s: float) -> None:
        self._child_of = child_of
        self._timeout_s = timeout_s
        self._last: dict[str, _ChildItems] = {}

    def forget(self, plugin_id: str) -> None:
        """The child said its prompts or resources changed: the next use lists them again."""
        self._last.pop(plugin_id, None)

    async def surface(self, visible: Sequence[Plugin], *, fresh: bool = True, session_id: str | None = None) -> Surface:
        """What `visible` list to `session_id` (None: owner context): asked afresh (`fresh`, for
        the list methods), or from each child's last lists while that child runs and has not
        said they changed (for routing a get or read, which then costs one round trip, not one
        per child)."""
        found: dict[str, _ChildItems] = {}

        async def collect(plugin: Plugin) -> None:
            pid = plugin.manifest.id
            try:
                found[pid] = await self._items(plugin, fresh=fresh, session_id=session_id)
            except HostError as exc:
                logger.info("%s: prompts and resources left out: %s", pid, exc.message)

        async with anyio.create_task_group() as tg:
            for plugin in visible:
                tg.start_soon(collect, plugin)
        ordered = [(p.manifest.id, found[p.manifest.id]) for p in visible if p.manifest.id in found]
        return Surface(
            prompts=_unique("prompt", [(pid, x.name, x) for pid, items in ordered for x in items.prompts]),
            resources=_unique("resource", [(pid, str(x.uri), x) for pid, items in ordered for x in items.resources]),
            templates=[(pid, t) for pid, items in ordered for t in items.templates],
            serving_resources=[pid for pid, items in ordered if items.serves_resources],
        )

    async def _items(self, plugin: Plugin, *, fresh: bool, session_id: str | None) -> _ChildItems:
        pid = plugin.manifest.id
        child = self._child_of.lister(plugin, session_id)
        kept = child.session_id is None  # a session's own instance's lists are not kept
        last = self._last.get(pid) if kept else None
        if not fresh and last is not None and child.running and child.health().starts == last.starts:
            return last
        caps = await child.capabilities()  # starts the child when it is not running
        items = _ChildItems(starts=child.health().starts)
        if caps.prompts is not None:
            listed = await self._pages(child, types.ListPromptsRequest, types.ListPromptsResult, "prompts")
            items = replace(items, prompts=tuple(listed))
        if caps.resources is not None:
            resources = await self._pages(child, types.ListResourcesRequest, types.ListResourcesResult, "resources")
            shapes = await self._pages(
                child, types.ListResourceTemplatesRequest, types.ListResourceTemplatesResult, "resource_templates"
            )
            items = replace(items, resources=tuple(resources), templates=tuple(shapes), serves_resources=True)
        if kept:
            self._last[pid] = items
        return items

    async def _pages(self, child: Child, request_type: Any, result_type: Any, attribute: str) -> list[Any]:
        items: list[Any] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await child.forward(request_type(params=params), result_type, timeout_s=self._timeout_s)
            items.extend(getattr(page, attribute))
            cursor = page.next_cursor
            if not cursor:
                break
        return items

    def prompt_owner(self, surface: Surface, name: str) -> str:
        found = surface.prompts.get(name)
        if found is None:
            raise UnknownItem(f"no prompt named {name[:80]!r} is available in this session")
        return found[0]

    def resource_owner(self, surface: Surface, uri: str) -> str:
        listed = surface.resources.get(uri)
        if listed is not None:
            return listed[0]
        matching = {pid for pid, t in surface.templates if _matches(t.uri_template, uri)}
        if len(matching) == 1:
            return matching.pop()
        if not matching and len(surface.serving_resources) == 1:
            return surface.serving_resources[0]
        raise UnknownItem(f"no resource {uri[:200]!r} is available in this session")

    def template_owner(self, surface: Surface, template: str) -> str:
        owners = {pid for pid, t in surface.templates if t.uri_template == template}
        if len(owners) != 1:
            raise UnknownItem(f"no resource template {template[:200]!r} is available in this session")
        return owners.pop()


def _matches(template: str, uri: str) -> bool:
    try:
        return UriTemplate.parse(template).match(uri) is not None
    except Exception:  # a template we cannot parse matches nothing
        return False
