"""What standalone mode needs from the plugin's own `manifest.yaml`.

Above: `local` (the standalone emulation). Below: the plugin contract's strict YAML reader
(`contract.read_yaml`, the host's own), which imports PyYAML only when a plugin runs
standalone — under the host the kit reads no file and needs the MCP SDK alone.

This is not the host's manifest loader (`mcp-host check` is: run it to lint a manifest). It
reads just the declared host ops, the config fields' defaults per scope and the quota, and
refuses only what would make the emulation lie.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .contract import MANIFEST_NAME, MAX_MANIFEST_BYTES, YamlProblem, read_yaml

__all__ = ["CONFIG_SCOPES", "MANIFEST_NAME", "ManifestProblem", "PluginManifest", "QuotaSpec", "read_plugin_manifest"]

CONFIG_SCOPES = ("config", "code_config", "role_config", "key_config")


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
    """Read `folder/manifest.yaml` with the host's strict YAML reader (`contract.read_yaml`).

    Raises RuntimeError when PyYAML is not installed, OSError when the file cannot be read,
    and ValueError when it is not a manifest this kit can emulate.
    """
    path = folder / MANIFEST_NAME
    try:
        data = read_yaml(path, max_bytes=MAX_MANIFEST_BYTES)
    except YamlProblem as exc:
        raise ManifestProblem(path, str(exc)) from None
    if not isinstance(data, dict):
        raise ManifestProblem(path, "must be a mapping of manifest keys")
    return PluginManifest(
        path=path,
        plugin_id=str(data.get("id", "")),
        host_ops=frozenset(_strings(path, _get(data, "transport", "sandbox", "host_ops") or [], "host_ops")),
        defaults={scope: _defaults(path, data.get(scope) or [], scope) for scope in CONFIG_SCOPES},
        quota=_quota(data.get("quota")),
    )


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
