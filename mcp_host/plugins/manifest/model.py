"""The manifest's model: `Manifest` and its parts (config fields, owner tools, quota, claim
gate, resource limits, connector settings), each a frozen model that refuses unknown keys.

Above: `reading` (which validates a file's document into a `Manifest`) and every caller of
`mcp_host.plugins`. Below: `grammar` (the ids, names and texts), `transport` (how the host
reaches the plugin's server) and `checks` (what a whole manifest must hold together).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..text_safety import check_text, check_tool_schema, shown
from . import checks
from .grammar import (
    SAFE_INT,
    Category,
    Description,
    DottedName,
    Key,
    Label,
    Phrase,
    PluginId,
    Requirement,
    SafeInt,
    Strict,
    Title,
    ToolName,
    Version,
    refuse,
    unique,
)
from .transport import Transport

__all__ = [
    "ClaimGate",
    "ConfigField",
    "ConnectorSetting",
    "FieldType",
    "Manifest",
    "OwnerTool",
    "Quota",
    "ResourceLimits",
]

_TIME_RE = re.compile(r"\A(?:[01][0-9]|2[0-3]):[0-5][0-9]\Z")

FieldType = Literal["string", "int", "bool", "time", "string_list"]
DefaultValue = str | int | bool | tuple[str, ...] | None

_TYPE_WORDS: dict[str, str] = {
    "string": "a string",
    "int": "an integer",
    "bool": "true or false",
    "time": 'a 24-hour time "HH:MM"',
    "string_list": "a list of strings",
}
_DEFAULT_FITS: dict[str, Callable[[object], bool]] = {
    "string": lambda value: isinstance(value, str),
    "int": lambda value: type(value) is int,
    "bool": lambda value: isinstance(value, bool),
    "time": lambda value: isinstance(value, str) and _TIME_RE.match(value) is not None,
    "string_list": lambda value: isinstance(value, tuple),
}


def _json_literal(value: object) -> object:
    """A config default as written: a JSON scalar or a list of strings (kept as a tuple)."""
    if isinstance(value, list):
        if not all(isinstance(item, str) for item in value):
            raise ValueError("a list default must hold strings only")
        return tuple(check_text(item, "default", multiline=True) for item in value)
    if isinstance(value, str):
        return check_text(value, "default", multiline=True)
    if value is None or isinstance(value, bool | int):
        return value
    raise ValueError("default must be a string, an integer, true/false, a list of strings or null")


class ConfigField(Strict):
    """One owner-tunable setting of a capability (also per code, role and API key)."""

    key: Key
    label: Label = ""
    type: FieldType
    default: Annotated[DefaultValue, BeforeValidator(_json_literal)] = None
    min: SafeInt | None = None
    max: SafeInt | None = None
    description: Description = ""
    secret: StrictBool = False
    """The value is sealed at rest, shown to the owner as set or unset only, and reaches the
    child only as an environment variable (`Transport.env_from_config`); owner `config` only."""
    required: StrictBool = False
    """The plugin's children do not start while the value is unset; owner `config` only."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        refuse("ConfigField", list(self._problems()))
        return self

    def _problems(self) -> Iterator[tuple[str, str]]:
        if self.secret and self.type != "string":
            yield "secret", "only a string field may be secret"
        if self.secret and self.default is not None:
            yield "default", "a secret field has no default"
        if self.type != "int":
            for bound in ("min", "max"):
                if getattr(self, bound) is not None:
                    yield bound, f"{bound} applies to int fields only"
        if self.min is not None and self.max is not None and self.min > self.max:
            yield "max", f"max ({self.max}) is below min ({self.min})"
        if self.default is None:
            return
        if not _DEFAULT_FITS[self.type](self.default):
            yield "default", f"must be {_TYPE_WORDS[self.type]} (type {self.type})"
        elif isinstance(self.default, int) and not -SAFE_INT <= self.default <= SAFE_INT:
            yield "default", "is out of the range a JSON number holds exactly"
        elif self.min is not None and isinstance(self.default, int) and self.default < self.min:
            yield "default", f"{self.default} is below min ({self.min})"
        elif self.max is not None and isinstance(self.default, int) and self.default > self.max:
            yield "default", f"{self.default} is above max ({self.max})"


ConfigFields = Annotated[tuple[ConfigField, ...], unique("config key", "key")]


class OwnerTool(Strict):
    """A row of the owner door's table: `name` as the owner sees it, `tool` on the child."""

    name: DottedName
    tool: ToolName
    description: Description = ""
    input_schema: Annotated[dict[str, Any], BeforeValidator(check_tool_schema)] = Field(
        default_factory=lambda: {"type": "object"}
    )


class Quota(Strict):
    """Quota counted as rows of `collection` whose `subject_field` is the session's subject.

    A declaration missing a part loads (with a warning) but gates nothing: see
    `Manifest.quota_gate`.
    """

    config_key: Key | None = None
    collection: Key | None = None
    subject_field: Key | None = None
    tools: Annotated[tuple[ToolName, ...], unique("quota tool")] = ()
    """The tools that use the quota up; at zero only they hide and refuse, so the capability's
    other tools (listing or undoing what was used) stay. Empty: every tool of the capability."""

    def gates(self, tool: str) -> bool:
        return not self.tools or tool in self.tools

    def missing(self) -> list[str]:
        return [name for name in ("config_key", "collection", "subject_field") if getattr(self, name) is None]


class ClaimGate(Strict):
    """Answers that use one of `phrases` need a receipt of `tool` in the same turn."""

    tool: ToolName
    phrases: Annotated[tuple[Phrase, ...], Field(min_length=1)]


class ResourceLimits(Strict):
    """What one child of the plugin may use (`limits:`), each key optional. The host's setting
    of the same limit is both the default and the ceiling: a value above it is lowered to it,
    with a warning (`sandbox.budget`). The floors are the host settings' own."""

    memory_mb: Annotated[StrictInt, Field(ge=64, le=1 << 30)] | None = None
    """The sandbox's memory budget in MiB, its tmpfs included (MCP_HOST_CHILD_MEMORY_BYTES)."""
    cpu_seconds: Annotated[StrictInt, Field(ge=1, le=SAFE_INT)] | None = None
    """CPU seconds over the child's whole life; then SIGKILL (MCP_HOST_CHILD_CPU_SECONDS)."""
    processes: Annotated[StrictInt, Field(ge=4, le=1 << 22)] | None = None
    """Tasks (threads too) in the sandbox (MCP_HOST_CHILD_MAX_PROCESSES)."""
    open_files: Annotated[StrictInt, Field(ge=32, le=1 << 20)] | None = None
    """Open file descriptors per process (MCP_HOST_CHILD_MAX_OPEN_FILES)."""
    egress_connections: Annotated[StrictInt, Field(ge=1, le=1 << 16)] | None = None
    """Connections open at once through the host's egress proxy (MCP_HOST_EGRESS_CONNECTIONS)."""
    egress_mb_per_minute: Annotated[StrictInt, Field(ge=1, le=1 << 20)] | None = None
    """MiB through the egress proxy per rolling minute, both directions; past it the child's
    tunnels are slowed, not cut (MCP_HOST_EGRESS_MB_PER_MINUTE)."""

    def above(self, plugin_id: str, ceilings: Iterable[tuple[str, int, str]]) -> tuple[str, ...]:
        """One line per limit here above its host ceiling, saying what the plugin gets;
        `ceilings`: (key, the host's value, the host setting's variable)."""
        return tuple(
            f"{plugin_id}: limits.{key} {value} is above the host's ceiling ({variable}); it gets {ceiling}"
            for key, ceiling, variable in ceilings
            if (value := getattr(self, key)) is not None and value > ceiling
        )


class ConnectorSetting(Strict):
    """A value the owner gives when connecting a connector (a server URL, a password)."""

    key: Key
    label: Label = ""
    type: FieldType = "string"
    secret: StrictBool = False


_ACLS = ("always", "role_granted")


class Manifest(Strict):
    """A plugin's `manifest.yaml` (docs/design.md, "Plugins"). Only `id` is required.

    `acl` is fail-closed: absent or unknown reads as `role_granted` (an unknown value is a
    mistake that `read_manifest` reports). `category`, `verbs` and `settings` are present
    exactly when `kind` is `connector`.
    """

    id: PluginId
    kind: Literal["capability", "connector"] = "capability"
    title: Title = ""
    version: Version = ""
    description: Description = ""
    acl: Literal["always", "role_granted"] = "role_granted"
    requires: Annotated[tuple[Category, ...], unique("category")] = ()
    visitor_tools: Annotated[tuple[ToolName, ...], unique("tool name", fold=True)] = ()
    visitor_tool_requires: dict[ToolName, tuple[Requirement, ...]] = Field(default_factory=dict)
    owner_tools: Annotated[tuple[OwnerTool, ...], unique("owner tool", "name")] = ()
    config: ConfigFields = ()
    code_config: ConfigFields = ()
    role_config: ConfigFields = ()
    key_config: ConfigFields = ()
    quota: Quota | None = None
    claim_gate: ClaimGate | None = None
    transport: Transport | None = None
    category: Category | None = None
    verbs: Annotated[tuple[DottedName, ...], Field(min_length=1), unique("verb")] | None = None
    settings: Annotated[tuple[ConnectorSetting, ...], unique("setting", "key")] | None = None
    limits: ResourceLimits | None = None
    instances: Literal["shared", "per_session"] | None = None
    """How the plugin's children are shared: one for every session (`shared`), or one per
    visitor session plus one for the owner (`per_session`); absent, see `per_session`."""

    @field_validator("acl", mode="before")
    @classmethod
    def _fail_closed_acl(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return "role_granted"
        if isinstance(value, str) and value in _ACLS:
            return value
        _note(info, "mistakes", ("acl", f"unknown value {shown(value)} (always or role_granted); read as role_granted"))
        return "role_granted"

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Self:
        refuse("Manifest", list(checks.problems(self)))
        for mistake in checks.mistakes(self):
            _note(info, "mistakes", mistake)
        for message in checks.warnings(self):
            _note(info, "warnings", message)
        return self

    @property
    def per_session(self) -> bool:
        """Whether each visitor session gets its own child. Absent `instances`: shared when the
        plugin names host ops (only the plugin kit speaks the back-channel, and the kit scopes
        by session), else per session (a session-unaware server keeps one visitor's memory,
        roots and logs apart from another's)."""
        if self.instances is not None:
            return self.instances == "per_session"
        return not (self.transport is not None and self.transport.sandbox.host_ops)

    def quota_gate(self) -> Quota | None:
        """The quota to enforce: the declaration when it is complete and its key is declared
        where a limit is read (`code_config`, `key_config`), else None."""
        quota = self.quota
        if quota is None or quota.missing() or not checks.quota_limit_declared(self):
            return None
        return quota

    def config_lists(self) -> dict[str, tuple[ConfigField, ...]]:
        """The four config scopes by manifest key: config, code_config, role_config, key_config."""
        return {
            "config": self.config,
            "code_config": self.code_config,
            "role_config": self.role_config,
            "key_config": self.key_config,
        }


def _note(info: ValidationInfo, tier: Literal["mistakes", "warnings"], finding: object) -> None:
    """Keep a finding that does not stop the load, when the caller asked for them (`read_manifest`)."""
    if isinstance(info.context, dict) and isinstance(info.context.get(tier), list):
        info.context[tier].append(finding)
