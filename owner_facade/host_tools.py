"""The host slice of the owner tool table: the host's settings (public sessions, tool search)
and the owner's profile.

Above: `tools` (the one table). Below: `services` (`Access`, `OwnerStore`).
"""

from __future__ import annotations

from typing import Any

from mcp_host.errors import UnknownTool

from .models import HostSettingsSet, NoArguments, OwnerProfileSet
from .owner_tool import Answer, OwnerTool
from .services import OwnerServices

__all__ = ["HOST_TOOLS"]


async def _host_settings_get(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    return (await s.access.host_settings(owner_id)).model_dump(mode="json")


async def _host_settings_set(s: OwnerServices, owner_id: str, a: HostSettingsSet) -> Answer:
    changed = await s.access.set_host_settings(
        owner_id,
        public_sessions=a.public_sessions,
        public_role=a.public_role,
        tool_search_threshold=a.tool_search_threshold,
        desk_email=a.desk_email,
    )
    return changed.model_dump(mode="json")


# -- the owner's profile ----------------------------------------------------------------------


async def _owner_profile_get(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    owner = await s.owners.get(owner_id)
    if owner is None:  # the endpoint verified this owner's token a moment ago
        raise UnknownTool(f"no owner {owner_id[:64]!r}")
    return owner.profile()


async def _owner_profile_set(s: OwnerServices, owner_id: str, a: OwnerProfileSet) -> Answer:
    """Only the fields the call names change (`owners.check_profile` refuses a bad value)."""
    return (await s.owners.set_profile(owner_id, a.model_dump(include=a.model_fields_set))).profile()


HOST_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "host_settings_get",
        "Whether public sessions are on, and their role; the tool search threshold.",
        NoArguments,
        _host_settings_get,
    ),
    OwnerTool(
        "host_settings_set",
        "Turn public sessions on or off; choose their role; set the tool search threshold.",
        HostSettingsSet,
        _host_settings_set,
    ),
    OwnerTool(
        "owner_profile_get",
        "Your profile: name, email address and IANA timezone (null where unset). Plugins read it.",
        NoArguments,
        _owner_profile_get,
    ),
    OwnerTool(
        "owner_profile_set",
        "Set your name, email address or IANA timezone; fields you omit are kept, null unsets one. "
        "Plugins use them (a timezone for working hours, an address to send to). Returns the profile.",
        OwnerProfileSet,
        _owner_profile_set,
    ),
]
