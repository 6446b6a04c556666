"""The registry: which plugins the host runs, by id and by kind — the one place that answers
"the capabilities", "the connectors" and "the plugin with this id". Built from a load report
at start; a plugin installed or removed while the host runs is added or removed here (`add`,
`remove`), so every part holds this one object and reads it live rather than a copy made at
start. Below: `loading` (the `Plugin`s). Above: everything that asks about plugins.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Literal, overload

from .loading import Plugin

__all__ = ["PluginKind", "Registry"]

PluginKind = Literal["capability", "connector"]


class Registry(Sequence[Plugin]):
    """The loaded plugins, in load order (sorted by id), looked up by id or filtered by kind.
    A sequence of them too, so a part that only walks the plugins takes it as one."""

    def __init__(self, plugins: Iterable[Plugin]) -> None:
        self._plugins = tuple(plugins)
        self._by_id = {plugin.manifest.id: plugin for plugin in self._plugins}
        if len(self._by_id) != len(self._plugins):
            raise ValueError("two plugins share an id")  # loading refuses this first; a guard

    def add(self, plugin: Plugin) -> None:
        """Add a plugin installed while the host runs (kept in id order). Raises ValueError
        when one with its id is loaded already."""
        pid = plugin.manifest.id
        if pid in self._by_id:
            raise ValueError(f"a plugin with the id {pid!r} is loaded already")
        self._by_id[pid] = plugin
        self._plugins = tuple(sorted((*self._plugins, plugin), key=lambda p: p.manifest.id))

    def remove(self, plugin_id: str) -> Plugin | None:
        """Drop the plugin with this id; the plugin removed, or None when none had it."""
        plugin = self._by_id.pop(plugin_id, None)
        if plugin is not None:
            self._plugins = tuple(p for p in self._plugins if p.manifest.id != plugin_id)
        return plugin

    @property
    def by_id(self) -> Mapping[str, Plugin]:
        """Every plugin by id: a live read-only view (it follows `add` and `remove`)."""
        return MappingProxyType(self._by_id)

    def __iter__(self) -> Iterator[Plugin]:
        return iter(self._plugins)

    def __len__(self) -> int:
        return len(self._plugins)

    @overload
    def __getitem__(self, index: int) -> Plugin: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Plugin]: ...
    def __getitem__(self, index: int | slice) -> Plugin | Sequence[Plugin]:
        return self._plugins[index]

    def get(self, plugin_id: str, kind: PluginKind | None = None) -> Plugin | None:
        """The plugin with this id (of this kind, when given), or None."""
        plugin = self._by_id.get(plugin_id)
        if plugin is None or (kind is not None and plugin.manifest.kind != kind):
            return None
        return plugin

    def of_kind(self, kind: PluginKind) -> tuple[Plugin, ...]:
        """The plugins of one kind, in load order."""
        return tuple(plugin for plugin in self._plugins if plugin.manifest.kind == kind)

    @property
    def capabilities(self) -> tuple[Plugin, ...]:
        return self.of_kind("capability")

    @property
    def connectors(self) -> tuple[Plugin, ...]:
        return self.of_kind("connector")
