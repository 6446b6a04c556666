"""`ListChange`: a child said a list of its own changed (`Changed`: which one), and whose child
it is.

Above: the composition root, which relays each to the visitor door's caches, the owner's review
and `visitor.change_feed` (which picks the sessions that hear of it from `session_id` and
`owner_context`); `visitor.fleet`, which tells the other replicas in its own text form. Below:
`mcp_session.Child`, which makes one for each list-changed or resource-updated notification its
process sends.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Changed", "ListChange", "PromptsChanged", "ResourceContentChanged", "ResourcesChanged", "ToolsChanged"]


@dataclass(frozen=True, slots=True)
class ToolsChanged:
    """Its tool list changed (`notifications/tools/list_changed`)."""


@dataclass(frozen=True, slots=True)
class PromptsChanged:
    """Its prompt list changed (`notifications/prompts/list_changed`)."""


@dataclass(frozen=True, slots=True)
class ResourcesChanged:
    """Its resource list changed (`notifications/resources/list_changed`)."""


@dataclass(frozen=True, slots=True)
class ResourceContentChanged:
    """One resource of it was updated (`notifications/resources/updated`): only its subscribers
    hear of it."""

    uri: str


Changed = ToolsChanged | PromptsChanged | ResourcesChanged | ResourceContentChanged
"""What a child said changed."""


@dataclass(frozen=True)
class ListChange:
    plugin_id: str
    what: Changed
    session_id: str | None = None
    """The visitor session whose own per-session instance said it; None: a shared child or a
    per-session plugin's owner-context instance."""
    owner_context: bool = False
    """A per-session plugin's owner-context instance said it: its state is the owner's, and
    the sessions that list through it (those without a running instance of their own) are the
    only visitors its lists concern."""
