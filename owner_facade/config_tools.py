"""The config slice of the owner tool table: a capability's config values at a scope (owner,
access code, role, API key), read and set; the audit keeps no secret value or code text.

Above: `tools` (the one table). Below: `services` (`ConfigBackend`, `Access`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_host.access import is_code_id, is_key_id
from mcp_host.errors import InvalidArguments
from mcp_host.policy import REDACTED, summarize
from mcp_host.store import ConfigScope

from .models import ConfigGet, ConfigSet
from .owner_tool import Answer, OwnerTool, loaded_capability
from .services import OwnerServices

__all__ = ["CONFIG_TOOLS"]


async def _scope_id(s: OwnerServices, owner_id: str, scope: ConfigScope, given: str | None) -> str:
    """The stored scope id for `given`: "" for the owner, a code's id for its text or id."""
    if scope == "owner":
        if given:
            raise InvalidArguments("scope_id: the owner scope takes no scope_id")
        return ""
    if not given:
        raise InvalidArguments(f"scope_id: the {scope} scope needs one")
    if scope == "code":
        code_id = await s.access.credentials.code_id(owner_id, given)
        if code_id is None:
            raise InvalidArguments("scope_id: no access code of this owner is that code or id")
        return code_id
    if scope == "role":
        if not await s.access.roles.exists(owner_id, given):
            raise InvalidArguments(f"scope_id: no role {given[:64]!r}")
        return given
    if not is_key_id(given) or given not in {k.id for k in await s.access.list_api_keys(owner_id)}:
        raise InvalidArguments(f"scope_id: no API key with id {given[:64]!r}")
    return given


async def _config_get(s: OwnerServices, owner_id: str, a: ConfigGet) -> Answer:
    plugin = loaded_capability(s, a.capability)
    scope_id = await _scope_id(s, owner_id, a.scope, a.scope_id)
    values = await s.config.for_plugin(plugin.manifest.id, plugin.manifest).get(owner_id, a.scope, scope_id)
    return {"capability": plugin.manifest.id, "scope": a.scope, "scope_id": scope_id or None, "values": values}


async def _config_set(s: OwnerServices, owner_id: str, a: ConfigSet) -> Answer:
    plugin = loaded_capability(s, a.capability)
    scope_id = await _scope_id(s, owner_id, a.scope, a.scope_id)
    handle = s.config.for_plugin(plugin.manifest.id, plugin.manifest)
    values = await handle.set(owner_id, a.scope, scope_id, a.values)
    return {"capability": plugin.manifest.id, "scope": a.scope, "scope_id": scope_id or None, "values": values}


def _config_summary(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A code scope's `scope_id` may be the code's text: keep it only when it is an id. A
    string value may be a secret setting (the summary cannot tell): its text is not kept."""
    scope_id = arguments.get("scope_id")
    text = arguments.get("scope") == "code" and scope_id is not None and not is_code_id(scope_id)
    summary = summarize(arguments, secret={"scope_id"} if text else ())
    values = arguments.get("values")
    if isinstance(values, Mapping) and isinstance(summary.get("values"), dict):
        summary["values"] = {
            key: REDACTED if isinstance(values.get(key), str) else kept for key, kept in summary["values"].items()
        }
    return summary


CONFIG_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "config_get",
        "A capability's config values at a scope (owner | code | role | key); scope_id: the code as issued "
        "or its id, the role id, or the API key's id.",
        ConfigGet,
        _config_get,
        _config_summary,
    ),
    OwnerTool(
        "config_set",
        "Set config values at a scope (null resets a key to its default).",
        ConfigSet,
        _config_set,
        _config_summary,
    ),
]
