"""`Settings`: the process's own settings (where it listens, its data and plugin folders) and
one model of each group (`groups`), read from the keyword arguments and `MCP_HOST_<FLAT NAME>`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from .groups import (
    AccessSettings,
    BackchannelSettings,
    ChildLogSettings,
    ChildrenSettings,
    ConnectorSettings,
    DatabaseSettings,
    EgressSettings,
    Group,
    HttpSettings,
    OAuthSettings,
    PolicySettings,
    PrincipalSettings,
    ProtocolSessionSettings,
    RetentionSettings,
    SandboxSettings,
    StoreSettings,
    WireSettings,
)

__all__ = ["Settings", "default_data_dir", "flat_names"]


def default_data_dir() -> Path:
    """`$XDG_DATA_HOME/mcp-host`, else `~/.local/share/mcp-host`."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mcp-host"


def _default_builtin_dir() -> Path | None:
    candidate = Path(__file__).resolve().parents[2] / "capabilities"
    return candidate if candidate.is_dir() else None


class Settings(BaseSettings):
    """Host settings; environment prefix `MCP_HOST_`, one flat variable per setting."""

    model_config = SettingsConfigDict(env_prefix="MCP_HOST_", extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    data_dir: Path = Field(default_factory=default_data_dir)
    plugins: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    # The builtin plugins; by default the `capabilities/` folder beside the package.
    builtin_dir: Path | None = Field(default_factory=lambda: _default_builtin_dir())
    # The URL visitors are told to use; derived from host and port when unset.
    public_url: str | None = None
    # Extra Host header values the HTTP endpoints accept (DNS-rebinding protection).
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # The URL other replicas on the same database reach this one at (a retry parked here is
    # forwarded to it); unset, the address the host listens on (`host_file.listen_url`).
    replica_url: str | None = None
    # A bearer token `GET /metrics` accepts besides the owner token (for a Prometheus that
    # should hold nothing more); unset, only the owner token.
    metrics_token: SecretStr | None = None
    # `json`: log lines as JSON objects (time, level, logger, message, trace_id when a span is
    # current) for a log pipeline; `text`: the plain lines (app/telemetry.py).
    log_format: Literal["text", "json"] = "text"
    # A node (issue 17): the parent host's base URL (`serve --parent URL`) and the node grant's
    # token its owner minted (`grant_create`); the parent's granted capabilities become this
    # host's remote capabilities. Unset: this host has no parent.
    parent_url: str | None = None
    parent_token: SecretStr | None = None

    wire: WireSettings = Field(default_factory=WireSettings)
    http: HttpSettings = Field(default_factory=HttpSettings)
    protocol_sessions: ProtocolSessionSettings = Field(default_factory=ProtocolSessionSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    egress: EgressSettings = Field(default_factory=EgressSettings)
    children: ChildrenSettings = Field(default_factory=ChildrenSettings)
    principals: PrincipalSettings = Field(default_factory=PrincipalSettings)
    child_logs: ChildLogSettings = Field(default_factory=ChildLogSettings)
    access: AccessSettings = Field(default_factory=AccessSettings)
    connectors: ConnectorSettings = Field(default_factory=ConnectorSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    backchannel: BackchannelSettings = Field(default_factory=BackchannelSettings)
    oauth: OAuthSettings = Field(default_factory=OAuthSettings)

    if TYPE_CHECKING:
        # What `BaseSettings.__init__` takes: fields, groups (models or mappings) and flat names
        # (`child_idle_timeout_s=3`), all checked when the settings are built. Without this, a
        # type checker would allow only the fields, as the generated signature lists them.
        def __init__(self, **values: Any) -> None: ...

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments first, then MCP_HOST_* (no dotenv file or secrets dir is configured).
        return _GroupedInit(settings_cls, init_settings), _FlatEnvironment(settings_cls)

    @field_validator("plugins", mode="before")
    @classmethod
    def _split_paths(cls, value: object) -> object:
        if isinstance(value, str):
            return [Path(p) for p in value.split(os.pathsep) if p]
        return value

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [h.strip() for h in value.split(",") if h.strip()]
        return value

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")


@cache
def _groups() -> dict[str, dict[str, str]]:
    """Each group → its fields → their flat names."""
    groups: dict[str, dict[str, str]] = {}
    for group, info in Settings.model_fields.items():
        model = info.annotation
        if isinstance(model, type) and issubclass(model, Group):
            flats = groups[group] = {}
            for name, field in model.model_fields.items():
                alias = field.validation_alias
                assert alias is None or isinstance(alias, str)
                flats[name] = alias or name
    return groups


def flat_names() -> dict[str, tuple[str | None, str]]:
    """Each flat name (`MCP_HOST_<FLAT NAME>`, `Settings(<flat name>=…)`) → (its group or None, field)."""
    groups = _groups()
    names: dict[str, tuple[str | None, str]] = {
        name: (None, name) for name in Settings.model_fields if name not in groups
    }
    for group, flats in groups.items():
        names.update({flat: (group, name) for name, flat in flats.items()})
    return names


def _grouped(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with every grouped setting under its group, keyed by its flat name.

    Settings may come flat (`child_idle_timeout_s=3`) or as a group (a mapping or a model,
    keyed by field name or flat name); a flat one wins over the same one in a group. One key
    for each setting, whatever the source, so sources merge key by key and an error names
    the variable. `sandbox` is both a group and the flat name of its mode: a mapping or a
    model is the group, anything else the mode.
    """
    out = dict(values)
    for group, flats in _groups().items():
        members: dict[str, Any] = {}
        given = out.get(group)
        if isinstance(given, (Mapping, BaseModel)):
            whole: dict[str, Any] = dict(given)
            members = {flats.get(key, key): value for key, value in whole.items()}
            del out[group]
        members.update({flat: out.pop(flat) for flat in flats.values() if flat in out})
        if members:
            out[group] = members
    return out


class _GroupedInit(PydanticBaseSettingsSource):
    """The keyword arguments of `Settings(...)`, flat names moved into their groups."""

    def __init__(self, settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._init = init

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ hands over every value at once

    def __call__(self) -> dict[str, Any]:
        return _grouped(self._init())


class _FlatEnvironment(EnvSettingsSource):
    """`MCP_HOST_<FLAT NAME>` for every setting, into its group; strings as given."""

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for flat in flat_names():
            value = self.env_vars.get(self._apply_case_sensitive(f"{self.env_prefix}{flat}"))
            if value is not None:
                found[flat] = value
        return _grouped(found)
