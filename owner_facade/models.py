"""The owner tools' arguments: one closed pydantic model per tool (`extra="forbid"`).

Above: `tools` (the dispatch table), whose tools publish these models' JSON Schemas as
their input schemas. Below: pydantic only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ApiKeyCreate",
    "ApiKeyRevoke",
    "AppContentsArguments",
    "AuditList",
    "CapabilityInvoke",
    "CapabilityLogs",
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
    "OAuthGrantRevoke",
    "OwnerProfileSet",
    "PluginAdd",
    "PluginEgressAllow",
    "PluginEgressRemove",
    "PluginRemove",
    "PluginUpgrade",
    "RolePut",
    "RuleIn",
    "RulesSet",
    "SessionEnd",
    "ToolApprove",
    "ToolsApprove",
]

# `{capability: {key: value}}`, as for roles, codes and keys (docs/design.md "Owner tools").
CapabilityConfig = dict[str, dict[str, Any]]
_CONFIG = (
    "Config values by capability id, then by key: {capability: {key: value}}; each key must be "
    "one the capability declares for this scope (see capabilities_list)."
)
_CAPABILITY = "A capability's id, as capabilities_list shows it."


def _name(description: str) -> Any:
    """A required 1-128 character name, with its description for the model reading the schema."""
    return Field(min_length=1, max_length=128, description=description)


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoArguments(_Arguments):
    """A tool that takes no arguments."""


class CapabilityInvoke(_Arguments):
    capability: str = _name(_CAPABILITY)
    tool: str = _name("The owner tool's name as the capability's owner_tools list it (capabilities_list).")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="The tool's arguments, matching its input_schema in capabilities_list."
    )


class CapabilityNextSteps(_Arguments):
    capability: str = _name(_CAPABILITY)


class RemoteCapability(_Arguments):
    capability: str = _name("A remote plugin's id (its transport is a url), as capabilities_list shows it.")


class CapabilityLogs(_Arguments):
    capability: str = _name("A plugin's id (a capability or a connector), as capabilities_list shows it.")
    lines: int = Field(
        default=50,
        ge=1,
        le=10_000,
        description="How many of the latest lines to return (the host keeps the latest 200 by default).",
    )


class ConnectorInvoke(_Arguments):
    category: str = _name("The category whose connected connector runs the verb, e.g. calendar or mail.")
    verb: str = _name("One of the connector's verbs (connectors_list).")
    args: dict[str, Any] = Field(default_factory=dict, description="The verb's arguments.")


class ConnectorConnect(_Arguments):
    connector: str = _name("The connector's id (connectors_list).")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="The connector's settings by key (connectors_list shows which it takes); secret ones are "
        "stored encrypted and never shown again.",
    )


class ConnectorDisconnect(_Arguments):
    category: str = _name("The category whose connection to remove, e.g. calendar.")


class ConfigGet(_Arguments):
    capability: str = _name(_CAPABILITY)
    scope: Literal["owner", "code", "role", "key"] = Field(
        description="Whose values: owner (yours), code (an access code's), role (a role's) or key (an API key's)."
    )
    scope_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Which code, role or key: the access code as issued or its id, the role's id, or the API "
        "key's id. Leave it out for the owner scope.",
    )


class ConfigSet(ConfigGet):
    values: dict[str, Any] = Field(
        description="The values to set by key; null resets a key to its default. Keys left out are kept."
    )


class RolePut(_Arguments):
    id: str = _name("The role's id; an existing role of that id is replaced.")
    capabilities: list[str] = Field(description="The ids of the capabilities the role's sessions may use.")
    config: CapabilityConfig | None = Field(default=None, description=_CONFIG)


class CodeCreate(_Arguments):
    role: str = _name("The role the code's sessions get (roles_list).")
    config: CapabilityConfig | None = Field(default=None, description=_CONFIG)
    expires_at: datetime | None = Field(
        default=None, description="When the code stops opening sessions (ISO 8601); never when left out."
    )
    max_uses: int | None = Field(
        default=None, ge=1, description="How many sessions the code may open; unlimited when left out."
    )


class CodeRevoke(_Arguments):
    code: str = Field(min_length=1, max_length=256, description="The access code as issued, or its id (codes_list).")


class ApiKeyCreate(_Arguments):
    role: str = _name("The role the key's sessions get (roles_list).")
    config: CapabilityConfig | None = Field(default=None, description=_CONFIG)


class ApiKeyRevoke(_Arguments):
    id: str = _name("The API key's id (api_keys_list), not its text.")


class SessionEnd(_Arguments):
    session_id: str = _name("The session's id (sessions_list).")


class AuditList(_Arguments):
    since: datetime | None = Field(default=None, description="Only calls from this time on (ISO 8601).")
    limit: int = Field(default=100, ge=1, le=500, description="At most this many entries, newest first.")


_Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class AppContentsArguments(_Arguments):
    capability: str = _name(_CAPABILITY)
    sha256: _Sha256 = Field(description="The app version's sha256, as tools_pending's app_review shows it.")


class ToolApprove(_Arguments):
    capability: str = _name(_CAPABILITY)
    tool: str = _name("The tool's name, as tools_pending shows it.")
    # The `live_sha256` that `tools_pending` showed: approval fails if the tool changed since.
    live_sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="The live_sha256 tools_pending showed for the definition you reviewed; the approval fails "
        "if the tool changed since. Left out: whatever definition is live now is approved.",
    )
    # A tool whose name collides with one visitors are shown is approved only with this set:
    # both are then hidden from every session that sees both capabilities.
    hide_colliding: bool = Field(
        default=False,
        description="Needed to approve a tool whose name collides with one visitors see (collides_with in "
        "tools_pending): both are then hidden from sessions that see both.",
    )


class ToolsApprove(_Arguments):
    capability: str = _name(_CAPABILITY)
    tools: dict[Annotated[str, Field(min_length=1, max_length=128)], _Sha256] | None = Field(
        default=None,
        max_length=1000,
        description="The tools to approve, each with the live_sha256 tools_pending showed for the definition you "
        "reviewed: {tool: live_sha256}; all or none are approved, none if one changed since. Left out: every "
        "pending tool of the capability, as it is live now (rejected ones are listed, never approved).",
    )
    hide_colliding: bool = Field(
        default=False,
        description="Needed when a tool collides with one visitors see, or two of them with each other "
        "(collides_with in tools_pending): they are then hidden from sessions that see both.",
    )


class HoldsList(_Arguments):
    status: Literal["pending", "all"] = Field(
        default="pending", description="pending: the holds waiting for you; all: decided ones too."
    )


class HoldDecide(_Arguments):
    id: str = Field(min_length=1, max_length=64, description="The hold's id (holds_list).")
    approve: bool = Field(description="true lets the visitor's call run once; false refuses it.")


class RuleIn(_Arguments):
    name: str | None = Field(default=None, min_length=1, max_length=64, description="A name for the rule (optional).")
    when: str = Field(
        min_length=1,
        max_length=2000,
        description="A CEL condition over the call: capability, tool, annotations, arguments, session "
        "{kind, mode, subject, subject_kind, role, id, visitor}, grant, now {hour, minute, weekday, date, time, "
        "timezone, unix} in your timezone, recent {minute, hour} (this subject's calls by capability); "
        "text(x) is x as JSON. Example: session.mode == 'public' && capability == 'mail' && tool == 'send'.",
    )
    effect: Literal["allow", "refuse", "hold"] = Field(
        description="allow: the call goes on (a destructive tool too); refuse: answered denied; hold: waits "
        "for your approval (holds_list, hold_decide)."
    )
    reason: str | None = Field(
        default=None, min_length=1, max_length=200, description="What a refused caller is told (optional)."
    )


class RulesSet(_Arguments):
    rules: list[RuleIn] = Field(
        max_length=100,
        description="The ordered rules, replacing yours; the first whose condition holds decides. No match: "
        "calls to destructive tools are held, the rest go on. A rule that fails to evaluate refuses the call.",
    )


class GrantBudget(_Arguments):
    calls: int = Field(ge=1, le=10_000_000, description="How many calls the node may make under the grant, in all.")


class GrantCreate(_Arguments):
    capabilities: list[str] = Field(
        min_length=1, max_length=100, description="The capability ids the node may call (their visitor tools)."
    )
    budget: GrantBudget = Field(description="The grant's budget: {calls}.")
    expires_at: datetime | None = Field(
        default=None, description="When the grant ends (with a timezone, e.g. 2027-01-01T00:00:00Z); null: never."
    )
    note: str = Field(default="", max_length=500, description="Whom or what the grant is for; the rules see it.")


class GrantRevoke(_Arguments):
    id: str = Field(min_length=1, max_length=64, description="The grant's id (from grant_create or grants_list).")


class OAuthGrantRevoke(_Arguments):
    id: str = Field(
        min_length=1, max_length=64, description="The OAuth grant's id (oauth_grants_list): the client it let in."
    )


class HostSettingsSet(_Arguments):
    public_sessions: bool | None = Field(
        default=None, description="Whether anyone may open a session without a code or key; left out: unchanged."
    )
    public_role: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="The role public sessions get (roles_list); left out: unchanged.",
    )
    tool_search_threshold: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description=(
            "A visitor session that sees more tools than this lists a few and the host's find_tools and "
            "call_tool instead (default 40); left out: unchanged."
        ),
    )
    desk_email: Literal["off", "optional", "required"] | None = Field(
        default=None,
        description=(
            "Whether the front desk (where a visitor's MCP client signs in by OAuth) asks the visitor's "
            "email: off, optional (the default) or required; left out: unchanged."
        ),
    )


class OwnerProfileSet(_Arguments):
    """Omit a field to keep it; null or "" unsets it."""

    name: str | None = Field(
        default=None,
        max_length=1024,  # the store's rule (owners.check_profile) is the exact one: 128 characters
        description="Your name as plugins may show it (one line, at most 128 characters).",
    )
    email: str | None = Field(
        default=None,
        max_length=1024,
        description="Your email address, one plain address such as ada@example.com; plugins that send "
        "you messages use it when they have no address of their own configured.",
    )
    timezone: str | None = Field(
        default=None,
        max_length=1024,
        description="Your IANA timezone such as Europe/Berlin; plugins with no timezone of their own use it.",
    )


class PluginAdd(_Arguments):
    source: str = Field(
        min_length=1,
        max_length=300,
        description="What to install: npm:<package>[@<version>], pypi:<package>[==<version>], a path on the "
        "host's machine to an .mcpb bundle or to an MCP registry entry (server.json, x.server.json, any .json), "
        "or the https:// URL of a remote MCP server (streamable HTTP; nothing is installed, the host calls it).",
    )
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="The plugin id to give it (default: made from the package name, e.g. npm.scope.name).",
    )
    role: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="An existing role (roles_list) to grant the new capability to now; its sessions see its "
        "tools once you approve them. A role that does not exist is refused before anything is installed.",
    )


class PluginRemove(_Arguments):
    id: str = _name("An installed plugin's id, as plugins_list shows it.")
    purge: bool = Field(
        default=False, description="Also delete its store, its config values and its tool approvals (cannot be undone)."
    )


_EGRESS_HOST = (
    "Where its children may connect: host (ports 80 and 443), host:port, *.domain (every name under it, not "
    "the domain itself) or *.domain:port; an IPv6 address in [brackets]."
)


class PluginEgressRemove(_Arguments):
    plugin_id: str = _name("A loaded plugin's id, as capabilities_list shows it.")
    host: str = Field(min_length=1, max_length=300, description=_EGRESS_HOST)


class PluginEgressAllow(PluginEgressRemove):
    private: bool = Field(
        default=False,
        description="Also reach this host at a loopback or private address (a LAN service, a database on this "
        "machine); never with a *.domain entry. A link-local or cloud-metadata address only when the host is "
        "that address itself.",
    )


class PluginUpgrade(_Arguments):
    id: str = _name("An installed plugin's id, as plugins_list shows it.")
    version: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="For a plugin installed from npm or PyPI only: the version to install (default: the newest "
        "the registry has).",
    )
    source: str | None = Field(
        default=None,
        min_length=1,
        max_length=300,
        description="What to upgrade from, of the kind the plugin was installed from: a path on the host's machine "
        "to the new .mcpb bundle (required for a bundle plugin) or to a server.json (default for a server.json "
        "plugin: the one it was installed from, read again), or npm:<package>@<version> / "
        "pypi:<package>==<version> naming the same package. Not with version.",
    )
