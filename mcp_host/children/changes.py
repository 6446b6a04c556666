"""`ListChange`: a child said a list of its own changed, and whose child it is.

Above: the composition root, which relays each to the visitor door's caches, the owner's review
and `visitor.change_feed` (which picks the sessions that hear of it from `session_id` and
`owner_context`). Below: `mcp_session.Child`, which makes one for each list-changed or
resource-updated notification its process sends.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ListChange"]


@dataclass(frozen=True)
class ListChange:
    plugin_id: str
    what: str
    """"tools", "prompts", "resources", or "resource:<uri>" (that resource was updated)."""
    session_id: str | None = None
    """The visitor session whose own per-session instance said it; None: a shared child or a
    per-session plugin's owner-context instance."""
    owner_context: bool = False
    """A per-session plugin's owner-context instance said it: its state is the owner's, and
    the sessions that list through it (those without a running instance of their own) are the
    only visitors its lists concern."""
