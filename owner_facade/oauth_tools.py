"""The OAuth slice of the owner tool table: the clients let in at the doors by OAuth (each one
grant: the owner door's clients and the clients of visitor sessions), seen and revoked.

Above: `tools` (the one table). Below: `services` (`mcp_host.oauth.OAuthGrants`).
"""

from __future__ import annotations

from typing import Any

from mcp_host.errors import Unconfigured, UnknownTool
from mcp_host.oauth import OAuthGrants

from .models import NoArguments, OAuthGrantRevoke
from .owner_tool import Answer, OwnerTool
from .services import OwnerServices

__all__ = ["OAUTH_TOOLS"]


def _grants(s: OwnerServices) -> OAuthGrants:
    if s.oauth is None:
        raise Unconfigured("this host lets no client in by OAuth")
    return s.oauth


async def _oauth_grants_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return {"grants": [g.model_dump(mode="json") for g in await _grants(s).of_owner(owner_id)]}


async def _oauth_grant_revoke(s: OwnerServices, owner_id: str, a: OAuthGrantRevoke) -> Answer:
    """Revoking a grant revoked already answers it as it is (`revoked_at` unchanged)."""
    grant = await _grants(s).revoke_owned(owner_id, a.id)
    if grant is None:
        raise UnknownTool(f"no OAuth grant of yours has the id {a.id[:64]!r}")
    return {"grant": grant.model_dump(mode="json")}


OAUTH_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "oauth_grants_list",
        "The clients let in by OAuth, one grant each, live ones first: the client (its id and the name it gives "
        "itself), the door, whom it stands for (you, or a visitor session), when it was made, last refreshed, "
        "expires or was revoked.",
        NoArguments,
        _oauth_grants_list,
    ),
    OwnerTool(
        "oauth_grant_revoke",
        "Revoke an OAuth grant by its id: the client's tokens stop working at once and it must sign in again.",
        OAuthGrantRevoke,
        _oauth_grant_revoke,
    ),
]
