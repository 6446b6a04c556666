"""The console's pages (GET): each reads through the owner door and renders one template.

Above: `app` (routes, sign-in, CSRF) and `actions` (which render a page again with the
refusal or the secret shown once). Below: `render` (templates, `Asker`) and `views`.

Every page takes `error` (a refusal to show at the top) and extra context an action adds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.responses import HTMLResponse

from .render import Asker, Templates, Visit
from .views import (
    app_preview,
    audit_filtered,
    catalogue_cause,
    config_fields,
    pretty,
    role_sections,
    side_by_side,
    subject_text,
    visitor_text,
    when,
)

__all__ = ["PAGES", "Page", "holds_json"]

Page = Callable[..., Awaitable[HTMLResponse]]
_SCOPES = ("owner", "code", "role", "key")
MAX_AUDIT_ROWS = 500
"""The most rows `audit_list` gives in one call."""


def _first_error(*errors: str | None) -> str | None:
    return next((e for e in errors if e), None)


async def catalogue(ask: Asker, t: Templates, v: Visit, error: str | None = None, **extra: Any) -> HTMLResponse:
    listed = await ask(v.owner_id, "capabilities_list")
    return t.page(
        "catalogue.html",
        csrf=v.csrf,
        done=v.done,
        error=_first_error(error, listed.error),
        capabilities=[{**c, "explained": catalogue_cause(c)} for c in listed.data.get("capabilities", [])],
        **extra,
    )


async def tools(ask: Asker, t: Templates, v: Visit, error: str | None = None, **extra: Any) -> HTMLResponse:
    pending = await ask(v.owner_id, "tools_pending")
    shown = [
        {**tool, "rows": side_by_side(tool.get("approved"), tool.get("live")), "preview": app_preview(tool)}
        for tool in pending.data.get("pending", [])
    ]
    return t.page(
        "tools.html",
        csrf=v.csrf,
        done=v.done,
        error=_first_error(error, pending.error),
        pinning=pending.data.get("pinning", False),
        note=pending.data.get("note"),
        pending=shown,
        rejected=pending.data.get("rejected", []),
        **extra,
    )


async def holds(ask: Asker, t: Templates, v: Visit, error: str | None = None, **extra: Any) -> HTMLResponse:
    listed = await ask(v.owner_id, "holds_list", status="pending")
    rows = [{**h, "arguments_text": pretty(h.get("arguments"))} for h in listed.data.get("holds", [])]
    return t.page("holds.html", csrf=v.csrf, done=v.done, error=_first_error(error, listed.error), holds=rows, **extra)


async def holds_json(ask: Asker, v: Visit) -> dict[str, Any]:
    """The pending holds for the page's script (rendered there as text, never as markup)."""
    listed = await ask(v.owner_id, "holds_list", status="pending")
    if listed.refusal is not None:
        return {"error": listed.error, "holds": []}
    shown = [
        {**h, "arguments_text": pretty(h.get("arguments")), "expires": when(h.get("expires_at"))}
        for h in listed.data.get("holds", [])
    ]
    return {"holds": shown}


async def sessions(ask: Asker, t: Templates, v: Visit, error: str | None = None, **extra: Any) -> HTMLResponse:
    listed = await ask(v.owner_id, "sessions_list")
    return t.page(
        "sessions.html",
        csrf=v.csrf,
        done=v.done,
        error=_first_error(error, listed.error),
        sessions=[
            {**s, "subject_text": subject_text(s.get("subject")), "visitor_text": visitor_text(s.get("visitor"))}
            for s in listed.data.get("sessions", [])
        ],
        **extra,
    )


async def clients(ask: Asker, t: Templates, v: Visit, error: str | None = None, **extra: Any) -> HTMLResponse:
    """The clients let in by OAuth (`oauth_grants_list`), each with its revoke button."""
    listed = await ask(v.owner_id, "oauth_grants_list")
    return t.page(
        "clients.html",
        csrf=v.csrf,
        done=v.done,
        error=_first_error(error, listed.error),
        grants=listed.data.get("grants", []),
        **extra,
    )


async def access(
    ask: Asker, t: Templates, v: Visit, error: str | None = None, role_refused: bool = False, **extra: Any
) -> HTMLResponse:
    """`role_refused`: the host refused the role form `v.form`; it is shown again as typed."""
    roles = await ask(v.owner_id, "roles_list")
    codes = await ask(v.owner_id, "codes_list")
    keys = await ask(v.owner_id, "api_keys_list")
    capabilities = await ask(v.owner_id, "capabilities_list")
    grantable = [c for c in capabilities.data.get("capabilities", []) if c.get("kind") != "connector"]
    listed = roles.data.get("roles", [])
    # The role form: a refused one as the owner typed it, else the role named by ?role= (edit), else empty (new).
    editing = v.form.get("id", "") if role_refused else v.query.get("role", "")
    role = next((r for r in listed if r.get("id") == editing), None)
    typed = (v.form, v.many.get("capabilities", [])) if role_refused else None
    return t.page(
        "access.html",
        csrf=v.csrf,
        done=v.done,
        error=_first_error(error, roles.error, codes.error, keys.error),
        roles=listed,
        codes=codes.data.get("codes", []),
        keys=keys.data.get("api_keys", []),
        role_form={
            "id": editing if role is not None or role_refused else "",
            "editing": role is not None,
            "sections": role_sections(grantable, role, typed),
        },
        **{"secret": None, **extra},
    )


async def connectors(ask: Asker, t: Templates, v: Visit, error: str | None = None, **extra: Any) -> HTMLResponse:
    listed = await ask(v.owner_id, "connectors_list")
    return t.page(
        "connectors.html",
        csrf=v.csrf,
        done=v.done,
        error=_first_error(error, listed.error),
        connectors=listed.data.get("connectors", []),
        **{"checked": None, **extra},
    )


async def config(
    ask: Asker,
    t: Templates,
    v: Visit,
    error: str | None = None,
    field_errors: dict[str, str] | None = None,
    **extra: Any,
) -> HTMLResponse:
    listed = await ask(v.owner_id, "capabilities_list")
    capabilities = [c for c in listed.data.get("capabilities", []) if c.get("kind") != "connector"]
    source = v.form or v.query
    chosen = source.get("capability") or (capabilities[0]["id"] if capabilities else "")
    scope = source.get("scope") if source.get("scope") in _SCOPES else "owner"
    scope_id = source.get("scope_id", "").strip()
    entry = next((c for c in capabilities if c["id"] == chosen), None)
    declared = entry["config"].get(scope, []) if entry is not None else []
    values: dict[str, Any] = {}
    read_error = None
    if entry is not None and declared and (scope == "owner" or scope_id):
        got = await ask(v.owner_id, "config_get", capability=chosen, scope=scope, scope_id=scope_id or None)
        values, read_error = got.data.get("values", {}), got.error
    errors = field_errors or {}
    return t.page(
        "config.html",
        csrf=v.csrf,
        done=v.done,
        error=_first_error(error, errors.get(""), listed.error, read_error),
        capabilities=capabilities,
        chosen=chosen,
        scope=scope,
        scopes=_SCOPES,
        scope_id=scope_id,
        fields=config_fields(declared, values, errors, typed=v.form if errors else None),
        **extra,
    )


async def audit(ask: Asker, t: Templates, v: Visit, error: str | None = None, **extra: Any) -> HTMLResponse:
    since = v.query.get("since", "").strip()
    tool, outcome, reads = v.query.get("tool", ""), v.query.get("outcome", ""), v.query.get("reads") == "on"
    try:
        limit = max(1, min(MAX_AUDIT_ROWS, int(v.query.get("limit", "100"))))
    except ValueError:
        limit = 100
    filtered = not reads or tool.strip() or outcome.strip()
    # The filters apply to the rows read: read as many as the door gives, so `limit` counts rows shown.
    asked = MAX_AUDIT_ROWS if filtered else limit
    listed = await ask(v.owner_id, "audit_list", limit=asked, **({"since": since} if since else {}))
    entries = audit_filtered(listed.data.get("entries", []), tool, outcome, reads=reads)[:limit]
    return t.page(
        "audit.html",
        csrf=v.csrf,
        done=v.done,
        error=_first_error(error, listed.error),
        entries=[{**e, "arguments_text": pretty(e.get("arguments"))} for e in entries],
        filters={"since": since, "tool": tool, "outcome": outcome, "limit": limit, "reads": reads},
        **extra,
    )


async def rules(ask: Asker, t: Templates, v: Visit, error: str | None = None, **extra: Any) -> HTMLResponse:
    current = await ask(v.owner_id, "rules_get")
    grants = await ask(v.owner_id, "grants_list")
    return t.page(
        "rules.html",
        csrf=v.csrf,
        done=v.done,
        error=_first_error(error, current.error),
        version=current.data.get("version"),
        rules=current.data.get("rules", []),
        rules_text=extra.pop("rules_text", None) or pretty(current.data.get("rules", [])),
        grants=grants.data.get("grants", []),
        grants_error=grants.error,
        **extra,
    )


PAGES: dict[str, Page] = {
    "/owner/": catalogue,
    "/owner/tools": tools,
    "/owner/holds": holds,
    "/owner/sessions": sessions,
    "/owner/clients": clients,
    "/owner/access": access,
    "/owner/connectors": connectors,
    "/owner/config": config,
    "/owner/audit": audit,
    "/owner/rules": rules,
}
