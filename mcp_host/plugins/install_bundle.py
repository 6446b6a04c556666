"""Installing a plugin from an MCP Bundle (`.mcpb`) or an MCP registry entry (`server.json`).

Above: `mcp-host plugin add x.mcpb|server.json`. Below: `bundles` (safe extraction, the
bundle's manifest, `resolve_launch`), `registry_entries` (the entry's stdio package) and
`install` (the staging folder, npm and pip, the generated manifest that grants nothing).

A bundle is unpacked into the staging folder and started as its `mcp_config` says, resolved
for the sandbox (the plugin folder is `/plugin` there): a node server with `node`, a python
server with the host's `python` (the SDK) unless it ships its own packages (`PYTHONPATH`), a
binary by its path in the bundle; a `uv` server is refused (it needs the network to start).
A registry entry's npm or PyPI package is installed pinned, with its `packageArguments` and
`environmentVariables`.

Every setting the owner may change is declared owner config and referenced, never frozen: a
bundle's `user_config` fields (`secret` when `sensitive`, `required` when required without a
default), a registry entry's arguments and variables with a `default` or none (`isSecret`,
`isRequired` carried). A value used whole as an environment variable becomes
`transport.env_from_config`; one in an argument or inside a longer value `${config.KEY}` there
(`config_refs`). The owner's value, else the default, reaches the child at each start, and a
change restarts it. A fixed value (a registry entry's `value`) stays in the manifest. A secret
is written nowhere in the manifest (a `sensitive` field's default is dropped) and never goes on
a command line: one used in an argument is refused, in one sentence.

No network is written (`transport.sandbox.egress` stays empty: the server is offline): neither
format names the hosts a local server reaches. The MCPB manifest (0.3, 0.4: its JSON Schema
allows no key beyond `server`, `user_config`, `compatibility` — platforms and runtimes —,
`tools`, `prompts`, metadata and `_meta`) has no network or host field, and a registry entry's
packages carry only their registry, identifier, version, transport, arguments and variables
(`remotes` name remote servers, which `plugin add https://…` adds). `plugin add` says so and
names `mcp-host plugin allow ID HOST` (`reach.network_line`). Should either format gain such a
field, it is written here into `egress`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path, PurePosixPath
from typing import Any

from mcp_host.errors import InvalidArguments

from .bundles import (
    SANDBOX_PLUGIN_DIR,
    BundleManifest,
    McpConfig,
    UserConfigField,
    extract_bundle,
    resolve_default,
    resolve_launch,
)
from .install import Installed, Launched, Staging, check_id, default_id, npm_into, pypi_into
from .manifest import MAX_TITLE_CHARS, PLUGIN_ID_RE
from .registry_entries import StdioPackage, parse_server_json, stdio_package
from .sources import BundleSource, NpmSource, PypiSource, RegistryEntrySource, parse_source
from .text_safety import MAX_DESCRIPTION_BYTES, shown, text_problem

__all__ = ["install_bundle", "install_registry_entry"]

_MAX_SERVER_JSON = 1024 * 1024
_VARIABLE = re.compile(r"\$\{user_config\.([^${}]*)\}")
_KEY_RE = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
_NOT_ARGS = "a secret never goes on a command line, so it is refused"
_DEFAULT_REGISTRIES = {"npm": "https://registry.npmjs.org", "pypi": "https://pypi.org"}


def install_bundle(
    source: BundleSource, data_dir: Path, *, plugin_id: str | None = None, replacing: bool = False
) -> Installed:
    """Unpack the bundle `source` as a plugin folder with a generated manifest.yaml; nothing is
    left behind when it is refused (`InvalidArguments`, one sentence). `replacing`: an upgrade of
    installed `plugin_id`, unpacked into a hidden folder beside it (`upgrade.stage_upgrade`)."""
    if plugin_id is not None:
        check_id(plugin_id)
    if not source.path.is_file():
        raise InvalidArguments(f"the bundle {shown(str(source.path), 80)} is not a file.")
    with Staging(data_dir, plugin_id, replacing=replacing) as staging:
        staging.path.rmdir()  # extract_bundle makes the folder itself
        manifest = extract_bundle(source.path, staging.path)
        if plugin_id is None:
            staging.name(_bundle_id(manifest))
        got = _bundle_launch(manifest, staging.path)
        origin = f"{manifest.name} {manifest.version} from the MCP Bundle {source.path.name}"
        return staging.finish(source, origin, got)


def install_registry_entry(
    source: RegistryEntrySource,
    data_dir: Path,
    *,
    plugin_id: str | None = None,
    spec: str | None = None,
    replacing: bool = False,
) -> Installed:
    """Install the stdio npm or PyPI package the registry entry `source` names, pinned, with its
    arguments and environment; `spec` replaces what npm or pip is given (tests offline).
    `replacing`: an upgrade of installed `plugin_id`, beside it (`upgrade.stage_upgrade`)."""
    try:
        with source.path.open("rb") as file:
            data = file.read(_MAX_SERVER_JSON + 1)
    except OSError:
        raise InvalidArguments(f"the server.json {shown(str(source.path), 80)} cannot be read.") from None
    if len(data) > _MAX_SERVER_JSON:
        raise InvalidArguments(f"the server.json is larger than {_MAX_SERVER_JSON} bytes.")
    server = parse_server_json(data)
    package = stdio_package(server)
    base = package.registry_base_url
    if base is not None and base.rstrip("/") != _DEFAULT_REGISTRIES[package.registry_type]:
        raise InvalidArguments(
            f"the server.json's package comes from {shown(base, 80)}; the host installs from"
            f" {_DEFAULT_REGISTRIES[package.registry_type]} only."
        )
    sep = "@" if package.registry_type == "npm" else "=="
    pinned = parse_source(f"{package.registry_type}:{package.identifier}{sep}{package.version}")
    assert isinstance(pinned, NpmSource | PypiSource)
    args, env, config, env_from = _entry_settings(package)
    with Staging(data_dir, default_id(pinned) if plugin_id is None else plugin_id, replacing=replacing) as staging:
        if isinstance(pinned, NpmSource):
            got = npm_into(staging.path, pinned, spec)
        else:
            got = pypi_into(staging.path, pinned, spec)
        got = Launched(
            got.command,
            (*got.args, *args),
            got.version,
            server.title or server.name,
            server.description or got.description,
            env=env,
            config=config,
            env_from_config=env_from,
        )
        origin = f"{pinned} as the registry entry {server.name} describes"
        return staging.finish(source, origin, got)


# ---------------------------------------------------------------------------------------------
# Registry entries


Pairs = tuple[tuple[str, str], ...]


def _entry_settings(package: StdioPackage) -> tuple[tuple[str, ...], Pairs, tuple[dict[str, Any], ...], Pairs]:
    """The package's arguments (`${config.KEY}` where the owner may set one), its fixed
    environment, the owner config it declares and the variables made from it; refused when a
    secret would go on the command line."""
    config: dict[str, dict[str, Any]] = {}
    args: list[str] = []
    for index, argument in enumerate(package.arguments):
        label = argument.name or argument.value_hint or f"argument {index + 1}"
        if argument.is_secret:
            raise InvalidArguments(
                f"the server.json's argument {shown(label)} is a secret the owner gives; {_NOT_ARGS}."
            )
        if argument.value is not None:
            value = argument.value
        elif argument.default is None and not argument.is_required:
            continue  # optional, and nothing to give it: left out
        else:
            key = _unique_key(label, config, f"server.json's argument {shown(label)}")
            config[key] = _entry_field(key, label, argument.description, argument.default, argument.is_required)
            value = f"${{config.{key}}}"
        args.extend((argument.name, value) if argument.type == "named" and argument.name else (value,))
    env: list[tuple[str, str]] = []
    env_from: list[tuple[str, str]] = []
    for variable in package.environment:
        if variable.value is not None and not variable.is_secret:
            env.append((variable.name, variable.value))
            continue
        key = _unique_key(variable.name, config, f"server.json's environment variable {shown(variable.name)}")
        default = None if variable.is_secret else variable.resolved
        config[key] = _entry_field(
            key, variable.name, variable.description, default, variable.is_required, secret=variable.is_secret
        )
        env_from.append((variable.name, key))
    return tuple(args), tuple(env), tuple(config.values()), tuple(env_from)


def _entry_field(
    key: str, label: str, description: str | None, default: str | None, required: bool, *, secret: bool = False
) -> dict[str, Any]:
    """A registry entry's setting as an owner config field (a string; required only without a default)."""
    declared: dict[str, Any] = {"key": key, "type": "string", "label": label}
    if default is not None:
        declared["default"] = default
    return _described(declared, description or "", secret=secret, required=required and default is None)


def _unique_key(name: str, taken: Collection[str], what: str) -> str:
    """The owner config key made of `name`, with a number added while it is `taken`."""
    key = _config_key(name, (), what)
    for number in range(2, 2 + len(taken) + 1):
        if key not in taken:
            break
        key = _config_key(f"{name}_{number}", (), what)
    return key


# ---------------------------------------------------------------------------------------------
# Bundles


def _bundle_id(manifest: BundleManifest) -> str:
    words = ["mcpb"]
    for part in manifest.name.lower().lstrip("@").split("/"):
        word = re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", part)).strip("_")
        if word:
            words.append(word if word[0].isalpha() else f"p{word}")
    plugin_id = ".".join(words)
    if len(words) < 2 or not PLUGIN_ID_RE.match(plugin_id):
        raise InvalidArguments(f"no plugin id can be made from the bundle's name {shown(manifest.name)}; use --id")
    return plugin_id


def _bundle_launch(manifest: BundleManifest, folder: Path) -> Launched:
    """The command that starts the bundle's server in the sandbox, and its declared config,
    every `${user_config.NAME}` a reference to the owner's value (`config_refs`)."""
    server = manifest.server
    if server.type == "uv":
        raise InvalidArguments("the bundle is a uv server, which needs the network to start; it is not supported.")
    config = server.mcp_config
    assert config is not None  # parse_bundle_manifest: only a uv server may lack it
    keys = _config_keys(manifest)
    _refuse_unusable_settings(manifest, config)
    whole = {name: found.group(1) for name, text in config.env.items() if (found := _VARIABLE.fullmatch(text))}
    # Resolved with references for values: what the owner sets reaches the child at each start.
    references = {name: f"${{config.{key}}}" for name, key in keys.items()}
    launch = resolve_launch(manifest, references, SANDBOX_PLUGIN_DIR)
    env = {name: value for name, value in launch.env.items() if name not in whole}
    if server.type == "node":
        if PurePosixPath(launch.command).name != "node":
            raise InvalidArguments("the bundle is a node server whose mcp_config does not start node.")
        command = "node"
    elif server.type == "python" and "PYTHONPATH" not in launch.env and "/" not in launch.command:
        command = "python"  # the host's interpreter with the SDK: the bundle ships no packages
    else:
        command = _in_bundle(launch.command, folder) if "/" in launch.command else launch.command
    used = {name for text in (*config.args, *config.env.values()) for name in _VARIABLE.findall(text)}
    return Launched(
        command,
        launch.args,
        manifest.version,
        manifest.display_name or manifest.name,
        manifest.description,
        env=tuple(env.items()),
        config=tuple(
            _config_field(keys[name], field, used=name in used) for name, field in manifest.user_config.items()
        ),
        env_from_config=tuple((name, keys[key]) for name, key in whole.items()),
    )


def _refuse_unusable_settings(manifest: BundleManifest, config: McpConfig) -> None:
    """Refuse a setting where the owner's value cannot be put: in the command (the host starts
    a fixed program), a secret in an argument (command lines are readable by every process), a
    multi-valued one anywhere but alone as an argument. One naming no field is refused by
    `resolve_launch`."""
    fields = manifest.user_config
    for name in _VARIABLE.findall(config.command):
        raise InvalidArguments(
            f"the bundle's command uses the setting {shown(name)}; the host starts a fixed command, so it is refused."
        )
    for arg in config.args:
        for name in _VARIABLE.findall(arg):
            field = fields.get(name)
            if field is not None and field.sensitive:
                raise InvalidArguments(
                    f"the bundle passes its secret setting {shown(name)} as an argument; {_NOT_ARGS}."
                )
            if field is not None and field.multiple and _VARIABLE.fullmatch(arg) is None:
                raise InvalidArguments(
                    f"the bundle's setting {shown(name)} has several values, which can only stand alone as an argument."
                )
    for text in config.env.values():
        for name in _VARIABLE.findall(text):
            field = fields.get(name)
            if field is not None and field.multiple and _VARIABLE.fullmatch(text) is None:
                raise InvalidArguments(
                    f"the bundle's setting {shown(name)} has several values, which can only stand alone as an argument."
                )


def _in_bundle(command: str, folder: Path) -> str:
    """`command` (a path) as a path relative to the plugin folder, when it is an executable
    file in the bundle."""
    prefix = f"{SANDBOX_PLUGIN_DIR}/"
    relative = command.removeprefix(prefix) if command.startswith(prefix) else command
    parts = PurePosixPath(relative).parts
    if relative.startswith("/") or not parts or any(part in ("", ".", "..") for part in parts):
        raise InvalidArguments(f"the bundle's command {shown(command)} is not a file in the bundle.")
    path = folder.joinpath(*parts)
    if path.is_symlink() or not path.is_file() or not os.access(path, os.X_OK):
        raise InvalidArguments(f"the bundle's command {shown(command)} is not an executable file in the bundle.")
    return "/".join(parts)


def _config_key(name: str, taken: Collection[str], what: str) -> str:
    """The owner config key made of a setting's `name` (a-z 0-9 _); refused when it cannot be
    one or is `taken`."""
    key = re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", name.lower())).strip("_")
    key = key if key[:1].isalpha() else f"c_{key}"
    if not _KEY_RE.match(key) or key in taken:
        raise InvalidArguments(f"the {what} cannot be declared as owner config.")
    return key


def _config_keys(manifest: BundleManifest) -> dict[str, str]:
    """Each `user_config` name's owner config key."""
    keys: dict[str, str] = {}
    for name in manifest.user_config:
        keys[name] = _config_key(name, set(keys.values()), f"bundle's setting {shown(name)}")
    return keys


def _config_field(key: str, field: UserConfigField, *, used: bool) -> dict[str, Any]:
    """A `user_config` field as an owner config field. A `sensitive` one is a secret string
    without a default (its default is not written to the manifest); a default is resolved as
    `mcp_config` is (`${__dirname}`, `${/}`), refused when it cannot be and the field is `used`."""
    if field.sensitive:
        description = f"{field.description.strip()} (A secret.)".strip()
        declared: dict[str, Any] = {"key": key, "type": "string", "label": field.title}
        return _described(declared, description, secret=True, required=field.required)
    default = field.default
    kind: str
    if field.type == "boolean":
        kind = "bool"
    elif field.type == "number" and (default is None or (isinstance(default, int) and not isinstance(default, bool))):
        kind = "int"
    elif field.multiple or isinstance(default, list):
        kind = "string_list"
        default = None if default is None else default if isinstance(default, list) else [str(default)]
    else:
        kind = "string"
        default = None if default is None else str(default)
    if kind == "bool" and not isinstance(default, bool):
        default = None
    if isinstance(default, str):
        default = resolve_default(key, default, strict=used)
    elif isinstance(default, list):
        default = [resolve_default(key, str(item), strict=used) for item in default]
    declared = {"key": key, "type": kind, "label": field.title}
    if default is not None:
        declared["default"] = default
    return _described(declared, field.description, secret=False, required=field.required and default is None)


def _described(declared: dict[str, Any], description: str, *, secret: bool, required: bool) -> dict[str, Any]:
    """A config field with its label and description kept when they are safe text, and its flags."""
    label = str(declared.pop("label", "")).strip()[:MAX_TITLE_CHARS]
    if label and text_problem(label, "label", multiline=False) is None:
        declared["label"] = label
    description = description.strip()
    if description and len(description) <= MAX_DESCRIPTION_BYTES // 4 and text_problem(description, "d") is None:
        declared["description"] = description
    if secret:
        declared["secret"] = True
    if required:
        declared["required"] = True
    return declared
