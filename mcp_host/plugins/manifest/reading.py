"""Reading a plugin folder's `manifest.yaml`: the YAML read with the plugin contract's strict
loader (`mcp_host_kit.contract.read_yaml`, which the kit reads manifests with too — duplicate
keys and aliases are refused and scalars resolve as in YAML 1.2: `no` stays a string, `10:30`
stays a string), validated into a `Manifest`, and every problem turned into one
`ManifestError` naming the file and the dotted field (`owner_tools.0.input_schema`; an unknown
key is named by its own location, e.g. `transport.sandbox.colour`).

Above: `loading` (which reads every plugin folder), `install` and `mcp-host check`. Below:
`model` and the YAML files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from mcp_host.errors import ManifestError
from mcp_host_kit.contract import MANIFEST_NAME, MAX_MANIFEST_BYTES, YamlProblem, loc_part, read_yaml

from ..text_safety import shown
from .model import Manifest

__all__ = ["ManifestResult", "load_manifest", "read_manifest"]


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
