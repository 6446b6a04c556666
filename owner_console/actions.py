"""The console's changes (POST): each one owner tool call through the door, then the page again.

Above: `app`, which has checked the session and the CSRF token before any of these runs.
Below: `render` (`Asker`), `pages` (rendered again with the refusal, or with a secret shown
once) and `views` (what a submitted form means).

A change that succeeds answers 303 to its page with `?done=<key>`, a sentence from `DONE`
(nothing the request sent is echoed); one the host refuses renders the page again, 400, with
the host's own words. A new access code or API key is shown on the page that answers the
create, once: it is in no later page and the host keeps only its sha256.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.responses import RedirectResponse, Response

from . import pages
from .render import Asker, Templates, Visit
from .views import changed_values, config_values, connect_values, field_errors, role_config

__all__ = ["ACTIONS", "DONE", "Action"]

Action = Callable[[Asker, Templates, Visit], Awaitable[Response]]

DONE = {
    "approved": "Tool approved: visitors who may use it see it now.",
    "approved_all": "Tools approved: visitors who may use them see them now.",
    "decided": "Decision recorded.",
    "ended": "Session ended.",
    "role": "Role saved.",
    "revoked": "Revoked.",
    "disconnected": "Disconnected.",
    "config": "Config saved.",
    "rules": "Rules saved.",
}


def _done(path: str, key: str, **query: str) -> RedirectResponse:
    return RedirectResponse(f"{path}?{urlencode({**query, 'done': key})}", status_code=303)


async def approve_tool(ask: Asker, t: Templates, v: Visit) -> Response:
    f = v.form
    arguments: dict[str, Any] = {"capability": f.get("capability", ""), "tool": f.get("tool", "")}
    if f.get("live_sha256"):
        arguments["live_sha256"] = f["live_sha256"]
    if f.get("hide_colliding") == "on":
        arguments["hide_colliding"] = True
    reply = await ask(v.owner_id, "tool_approve", **arguments)
    if reply.refusal is not None:
        return await pages.tools(ask, t, v, error=reply.error, status_code=400)
    return _done("/owner/tools", "approved")


async def approve_all(ask: Asker, t: Templates, v: Visit) -> Response:
    """Every pending tool of one capability, at the hashes the page showed (`tools_approve`:
    all or none; one changed since the page was made approves nothing)."""
    names, hashes = v.many.get("tool", []), v.many.get("live_sha256", [])
    if len(names) != len(hashes):
        return await pages.tools(ask, t, v, error="the form does not name a hash for each tool", status_code=400)
    arguments: dict[str, Any] = {
        "capability": v.form.get("capability", ""),
        "tools": dict(zip(names, hashes, strict=True)),
    }
    if v.form.get("hide_colliding") == "on":
        arguments["hide_colliding"] = True
    reply = await ask(v.owner_id, "tools_approve", **arguments)
    if reply.refusal is not None:
        return await pages.tools(ask, t, v, error=reply.error, status_code=400)
    return _done("/owner/tools", "approved_all")


async def decide_hold(ask: Asker, t: Templates, v: Visit) -> Response:
    decision = v.form.get("decision")
    if decision not in ("approve", "deny"):
        return await pages.holds(ask, t, v, error="choose approve or deny", status_code=400)
    reply = await ask(v.owner_id, "hold_decide", id=v.form.get("id", ""), approve=decision == "approve")
    if reply.refusal is not None:
        return await pages.holds(ask, t, v, error=reply.error, status_code=400)
    return _done("/owner/holds", "decided")


async def end_session(ask: Asker, t: Templates, v: Visit) -> Response:
    reply = await ask(v.owner_id, "session_end", session_id=v.form.get("session_id", ""))
    if reply.refusal is not None:
        return await pages.sessions(ask, t, v, error=reply.error, status_code=400)
    return _done("/owner/sessions", "ended")


async def revoke_client(ask: Asker, t: Templates, v: Visit) -> Response:
    reply = await ask(v.owner_id, "oauth_grant_revoke", id=v.form.get("id", ""))
    if reply.refusal is not None:
        return await pages.clients(ask, t, v, error=reply.error, status_code=400)
    return _done("/owner/clients", "revoked")


async def put_role(ask: Asker, t: Templates, v: Visit) -> Response:
    """A role created or replaced: its capabilities and the role config of those it grants."""
    granted = v.many.get("capabilities", [])
    listed = await ask(v.owner_id, "capabilities_list")
    config = role_config(listed.data.get("capabilities", []), granted, v.form)
    reply = await ask(v.owner_id, "role_put", id=v.form.get("id", ""), capabilities=granted, config=config or None)
    if reply.refusal is not None:
        return await pages.access(ask, t, v, error=reply.error, role_refused=True, status_code=400)
    return _done("/owner/access", "role")


def _optional(form: dict[str, str], *keys: str) -> dict[str, Any]:
    """The optional fields the owner filled in (an integer field as a number when it is one)."""
    given: dict[str, Any] = {}
    for key in keys:
        raw = form.get(key, "").strip()
        if raw:
            given[key] = int(raw) if raw.isdigit() else raw
    return given


async def create_code(ask: Asker, t: Templates, v: Visit) -> Response:
    extra = _optional(v.form, "max_uses", "expires_at")
    return await _created(ask, t, v, "access code", "code", "code_create", role=v.form.get("role", ""), **extra)


async def revoke_code(ask: Asker, t: Templates, v: Visit) -> Response:
    return await _revoked(ask, t, v, "code_revoke", code=v.form.get("code", ""))


async def create_key(ask: Asker, t: Templates, v: Visit) -> Response:
    return await _created(ask, t, v, "API key", "key", "api_key_create", role=v.form.get("role", ""))


async def revoke_key(ask: Asker, t: Templates, v: Visit) -> Response:
    return await _revoked(ask, t, v, "api_key_revoke", id=v.form.get("id", ""))


async def _created(ask: Asker, t: Templates, v: Visit, kind: str, field: str, tool: str, **arguments: Any) -> Response:
    """A code or key created: the access page with its secret, shown this once."""
    reply = await ask(v.owner_id, tool, **arguments)
    if reply.refusal is not None:
        return await pages.access(ask, t, v, error=reply.error, status_code=400)
    secret = {"kind": kind, "id": reply.data.get("id"), "text": reply.data.get(field)}
    return await pages.access(ask, t, v, secret=secret)


async def _revoked(ask: Asker, t: Templates, v: Visit, tool: str, **arguments: Any) -> Response:
    reply = await ask(v.owner_id, tool, **arguments)
    if reply.refusal is not None:
        return await pages.access(ask, t, v, error=reply.error, status_code=400)
    return _done("/owner/access", "revoked")


async def connect(ask: Asker, t: Templates, v: Visit) -> Response:
    connector_id = v.form.get("connector", "")
    listed = await ask(v.owner_id, "connectors_list")
    entry = next((c for c in listed.data.get("connectors", []) if c.get("id") == connector_id), None)
    settings = connect_values(entry.get("settings", []) if entry else [], v.form)
    reply = await ask(v.owner_id, "connector_connect", connector=connector_id, settings=settings)
    if reply.refusal is not None:
        return await pages.connectors(ask, t, v, error=reply.error, status_code=400)
    # The connector's own check of the settings, when it has one; never the settings themselves.
    return await pages.connectors(ask, t, v, checked={"connector": connector_id, "answer": reply.data.get("connected")})


async def disconnect(ask: Asker, t: Templates, v: Visit) -> Response:
    reply = await ask(v.owner_id, "connector_disconnect", category=v.form.get("category", ""))
    if reply.refusal is not None:
        return await pages.connectors(ask, t, v, error=reply.error, status_code=400)
    return _done("/owner/connectors", "disconnected")


async def set_config(ask: Asker, t: Templates, v: Visit) -> Response:
    f = v.form
    capability, scope, scope_id = f.get("capability", ""), f.get("scope", "owner"), f.get("scope_id", "").strip()
    listed = await ask(v.owner_id, "capabilities_list")
    entry = next((c for c in listed.data.get("capabilities", []) if c.get("id") == capability), None)
    declared = entry.get("config", {}).get(scope, []) if entry is not None else []
    values = config_values(declared, f)
    read = await ask(v.owner_id, "config_get", capability=capability, scope=scope, scope_id=scope_id or None)
    values = changed_values(values, read.data.get("values", {}))
    reply = await ask(
        v.owner_id, "config_set", capability=capability, scope=scope, scope_id=scope_id or None, values=values
    )
    if reply.refusal is not None:
        placed = field_errors(reply.refusal.message, [str(d["key"]) for d in declared])
        return await pages.config(ask, t, v, field_errors=placed, status_code=400)
    return _done("/owner/config", "config", capability=capability, scope=scope, scope_id=scope_id)


async def set_rules(ask: Asker, t: Templates, v: Visit) -> Response:
    text = v.form.get("rules", "")
    try:
        rules = json.loads(text) if text.strip() else []
    except ValueError as exc:
        error = f"the rules are not JSON (line {getattr(exc, 'lineno', '?')})"
        return await pages.rules(ask, t, v, error=error, rules_text=text, status_code=400)
    reply = await ask(v.owner_id, "rules_set", rules=rules)
    if reply.refusal is not None:
        return await pages.rules(ask, t, v, error=reply.error, rules_text=text, status_code=400)
    return _done("/owner/rules", "rules")


async def revoke_grant(ask: Asker, t: Templates, v: Visit) -> Response:
    reply = await ask(v.owner_id, "grant_revoke", id=v.form.get("id", ""))
    if reply.refusal is not None:
        return await pages.rules(ask, t, v, error=reply.error, status_code=400)
    return _done("/owner/rules", "revoked")


async def connect_remote(ask: Asker, t: Templates, v: Visit) -> Response:
    """Connect: the host starts its sign-in to the remote plugin's server and the browser goes
    to that server's sign-in page; the server sends it back to the host's `/oauth/callback`."""
    reply = await ask(v.owner_id, "remote_connect", capability=v.form.get("capability", ""))
    url = reply.data.get("url")
    if reply.refusal is not None or not isinstance(url, str):
        return await pages.catalogue(ask, t, v, error=reply.error, status_code=400)
    return RedirectResponse(url, status_code=303)


ACTIONS: dict[str, Action] = {
    "/owner/tools/approve": approve_tool,
    "/owner/tools/approve-all": approve_all,
    "/owner/holds/decide": decide_hold,
    "/owner/sessions/end": end_session,
    "/owner/clients/revoke": revoke_client,
    "/owner/roles/put": put_role,
    "/owner/codes/create": create_code,
    "/owner/codes/revoke": revoke_code,
    "/owner/keys/create": create_key,
    "/owner/keys/revoke": revoke_key,
    "/owner/connectors/connect": connect,
    "/owner/connectors/disconnect": disconnect,
    "/owner/config": set_config,
    "/owner/rules/set": set_rules,
    "/owner/grants/revoke": revoke_grant,
    "/owner/remote/connect": connect_remote,
}
