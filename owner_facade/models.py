"""The owner tools' arguments: one closed pydantic model per tool (`extra="forbid"`).

Above: `tools` (the dispatch table), whose tools publish these models' JSON Schemas as
their input schemas. Below: pydantic only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ApiKeyCreate",
    "ApiKeyRevoke",
    "AuditList",
    "CapabilityInvoke",
    "CodeCreate",
    "CodeRevoke",
    "ConfigGet",
    "ConfigSet",
    "ConnectorConnect",
    "ConnectorDisconnect",
    "ConnectorInvoke",
    "HoldDecide",
    "HoldsList",
    "HostSettingsSet",
    "NoArguments",
    "RolePut",
    "SessionEnd",
    "ToolApprove",
]

Name = Field(min_length=1, max_length=128)
# `{capability: {key: value}}`, as for roles, codes and keys (DESIGN.md "Owner tools").
CapabilityConfig = dict[str, dict[str, Any]]


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoArguments(_Arguments):
    """A tool that takes no arguments."""


class CapabilityInvoke(_Arguments):
    capability: str = Name
    tool: str = Name
    arguments: dict[str, Any] = Field(default_factory=dict)


class ConnectorInvoke(_Arguments):
    category: str = Name
    verb: str = Name
    args: dict[str, Any] = Field(default_factory=dict)


class ConnectorConnect(_Arguments):
    connector: str = Name
    settings: dict[str, Any] = Field(default_factory=dict)


class ConnectorDisconnect(_Arguments):
    category: str = Name


class ConfigGet(_Arguments):
    capability: str = Name
    scope: Literal["owner", "code", "role", "key"]
    scope_id: str | None = Field(default=None, min_length=1, max_length=256)


class ConfigSet(ConfigGet):
    values: dict[str, Any]


class RolePut(_Arguments):
    id: str = Name
    capabilities: list[str]
    config: CapabilityConfig | None = None


class CodeCreate(_Arguments):
    role: str = Name
    config: CapabilityConfig | None = None
    expires_at: datetime | None = None
    max_uses: int | None = Field(default=None, ge=1)


class CodeRevoke(_Arguments):
    code: str = Field(min_length=1, max_length=256)


class ApiKeyCreate(_Arguments):
    role: str = Name
    config: CapabilityConfig | None = None


class ApiKeyRevoke(_Arguments):
    id: str = Name


class SessionEnd(_Arguments):
    session_id: str = Name


class AuditList(_Arguments):
    since: datetime | None = None
    limit: int = Field(default=100, ge=1, le=500)


class ToolApprove(_Arguments):
    capability: str = Name
    tool: str = Name
    # The `live_sha256` that `tools_pending` showed: approval fails if the tool changed since.
    live_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # A tool whose name collides with one visitors are shown is approved only with this set:
    # both are then hidden from every session that sees both capabilities.
    hide_colliding: bool = False


class HoldsList(_Arguments):
    status: Literal["pending", "all"] = "pending"


class HoldDecide(_Arguments):
    id: str = Field(min_length=1, max_length=64)
    approve: bool


class HostSettingsSet(_Arguments):
    public_sessions: bool | None = None
    public_role: str | None = Field(default=None, min_length=1, max_length=64)
