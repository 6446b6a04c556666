"""The console's templates and its answers to the owner door: Jinja2 with autoescape always
on, and `Asker`, one owner tool call through the door seen as data or a refusal.

Above: `pages`, `actions`, `app`. Below: Jinja2, `owner_facade.OwnerDoor` (the same handlers
and audit rows as the owner's MCP door) and `mcp_host.wire.refusal_of`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.responses import HTMLResponse

from mcp_host.wire import Refusal, refusal_of
from owner_facade import OwnerDoor

from .views import when

__all__ = ["NAV", "Asker", "Reply", "Templates", "Visit"]

HERE = Path(__file__).resolve().parent

NAV = (
    ("/owner/", "Catalogue", "catalogue.html"),
    ("/owner/tools", "Pending tools", "tools.html"),
    ("/owner/holds", "Holds", "holds.html"),
    ("/owner/sessions", "Sessions", "sessions.html"),
    ("/owner/clients", "Connected clients", "clients.html"),
    ("/owner/access", "Roles, codes, keys", "access.html"),
    ("/owner/connectors", "Connectors", "connectors.html"),
    ("/owner/config", "Config", "config.html"),
    ("/owner/audit", "Audit log", "audit.html"),
    ("/owner/rules", "Rules, grants", "rules.html"),
)
"""The pages: where each is, its name in the nav, the template that renders it (the nav marks it current)."""


class Templates:
    """The package's templates; every `{{ value }}` is HTML-escaped (autoescape is not per file)."""

    def __init__(self) -> None:
        self._env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters["when"] = when

    def page(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("nav", NAV)
        context.setdefault("template", name)
        context.setdefault("csrf", "")
        context.setdefault("error", None)
        context.setdefault("done", None)
        return HTMLResponse(self._env.get_template(name).render(**context), status_code=status_code)


@dataclass(frozen=True)
class Reply:
    """An owner tool's answer: its structured content, or the door's refusal."""

    data: dict[str, Any] = field(default_factory=dict)
    refusal: Refusal | None = None

    @property
    def error(self) -> str | None:
        """The refusal as one sentence for the page (the host's own words), or None."""
        return None if self.refusal is None else f"{self.refusal.message} ({self.refusal.code})"


@dataclass(frozen=True)
class Visit:
    """One signed-in request: whose, its CSRF token (for the forms it renders), what it sent."""

    owner_id: str
    csrf: str
    query: dict[str, str]
    form: dict[str, str]
    """The submitted form, the last value of each field."""
    many: dict[str, list[str]] = field(default_factory=dict)
    """Every value of each field (checkboxes of one name)."""
    done: str | None = None
    """What the last action did, from a fixed set of sentences (`?done=`; never echoed text)."""


class Asker:
    """Owner tool calls through the door, for one console."""

    def __init__(self, door: OwnerDoor) -> None:
        self._door = door

    async def __call__(self, owner_id: str, name: str, /, **arguments: Any) -> Reply:
        result = await self._door.call_tool(owner_id, name, arguments)
        if result.is_error:
            refusal = refusal_of(result)
            return Reply(refusal=refusal or Refusal(code="error", message="the host could not do this"))
        return Reply(data=dict(result.structured_content or {}))
