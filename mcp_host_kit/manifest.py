"""What standalone mode needs from the plugin's own `manifest.yaml`.

Above: `local` (the standalone emulation). Below: PyYAML, imported only here and only when a
plugin runs standalone — under the host the kit reads no file and needs the MCP SDK alone.

This is not the host's manifest loader (`mcp-host check` is: run it to lint a manifest). It
reads just the declared host ops, the config fields' defaults per scope and the quota, and
refuses only what would make the emulation lie.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CONFIG_SCOPES", "MANIFEST_NAME", "ManifestProblem", "PluginManifest", "QuotaSpec", "read_plugin_manifest"]

MANIFEST_NAME = "manifest.yaml"
CONFIG_SCOPES = ("config", "code_config", "role_config", "key_config")
_MAX_BYTES = 1024 * 1024
# YAML 1.2 core scalars, as the host reads manifests: `10:30` stays a string (YAML 1.1 would
# make it the integer 630) and `no` stays a string.
_RESOLVERS: tuple[tuple[str, str, list[str]], ...] = (
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("tag:yaml.org,2002:int", r"[-+]?(?:0|[1-9][0-9]*)", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+",
        list("-+0123456789."),
    ),
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
)


@dataclass(frozen=True)
class QuotaSpec:
    """`quota: {config_key, collection, subject_field}`, complete."""

    config_key: str
    collection: str
    subject_field: str


@dataclass(frozen=True)
class PluginManifest:
    """The parts of a manifest the standalone emulation uses."""

    path: Path
    plugin_id: str
    host_ops: frozenset[str]
    defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per config scope, every declared key with its default (None when it has none)."""
    quota: QuotaSpec | None = None


class ManifestProblem(ValueError):
    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem} (run `mcp-host check` on the plugin folder)")


def read_plugin_manifest(folder: Path) -> PluginManifest:
    """Read `folder/manifest.yaml`.

    Raises RuntimeError when PyYAML is not installed, OSError when the file cannot be read,
    and ValueError when it is not a manifest this kit can emulate.
    """
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML ships with mcp-host
        raise RuntimeError(
            "mcp_host_kit reads manifest.yaml with PyYAML in standalone mode: pip install pyyaml"
        ) from None
    path = folder / MANIFEST_NAME
    with path.open("rb") as file:
        raw = file.read(_MAX_BYTES + 1)
    if len(raw) > _MAX_BYTES:
        raise ManifestProblem(path, f"larger than {_MAX_BYTES} bytes")
    try:
        data = yaml.load(raw, Loader=_yaml12_loader())
    except yaml.YAMLError as exc:
        raise ManifestProblem(path, f"not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ManifestProblem(path, "must be a mapping of manifest keys")
    return PluginManifest(
        path=path,
        plugin_id=str(data.get("id", "")),
        host_ops=frozenset(_strings(path, _get(data, "transport", "sandbox", "host_ops") or [], "host_ops")),
        defaults={scope: _defaults(path, data.get(scope) or [], scope) for scope in CONFIG_SCOPES},
        quota=_quota(data.get("quota")),
    )


@functools.cache
def _yaml12_loader() -> type[Any]:
    """PyYAML's SafeLoader with YAML 1.2 core scalars instead of its YAML 1.1 set."""
    import yaml

    class Loader(yaml.SafeLoader):
        yaml_implicit_resolvers: dict[Any, Any] = {}

    for tag, pattern, first in _RESOLVERS:
        Loader.add_implicit_resolver(tag, re.compile(rf"\A(?:{pattern})\Z"), first)
    return Loader


def _get(data: Mapping[str, Any], *keys: str) -> Any:
    value: Any = data
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _strings(path: Path, value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ManifestProblem(path, f"{what} must be a list of strings")
    return value


def _defaults(path: Path, fields: Any, scope: str) -> dict[str, Any]:
    if not isinstance(fields, list):
        raise ManifestProblem(path, f"{scope} must be a list of fields")
    values: dict[str, Any] = {}
    for index, item in enumerate(fields):
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise ManifestProblem(path, f"{scope}.{index} must be a mapping with a key")
        default = item.get("default")
        values[item["key"]] = list(default) if isinstance(default, list | tuple) else default
    return values


def _quota(value: Any) -> QuotaSpec | None:
    if not isinstance(value, Mapping):
        return None
    config_key, collection, subject_field = (value.get(name) for name in ("config_key", "collection", "subject_field"))
    if not (isinstance(config_key, str) and isinstance(collection, str) and isinstance(subject_field, str)):
        return None  # incomplete: the host enforces nothing either (its loader warns)
    return QuotaSpec(config_key, collection, subject_field)
