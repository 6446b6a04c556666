"""The registry: which plugins the host runs, by id and by kind — the one place that answers
"the capabilities", "the connectors" and "the plugin with this id". Built once from a load
report; immutable. Below: `loading` (the `Plugin`s). Above: everything that asks about plugins.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
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
