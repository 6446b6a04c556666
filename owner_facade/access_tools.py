"""The access slice of the owner tool table: roles, access codes, API keys, and the live visitor
sessions they open.

Above: `tools` (the one table). Below: `services` (`Access`, `SessionStore`, and `OAuthGrants`:
an ended session's OAuth grants end with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_host.access import is_code_id
from mcp_host.errors import UnknownTool
from mcp_host.policy import summarize

from .models import ApiKeyCreate, ApiKeyRevoke, CodeCreate, CodeRevoke, NoArguments, RolePut, SessionEnd
from .owner_tool import Answer, OwnerTool
from .services import OwnerServices

__all__ = ["ACCESS_TOOLS"]


async def _role_put(s: OwnerServices, owner_id: str, a: RolePut) -> Answer:
    role = await s.access.put_role(owner_id, a.id, a.capabilities, a.config)
    return role.model_dump(mode="json")


async def _roles_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return {"roles": [r.model_dump(mode="json") for r in await s.access.list_roles(owner_id)]}


async def _code_create(s: OwnerServices, owner_id: str, a: CodeCreate) -> Answer:
    text, code = await s.access.create_code(owner_id, a.role, a.config, expires_at=a.expires_at, max_uses=a.max_uses)
    return {"code": text, **code.model_dump(mode="json")}


async def _codes_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return {"codes": [c.model_dump(mode="json") for c in await s.access.list_codes(owner_id)]}


async def _code_revoke(s: OwnerServices, owner_id: str, a: CodeRevoke) -> Answer:
    """`revoked: false` for a code already revoked; `unknown` for no code of this owner."""
    if await s.access.revoke_code(owner_id, a.code):
        return {"revoked": True}
    if await s.access.credentials.code_id(owner_id, a.code) is None:
        raise UnknownTool("no access code of yours is that code or id")
    return {"revoked": False}


def _code_summary(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Keep a code's id (it names the code), never its text."""
    code = arguments.get("code")
    return {**summarize(arguments), "code": code} if is_code_id(code) else summarize(arguments)


async def _api_key_create(s: OwnerServices, owner_id: str, a: ApiKeyCreate) -> Answer:
    text, key = await s.access.create_api_key(owner_id, a.role, a.config)
    return {"key": text, **key.model_dump(mode="json")}


async def _api_keys_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return {"api_keys": [k.model_dump(mode="json") for k in await s.access.list_api_keys(owner_id)]}


async def _api_key_revoke(s: OwnerServices, owner_id: str, a: ApiKeyRevoke) -> Answer:
    """`revoked: false` for a key already revoked; `unknown` for no key of this owner."""
    if await s.access.revoke_api_key(owner_id, a.id):
        return {"revoked": True}
    if a.id not in {key.id for key in await s.access.list_api_keys(owner_id)}:
        raise UnknownTool(f"no API key of yours has the id {a.id[:64]!r}")
    return {"revoked": False}


async def _sessions_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    listed = [
        {
            "session_id": session.id,
            "mode": session.mode,
            "subject": session.subject.model_dump(mode="json") if session.subject else None,
            "visitor": session.visitor.model_dump(mode="json") if session.visitor else None,
            "role": session.role.id,
            "created_at": session.created_at.isoformat(),
            "credential_revoked": session.credential_revoked,
        }
        for session in await s.sessions.list_live(owner_id)
    ]
    return {"sessions": listed}


async def _session_end(s: OwnerServices, owner_id: str, a: SessionEnd) -> Answer:
    """The session's OAuth grants end with it: its client's tokens are refused and not refreshed."""
    session = await s.sessions.get(a.session_id)
    if session is None or session.owner_id != owner_id:
        raise UnknownTool(f"no session {a.session_id[:64]!r}")
    ended = await s.sessions.end(session.id)
    if s.oauth is not None:
        await s.oauth.revoke_subject(session.id)
    return {"ended": ended}


ACCESS_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "role_put", "Create or replace a role: the capabilities it grants and their role config.", RolePut, _role_put
    ),
    OwnerTool("roles_list", "The owner's roles.", NoArguments, _roles_list),
    OwnerTool("code_create", "A new access code for a role; its text is shown once.", CodeCreate, _code_create),
    OwnerTool("codes_list", "The owner's access codes (never their text).", NoArguments, _codes_list),
    OwnerTool(
        "code_revoke", "Revoke an access code, given as issued or by its id.", CodeRevoke, _code_revoke, _code_summary
    ),
    OwnerTool("api_key_create", "A new API key for a role; its text is shown once.", ApiKeyCreate, _api_key_create),
    OwnerTool("api_keys_list", "The owner's API keys (never their text).", NoArguments, _api_keys_list),
    OwnerTool("api_key_revoke", "Revoke an API key by its id.", ApiKeyRevoke, _api_key_revoke),
    OwnerTool("sessions_list", "The live visitor sessions: mode, subject, role.", NoArguments, _sessions_list),
    OwnerTool("session_end", "End a visitor session.", SessionEnd, _session_end),
]
