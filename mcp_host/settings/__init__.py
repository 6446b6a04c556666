"""The host's settings: one `BaseSettings`, the only code that reads the environment.

Every limit the host enforces is a named setting here, so a test can pin its default and an
operator can tune it. The command line overrides the environment.

The process's own settings (where it listens, its data and plugin folders) sit at the top; the
rest are grouped by the part of the host that uses them, one model per group, read as
`settings.children.idle_timeout_s`. Each setting is still read from one flat variable,
`MCP_HOST_<FLAT NAME>`, where the flat name is the field's `validation_alias` when it has one
(`child_idle_timeout_s`), else its name; `Settings(child_idle_timeout_s=3)` works the same
way, and a bad value is reported under its flat name (`children.child_idle_timeout_s`).
`flat_names()` lists them all.

The groups are in `groups`, `Settings` and how it reads them in `host`, `OtelSettings` in `otel`.
"""

from .groups import (
    AccessSettings,
    BackchannelSettings,
    ChildLogSettings,
    ChildrenSettings,
    ConnectorSettings,
    DatabaseSettings,
    EgressSettings,
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
from .host import Settings, default_data_dir, flat_names
from .otel import OtelSettings

__all__ = [
    "AccessSettings",
    "BackchannelSettings",
    "ChildLogSettings",
    "ChildrenSettings",
    "ConnectorSettings",
    "DatabaseSettings",
    "EgressSettings",
    "HttpSettings",
    "OAuthSettings",
    "OtelSettings",
    "PolicySettings",
    "PrincipalSettings",
    "ProtocolSessionSettings",
    "RetentionSettings",
    "SandboxSettings",
    "Settings",
    "StoreSettings",
    "WireSettings",
    "default_data_dir",
    "flat_names",
]
