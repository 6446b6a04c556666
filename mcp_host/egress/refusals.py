"""`RefusalBook`: the destinations each plugin's children were refused through the egress proxy,
the last few per plugin, for the owner's catalogue (`owner.RefusedDestinations`).

Above: the composition root (which tells it each `Refusal` the proxy reports) and the catalogue
(which reads it). Below: `gate.Refusal`. In memory, per replica: a refusal is a fact about this
host's children, logged where it happened; a restart starts the record afresh.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from mcp_host.plugins import printable

from .gate import Refusal

__all__ = ["RefusalBook"]

_KEPT_PER_PLUGIN = 32
_PLUGINS_KEPT = 1024


class RefusalBook:
    """The last `kept` distinct destinations refused per plugin, newest last, each with the
    reason it was refused last."""

    def __init__(self, *, kept: int = _KEPT_PER_PLUGIN) -> None:
        self._kept = kept
        self._by_plugin: OrderedDict[str, OrderedDict[str, str]] = OrderedDict()

    def note(self, refusal: Refusal) -> None:
        """Record `refusal` (a destination seen again moves to the end)."""
        book = self._by_plugin.setdefault(refusal.plugin_id, OrderedDict())
        self._by_plugin.move_to_end(refusal.plugin_id)
        destination = printable(refusal.destination, 300)  # a child chose it
        book.pop(destination, None)
        book[destination] = printable(refusal.reason, 500)
        while len(book) > self._kept:
            book.popitem(last=False)
        while len(self._by_plugin) > _PLUGINS_KEPT:
            self._by_plugin.popitem(last=False)

    def of(self, plugin_id: str) -> Sequence[tuple[str, str]]:
        """(destination, reason) of each destination `plugin_id`'s children were refused."""
        return list(self._by_plugin.get(plugin_id, {}).items())
