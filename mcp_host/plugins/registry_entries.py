"""MCP registry entries (`server.json`): the typed model of one, and the stdio package the host
can install from it.

Above: the installer (`mcp-host plugin add server.json`), which installs the package with npm
or pip and declares its required and secret settings as owner config. Below: `source_json`.

The format is the MCP registry's (github.com/modelcontextprotocol/registry,
`server.schema.json`): only what the host reads is modelled and other keys are ignored, since
the schema grows. Remote-only entries (`remotes`: SSE or streamable HTTP) and packages from
other registries (OCI, NuGet, MCPB) are refused by `stdio_package` with one sentence. The
schema names no host a package's server reaches (no network field: `install_bundle` says what
that means for its egress).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator, model_validator

from mcp_host.errors import InvalidArguments

from .source_json import parse_document
from .text_safety import check_text, shown

__all__ = [
    "EnvironmentVariable",
    "PackageArgument",
    "RegistryPackage",
    "RegistryServer",
    "StdioPackage",
    "parse_server_json",
    "stdio_package",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


def _line(value: str | None) -> str | None:
    return None if value is None else check_text(value, "the text", multiline=False, max_bytes=4096)


def _text(value: str | None) -> str | None:
    return None if value is None else check_text(value, "the text")


class _Input(_Model):
    """The fields every registry input shares (`Input` in the schema)."""

    description: StrictStr | None = Field(default=None, max_length=8192)
    value: StrictStr | None = Field(default=None, max_length=4096)
    default: StrictStr | None = Field(default=None, max_length=4096)
    is_required: StrictBool = Field(default=False, alias="isRequired")
    is_secret: StrictBool = Field(default=False, alias="isSecret")
    format: StrictStr | None = None
    choices: list[StrictStr] | None = None

    @field_validator("value", "default")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        return _line(value)

    @field_validator("description")
    @classmethod
    def _description(cls, value: str | None) -> str | None:
        return _text(value)

    @property
    def resolved(self) -> str | None:
        """The fixed `value`, else the `default`, else None (the owner must give one)."""
        return self.value if self.value is not None else self.default


class PackageArgument(_Input):
    """One `packageArguments` entry: `positional` (a bare value) or `named` (`--flag value`)."""

    type: Literal["positional", "named"]
    name: StrictStr | None = Field(default=None, max_length=256)
    value_hint: StrictStr | None = Field(default=None, alias="valueHint", max_length=256)
    is_repeated: StrictBool = Field(default=False, alias="isRepeated")

    @field_validator("name", "value_hint")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return _line(value)

    @model_validator(mode="after")
    def _named_has_name(self) -> PackageArgument:
        if self.type == "named" and not self.name:
            raise ValueError("a named argument needs a name")
        return self


class EnvironmentVariable(_Input):
    """One `environmentVariables` entry: a setting the server reads from its environment."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class _Transport(_Model):
    type: StrictStr


class RegistryPackage(_Model):
    """One `packages` entry (`Package` in the schema)."""

    registry_type: StrictStr = Field(alias="registryType", max_length=32)
    registry_base_url: StrictStr | None = Field(default=None, alias="registryBaseUrl", max_length=2048)
    identifier: StrictStr = Field(min_length=1, max_length=256)
    version: StrictStr | None = Field(default=None, max_length=128)
    transport: _Transport | None = None
    package_arguments: list[PackageArgument] = Field(default_factory=list, alias="packageArguments", max_length=256)
    environment_variables: list[EnvironmentVariable] = Field(
        default_factory=list, alias="environmentVariables", max_length=256
    )

    @field_validator("identifier", "version")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        return _line(value)


class RegistryServer(_Model):
    """A registry `server.json`: the server's name, description, version and packages."""

    name: StrictStr = Field(min_length=1, max_length=200)
    title: StrictStr | None = Field(default=None, max_length=200)
    description: StrictStr = Field(default="", max_length=8192)
    version: StrictStr | None = Field(default=None, max_length=128)
    packages: list[RegistryPackage] = Field(default_factory=list, max_length=64)
    remotes: list[_Transport] = Field(default_factory=list, max_length=64)

    @field_validator("name", "title", "version")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        return _line(value)

    @field_validator("description")
    @classmethod
    def _description(cls, value: str) -> str:
        return check_text(value, "the description")


class StdioPackage(_Model):
    """What the installer needs: which package, pinned, and the settings its server takes."""

    registry_type: Literal["npm", "pypi"]
    identifier: StrictStr
    version: StrictStr
    registry_base_url: StrictStr | None
    arguments: tuple[PackageArgument, ...]
    environment: tuple[EnvironmentVariable, ...]


def parse_server_json(data: bytes) -> RegistryServer:
    """`data`, a registry `server.json`, as a `RegistryServer`; raises `InvalidArguments`."""
    return parse_document(data, RegistryServer, "the server.json")


def stdio_package(server: RegistryServer) -> StdioPackage:
    """The first npm or PyPI package of `server` whose transport is stdio.

    Raises `InvalidArguments` with one sentence when there is none (only remotes, only other
    registries, only HTTP transports) or when that package names no version: the host installs
    pinned versions only.
    """
    for package in server.packages:
        kind = package.registry_type.lower()
        if kind not in ("npm", "pypi") or package.transport is None or package.transport.type != "stdio":
            continue
        if not package.version:
            raise InvalidArguments(
                f"the server.json's {kind} package {shown(package.identifier)} has no version to pin."
            )
        return StdioPackage(
            registry_type="npm" if kind == "npm" else "pypi",
            identifier=package.identifier,
            version=package.version,
            registry_base_url=package.registry_base_url,
            arguments=tuple(package.package_arguments),
            environment=tuple(package.environment_variables),
        )
    if server.remotes and not server.packages:
        raise InvalidArguments(
            f"the server.json of {shown(server.name)} offers only remote servers; the host installs stdio packages."
        )
    raise InvalidArguments(f"the server.json of {shown(server.name)} has no npm or PyPI package with stdio transport.")
