"""Plugin manifests: the typed model of `manifest.yaml` and the functions that read it.

Above: `plugins` (finding and loading plugin folders), and through it the registry, the
catalogue and `mcp-host check`. Below: `text_safety` (which text and which JSON Schemas are
safe; `check_text` and `check_tool_schema` are re-exported here for callers that already
import them from this module) and the YAML files, read with the plugin contract's strict
loader (`mcp_host_kit.contract.read_yaml`, which the kit reads manifests with too) —
duplicate keys and aliases are refused and scalars resolve as in YAML 1.2 (`no` stays a
string, `10:30` stays a string).

Every model forbids unknown keys and is frozen. A manifest that does not validate becomes one
`ManifestError` per problem, naming the file and the dotted field (`owner_tools.0.input_schema`;
an unknown key is named by its own location, e.g. `transport.sandbox.colour`).

Three tiers of problem: *errors* stop the load; *mistakes* (an unknown `acl`, a quota or a
requirement naming a tool that is not a visitor tool, a quota key no access code or API key
can set) load, read fail-closed, and are errors to `mcp-host check`; *warnings* load and are
only shown.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from mcp_host.errors import ManifestError
from mcp_host_kit.contract import MANIFEST_NAME, MAX_MANIFEST_BYTES, OP_NAMES, YamlProblem, loc_part, read_yaml

from .config_refs import reference_problems
from .text_safety import MAX_DESCRIPTION_BYTES, check_text, check_tool_schema, shown

__all__ = [
    "collision_key",
    "CATEGORY_RE",
    "HOST_OPS",
    "MANIFEST_NAME",
    "PLUGIN_ID_RE",
    "TOOL_NAME_RE",
    "ClaimGate",
    "ConfigField",
    "ConnectorSetting",
    "Manifest",
    "ManifestResult",
    "OwnerTool",
    "Quota",
    "ResourceLimits",
    "Sandbox",
    "Transport",
    "check_text",
    "check_tool_schema",
    "load_manifest",
    "read_manifest",
    "url_host",
]

MAX_TITLE_CHARS = 200
# Integers a JSON peer (and jsonb) reads without loss.
_SAFE_INT = 2**53 - 1

# Every grammar is anchored with \A…\Z so `.match`, `.search` and `.fullmatch` agree
# (a `$` would let a trailing newline through).
PLUGIN_ID_RE = re.compile(r"\A(?=.{1,64}\Z)[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*\Z")
CATEGORY_RE = re.compile(r"\A[a-z][a-z0-9_]{0,31}\Z")
TOOL_NAME_RE = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")


def collision_key(name: str) -> str:
    """What two tool names that collide have in common: names that differ only in case, `-` or
    `_` collide (`Get_Item`, `get-item`), as exact ones do. Tool names are ASCII
    (`TOOL_NAME_RE`, checked before any tool is shown)."""
    return name.casefold().replace("-", "_")


_DOTTED_NAME_RE = re.compile(r"\A[a-z][a-z0-9_.]{0,63}\Z")
_KEY_RE = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
_HOST_OP_RE = re.compile(r"\A(?=.{1,64}\Z)[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*\Z")
_REQUIREMENT_RE = re.compile(r"\A[a-z][a-z0-9_]{0,31}:[a-z][a-z0-9_.]{0,63}\Z")
_ENV_KEY_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_TIME_RE = re.compile(r"\A(?:[01][0-9]|2[0-3]):[0-5][0-9]\Z")
_URL_RE = re.compile(r"\Ahttps?://[\x21-\x7e]+\Z")
_RESERVED_ENV_PREFIX = "MCP_HOST_"

T = TypeVar("T")

# The host ops a manifest may name (docs/design.md "Plugin ABI"; the plugin contract's `OP_NAMES`);
# `backchannel.ops` implements exactly these. Naming any other op is a load error: a plugin
# must not start expecting an op it lacks.
HOST_OPS = OP_NAMES


# ---------------------------------------------------------------------------------------------
# Text and names


def _text(field: str, *, multiline: bool = False, max_bytes: int = MAX_DESCRIPTION_BYTES) -> AfterValidator:
    return AfterValidator(lambda value: check_text(value, field, multiline=multiline, max_bytes=max_bytes))


def _grammar(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{shown(value)} is not {what}")
        return value

    return AfterValidator(check)


PluginId = Annotated[
    StrictStr,
    _grammar(PLUGIN_ID_RE, "a plugin id (dot-joined words of a-z 0-9 _, at most 64)"),
]
Category = Annotated[StrictStr, _grammar(CATEGORY_RE, "a category name (a-z 0-9 _, at most 32)")]
ToolName = Annotated[StrictStr, _grammar(TOOL_NAME_RE, "a tool name (A-Z a-z 0-9 _ -, at most 64)")]
DottedName = Annotated[StrictStr, _grammar(_DOTTED_NAME_RE, "a name of a-z 0-9 _ . (at most 64)")]
Key = Annotated[StrictStr, _grammar(_KEY_RE, "a key (a-z 0-9 _, starting with a letter, at most 64)")]


def _known_op(value: str) -> str:
    if value not in HOST_OPS:
        raise ValueError(f"{shown(value)} is not a host op this host offers ({', '.join(sorted(HOST_OPS))})")
    return value


HostOp = Annotated[StrictStr, _grammar(_HOST_OP_RE, "a host op name (e.g. store.insert)"), AfterValidator(_known_op)]
Requirement = Annotated[StrictStr, _grammar(_REQUIREMENT_RE, 'a requirement of the form "category:action"')]
Title = Annotated[StrictStr, StringConstraints(max_length=MAX_TITLE_CHARS), _text("title")]
Label = Annotated[StrictStr, StringConstraints(max_length=MAX_TITLE_CHARS), _text("label")]
Version = Annotated[StrictStr, StringConstraints(max_length=64), _text("version")]
Description = Annotated[StrictStr, _text("description", multiline=True)]
Phrase = Annotated[StrictStr, StringConstraints(min_length=1, max_length=MAX_TITLE_CHARS), _text("phrase")]
SafeInt = Annotated[StrictInt, Field(ge=-_SAFE_INT, le=_SAFE_INT)]


# ---------------------------------------------------------------------------------------------
# Errors raised from validators that know a more precise location than pydantic's


def _problem(at: str, message: str) -> PydanticCustomError:
    """An error `at` a dotted location below the one pydantic reports."""
    return PydanticCustomError("manifest", "{problem}", {"problem": message, "at": at})


def _refuse(title: str, problems: list[tuple[str, str]]) -> None:
    """Raise every (dotted location, message) of `problems` at once, if there are any; pydantic
    merges them into the validation error, each below the location of the model that raised."""
    if problems:
        raise ValidationError.from_exception_data(
            title, [{"type": _problem(at, message), "loc": (), "input": None} for at, message in problems]
        )


def _unique(what: str, attr: str | None = None, *, fold: bool = False) -> AfterValidator:
    """Refuse a list whose items (or their `attr`) repeat; `fold` compares case-insensitively."""

    def check(items: tuple[T, ...]) -> tuple[T, ...]:
        seen: set[str] = set()
        for index, item in enumerate(items):
            name = str(getattr(item, attr) if attr else item)
            folded = name.casefold() if fold else name
            if folded in seen:
                at = f"{index}.{attr}" if attr else str(index)
                raise _problem(at, f"duplicate {what} {shown(name)}")
            seen.add(folded)
        return items

    return AfterValidator(check)


# ---------------------------------------------------------------------------------------------
# The model


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


class ConfigField(_Model):
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
        _refuse("ConfigField", list(self._problems()))
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
        elif isinstance(self.default, int) and not -_SAFE_INT <= self.default <= _SAFE_INT:
            yield "default", "is out of the range a JSON number holds exactly"
        elif self.min is not None and isinstance(self.default, int) and self.default < self.min:
            yield "default", f"{self.default} is below min ({self.min})"
        elif self.max is not None and isinstance(self.default, int) and self.default > self.max:
            yield "default", f"{self.default} is above max ({self.max})"


ConfigFields = Annotated[tuple[ConfigField, ...], _unique("config key", "key")]


class OwnerTool(_Model):
    """A row of the owner door's table: `name` as the owner sees it, `tool` on the child."""

    name: DottedName
    tool: ToolName
    description: Description = ""
    input_schema: Annotated[dict[str, Any], BeforeValidator(check_tool_schema)] = Field(
        default_factory=lambda: {"type": "object"}
    )


class Quota(_Model):
    """Quota counted as rows of `collection` whose `subject_field` is the session's subject.

    A declaration missing a part loads (with a warning) but gates nothing: see
    `Manifest.quota_gate`.
    """

    config_key: Key | None = None
    collection: Key | None = None
    subject_field: Key | None = None
    tools: Annotated[tuple[ToolName, ...], _unique("quota tool")] = ()
    """The tools that use the quota up; at zero only they hide and refuse, so the capability's
    other tools (listing or undoing what was used) stay. Empty: every tool of the capability."""

    def gates(self, tool: str) -> bool:
        return not self.tools or tool in self.tools

    def missing(self) -> list[str]:
        return [name for name in ("config_key", "collection", "subject_field") if getattr(self, name) is None]


class ClaimGate(_Model):
    """Answers that use one of `phrases` need a receipt of `tool` in the same turn."""

    tool: ToolName
    phrases: Annotated[tuple[Phrase, ...], Field(min_length=1)]


class Sandbox(_Model):
    """What a stdio child may reach beyond its own folder."""

    host_ops: Annotated[tuple[HostOp, ...], _unique("host op")] = ()
    allow_net: StrictBool = False
    workspace: StrictBool = False


class ResourceLimits(_Model):
    """What one child of the plugin may use (`limits:`), each key optional. The host's setting
    of the same limit is both the default and the ceiling: a value above it is lowered to it,
    with a warning (`sandbox.budget`). The floors are the host settings' own."""

    memory_mb: Annotated[StrictInt, Field(ge=64, le=1 << 30)] | None = None
    """The sandbox's memory budget in MiB, its tmpfs included (MCP_HOST_CHILD_MEMORY_BYTES)."""
    cpu_seconds: Annotated[StrictInt, Field(ge=1, le=_SAFE_INT)] | None = None
    """CPU seconds over the child's whole life; then SIGKILL (MCP_HOST_CHILD_CPU_SECONDS)."""
    processes: Annotated[StrictInt, Field(ge=4, le=1 << 22)] | None = None
    """Tasks (threads too) in the sandbox (MCP_HOST_CHILD_MAX_PROCESSES)."""
    open_files: Annotated[StrictInt, Field(ge=32, le=1 << 20)] | None = None
    """Open file descriptors per process (MCP_HOST_CHILD_MAX_OPEN_FILES)."""


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("contains NUL")
    return value


def _command(value: str) -> str:
    if not value or value.startswith("-"):
        raise ValueError("must be a program name or path, not empty and not starting with '-'")
    return check_text(value, "command", multiline=False, max_bytes=4096)


def _env_key(value: str) -> str:
    if not _ENV_KEY_RE.match(value):
        raise ValueError(f"{shown(value)} is not an environment variable name")
    if value.startswith(_RESERVED_ENV_PREFIX):
        raise ValueError(f"{shown(value)} is reserved for the host ({_RESERVED_ENV_PREFIX}*)")
    return value


def _url(value: str) -> str:
    if len(value) > 2048 or not _URL_RE.match(value):
        raise ValueError("must be an http:// or https:// URL without spaces or control characters")
    return value


Arg = Annotated[StrictStr, StringConstraints(max_length=4096), AfterValidator(_no_nul)]

# Headers the host's HTTP client and the MCP transport set themselves; a manifest may not.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "accept",
        "connection",
        "transfer-encoding",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "last-event-id",
    }
)
_HEADER_NAME_RE = re.compile(r"\A[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}\Z")
_HEADER_VALUE_RE = re.compile(r"\A[\x20-\x7e]{0,4096}\Z")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME_RE = re.compile(rf"\A(?=.{{1,253}}\Z)(?:{_LABEL}\.)*{_LABEL}\Z|\A\[[0-9A-Fa-f:.]{{2,45}}\]\Z")


def _header_name(value: str) -> str:
    if not _HEADER_NAME_RE.match(value):
        raise ValueError(f"{shown(value)} is not an HTTP header name")
    if value.casefold() in _RESERVED_HEADERS or value.casefold().startswith("mcp-param-"):
        raise ValueError(f"{shown(value)} is set by the host's MCP client, not by a manifest")
    return value


def _header_value(value: str) -> str:
    if not _HEADER_VALUE_RE.match(value):
        raise ValueError("a header value is printable ASCII without control characters, at most 4096")
    return value


def _host_name(value: str) -> str:
    if not _HOST_NAME_RE.match(value):
        raise ValueError(f"{shown(value)} is not a host name (or an IP address, an IPv6 one in [brackets])")
    return value.casefold()


HeaderValue = Annotated[StrictStr, AfterValidator(_header_value)]
HostName = Annotated[StrictStr, AfterValidator(_host_name)]


def url_host(url: str) -> str | None:
    """The host part of `url`, lower-cased (an IPv6 address in brackets), or None."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        return None
    if not host:
        return None
    return f"[{host}]" if ":" in host else host.casefold()


class Transport(_Model):
    """How the host reaches the plugin's MCP server: a sandboxed stdio child or a remote URL."""

    kind: Literal["stdio", "http"] = "stdio"
    command: Annotated[StrictStr, AfterValidator(_command)] | None = None
    args: Annotated[tuple[Arg, ...], Field(max_length=256)] = ()
    """May hold `${config.KEY}`, the owner's value of a config field at each start (`config_refs`)."""
    env: Annotated[dict[Annotated[StrictStr, AfterValidator(_env_key)], Arg], Field(max_length=256)] = Field(
        default_factory=dict
    )
    """Values may hold `${config.KEY}`, as `args` (a secret field too: it stays off command lines)."""
    url: Annotated[StrictStr, AfterValidator(_url)] | None = None
    sandbox: Sandbox = Field(default_factory=Sandbox)
    env_from_config: Annotated[dict[Annotated[StrictStr, AfterValidator(_env_key)], Key], Field(max_length=64)] = Field(
        default_factory=dict
    )
    """Environment variable -> owner `config` key: the owner's value (a secret opened) is put in
    the child's environment when it starts; unset and not required, the variable is left out."""
    headers: Annotated[dict[Annotated[StrictStr, AfterValidator(_header_name)], HeaderValue], Field(max_length=64)] = (
        Field(default_factory=dict)
    )
    """http only: header name -> value, sent with every request to the remote server."""
    headers_from_config: Annotated[
        dict[Annotated[StrictStr, AfterValidator(_header_name)], Key], Field(max_length=16)
    ] = Field(default_factory=dict)
    """http only: header name -> owner `config` key whose value (a secret opened) is the header's
    value (e.g. `Authorization` -> a value `Bearer …`); unset and not required, it is left out."""
    timeout_s: Annotated[StrictInt | StrictFloat, Field(gt=0, le=3600)] | None = None
    """http only: how long one HTTP exchange with the remote server may take (connect, read);
    absent: the host's call timeout."""
    allowed_hosts: Annotated[tuple[HostName, ...], Field(max_length=32), _unique("allowed host", fold=True)] = ()
    """http only: the host names the host may connect to for this plugin; the url's host must be
    one of them, and a redirect elsewhere is refused. Absent: the url's host alone. Naming a host
    here lets it be reached at public addresses only (`allow_private`)."""
    allow_private: Annotated[tuple[HostName, ...], Field(max_length=32), _unique("private host", fold=True)] = ()
    """http only: the hosts (names or addresses) that may be reached at a loopback or private
    address; a link-local or cloud-metadata address (169.254.169.254, fd00:ec2::254) only when it
    is named here itself (`plugins.addresses`). Absent: public addresses only."""

    def reachable_hosts(self) -> tuple[str, ...]:
        """The hosts an http transport's requests may go to: `allowed_hosts`, else the url's."""
        if self.allowed_hosts:
            return self.allowed_hosts
        host = url_host(self.url) if self.url is not None else None
        return (host,) if host is not None else ()

    @model_validator(mode="after")
    def _fits_kind(self) -> Self:
        if self.kind == "stdio":
            if self.command is None:
                raise _problem("command", "required for a stdio transport")
            if self.url is not None:
                raise _problem("url", "only an http transport takes a url")
            for name in self.env_from_config:
                if name in self.env:
                    raise _problem(f"env_from_config.{name}", f"{name} is set in env too")
            for name in ("headers", "headers_from_config", "timeout_s", "allowed_hosts", "allow_private"):
                if name in self.model_fields_set:
                    raise _problem(name, f"only an http transport takes {name}")
            return self
        if self.url is None:
            raise _problem("url", "required for an http transport")
        for name in ("command", "args", "env", "sandbox", "env_from_config"):
            if name in self.model_fields_set:
                raise _problem(name, f"an http transport takes no {name}")
        for name in self.headers_from_config:
            if name.casefold() in {h.casefold() for h in self.headers}:
                raise _problem(f"headers_from_config.{name}", f"{name} is set in headers too")
        host = url_host(self.url)
        if host is None:
            raise _problem("url", "has no host")
        if self.allowed_hosts and host not in self.allowed_hosts:
            raise _problem("url", f"its host {shown(host)} is not in allowed_hosts")
        return self


class ConnectorSetting(_Model):
    """A value the owner gives when connecting a connector (a server URL, a password)."""

    key: Key
    label: Label = ""
    type: FieldType = "string"
    secret: StrictBool = False


_ACLS = ("always", "role_granted")
_CONNECTOR_FIELDS = ("category", "verbs", "settings")


class Manifest(_Model):
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
    requires: Annotated[tuple[Category, ...], _unique("category")] = ()
    visitor_tools: Annotated[tuple[ToolName, ...], _unique("tool name", fold=True)] = ()
    visitor_tool_requires: dict[ToolName, tuple[Requirement, ...]] = Field(default_factory=dict)
    owner_tools: Annotated[tuple[OwnerTool, ...], _unique("owner tool", "name")] = ()
    config: ConfigFields = ()
    code_config: ConfigFields = ()
    role_config: ConfigFields = ()
    key_config: ConfigFields = ()
    quota: Quota | None = None
    claim_gate: ClaimGate | None = None
    transport: Transport | None = None
    category: Category | None = None
    verbs: Annotated[tuple[DottedName, ...], Field(min_length=1), _unique("verb")] | None = None
    settings: Annotated[tuple[ConnectorSetting, ...], _unique("setting", "key")] | None = None
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
        problems = itertools.chain(_connector_problems(self), _quota_problems(self), _config_env_problems(self))
        _refuse("Manifest", list(problems))
        for mistake in _mistakes(self):
            _note(info, "mistakes", mistake)
        for message in itertools.chain(_mismatches(self), _quota_gaps(self)):
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
        if quota is None or quota.missing() or not _quota_declared(self, _QUOTA_SCOPES):
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


def _config_env_problems(manifest: Manifest) -> Iterator[tuple[str, str]]:
    """Secret and required fields are the owner's (`config`); `env_from_config` names them."""
    for scope, fields in manifest.config_lists().items():
        if scope == "config":
            continue
        for index, field in enumerate(fields):
            for flag in ("secret", "required"):
                if getattr(field, flag):
                    yield f"{scope}.{index}.{flag}", f"only the owner's config (config) has {flag} fields"
    owner_keys = {field.key for field in manifest.config}
    env = manifest.transport.env_from_config if manifest.transport is not None else {}
    for name, key in env.items():
        if key not in owner_keys:
            yield f"transport.env_from_config.{name}", f"{shown(key)} is not a key declared in config"
    headers = manifest.transport.headers_from_config if manifest.transport is not None else {}
    for name, key in headers.items():
        if key not in owner_keys:
            yield f"transport.headers_from_config.{name}", f"{shown(key)} is not a key declared in config"
    yield from reference_problems(manifest)  # ${config.KEY} in args and env


def _connector_problems(manifest: Manifest) -> Iterator[tuple[str, str]]:
    for name in _CONNECTOR_FIELDS:
        present = getattr(manifest, name) is not None
        if manifest.kind == "connector" and not present:
            yield name, "required when kind is connector"
        if manifest.kind != "connector" and present:
            yield name, "only a connector declares this"


# Where a quota's limit is read: the access code's config for a code session, the API key's for
# an API-key session (`quota.py`); a key declared only for the owner or a role limits nothing.
_QUOTA_SCOPES = ("code_config", "key_config")


def _quota_declared(manifest: Manifest, scopes: tuple[str, ...] | None = None) -> list[tuple[str, ConfigField]]:
    key = manifest.quota.config_key if manifest.quota else None
    return [
        (scope, f)
        for scope, fields in manifest.config_lists().items()
        if scopes is None or scope in scopes
        for f in fields
        if f.key == key
    ]


def _quota_problems(manifest: Manifest) -> Iterator[tuple[str, str]]:
    if manifest.quota is None or manifest.quota.config_key is None:
        return
    key = manifest.quota.config_key
    for scope, field in _quota_declared(manifest):
        if field.type != "int":
            yield "quota.config_key", f"{shown(key)} is a {field.type} field in {scope}; a quota needs int"


def _quota_gaps(manifest: Manifest) -> Iterator[str]:
    """A quota that cannot be enforced: it loads, gates nothing, and says why."""
    quota = manifest.quota
    if quota is None:
        return
    if quota.missing():
        yield f"quota: incomplete (missing {', '.join(quota.missing())}); no quota is enforced"


def _mistakes(manifest: Manifest) -> Iterator[tuple[str, str]]:
    """(dotted field, problem) of declarations that load but do not do what their author meant:
    the tool they name is not a visitor tool, or the quota's limit can never be set."""
    listed = set(manifest.visitor_tools)
    quota = manifest.quota
    if quota is not None:
        for index, tool in enumerate(quota.tools):
            if tool not in listed:
                yield f"quota.tools.{index}", f"{shown(tool)} is not in visitor_tools; it uses up no quota"
        if quota.config_key is not None and not _quota_declared(manifest, _QUOTA_SCOPES):
            yield (
                "quota.config_key",
                f"{shown(quota.config_key)} is not declared in code_config or key_config, where a quota's"
                " limit is set; no quota is enforced",
            )
    for tool in manifest.visitor_tool_requires:
        if tool not in listed:
            yield f"visitor_tool_requires.{loc_part(tool)}", f"{shown(tool)} is not in visitor_tools"


def _mismatches(manifest: Manifest) -> Iterator[str]:
    """Declarations that point at nothing; loadable (children report the real tools) but suspect."""
    listed = set(manifest.visitor_tools)
    for tool, requirements in manifest.visitor_tool_requires.items():
        for requirement in requirements:
            category = requirement.partition(":")[0]
            if category not in manifest.requires:
                yield f"visitor_tool_requires: {shown(tool)} needs {shown(category)}, not in requires"
    gate = manifest.claim_gate
    if gate is not None and listed and gate.tool not in listed:
        yield f"claim_gate: {shown(gate.tool)} is not in visitor_tools"
    transport = manifest.transport
    if manifest.limits is not None and (transport is None or transport.kind != "stdio"):
        yield "limits: only a stdio child has them; this plugin starts none"


# ---------------------------------------------------------------------------------------------
# Reading the file


def _read_yaml(path: Path) -> object:
    """The parsed YAML document of `path` (the plugin contract's strict reader); every failure
    is a `ManifestError`."""
    try:
        return read_yaml(path, max_bytes=MAX_MANIFEST_BYTES)
    except OSError as exc:
        raise ManifestError(str(path), "", f"cannot read {MANIFEST_NAME}: {exc.strerror or exc}") from None
    except YamlProblem as exc:
        raise ManifestError(str(path), exc.field, exc.problem) from None


_MESSAGES: dict[str, str] = {
    "missing": "required",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be true or false",
    "invalid_key": "keys must be strings",
}


def _message(error: ErrorDetails) -> str:
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return f"unknown key {shown(error['loc'][-1])}"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}"
    if kind == "too_short":
        return "must not be empty"
    if kind in ("too_long", "string_too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return f"must have at most {ctx['max_length']} {unit}"
    if kind == "value_error":
        return str(ctx["error"])
    if kind in _MESSAGES:
        return _MESSAGES[kind]
    return str(error["msg"])


def _location(error: ErrorDetails) -> str:
    parts: list[object] = [part for part in error["loc"] if part != "[key]"]
    at = (error.get("ctx") or {}).get("at") if error["type"] == "manifest" else None
    if at:
        parts.extend(at.split("."))
    return ".".join(loc_part(part) for part in parts)


@dataclass(frozen=True)
class ManifestResult:
    """What reading one plugin folder gave: a manifest, or the problems that stopped it.

    `mistakes` do not stop the load (the host reads them fail-closed) but `mcp-host check`
    reports them as errors; `warnings` are only shown.
    """

    path: Path
    manifest: Manifest | None
    errors: tuple[ManifestError, ...]
    warnings: tuple[str, ...]
    mistakes: tuple[ManifestError, ...] = ()


def read_manifest(folder: Path) -> ManifestResult:
    """Read and validate `folder/manifest.yaml`, collecting every problem; never raises.

    `manifest` is set exactly when `errors` is empty. `mistakes` found before an error stopped
    the load (an unknown `acl`) are kept too, so a linter shows them in the same run.
    """
    path = folder / MANIFEST_NAME
    try:
        data = _read_yaml(path)
    except ManifestError as exc:
        return ManifestResult(path, None, (exc,), ())
    if not isinstance(data, dict):
        error = ManifestError(str(path), "", "must be a mapping of manifest keys")
        return ManifestResult(path, None, (error,), ())
    warnings: list[str] = []
    found: list[tuple[str, str]] = []
    try:
        manifest = Manifest.model_validate(data, context={"warnings": warnings, "mistakes": found})
    except ValidationError as exc:
        errors = tuple(ManifestError(str(path), _location(e), _message(e)) for e in exc.errors())
        manifest = None
    else:
        errors = ()
    mistakes = tuple(ManifestError(str(path), field, problem) for field, problem in found)
    return ManifestResult(path, manifest, errors, tuple(warnings) if manifest else (), mistakes)


def load_manifest(folder: Path) -> Manifest:
    """The manifest of `folder`; raises the first `ManifestError` if it does not load."""
    result = read_manifest(folder)
    if result.manifest is None:
        raise result.errors[0]
    return result.manifest
