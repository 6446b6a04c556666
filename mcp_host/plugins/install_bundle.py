"""Installing a plugin from an MCP Bundle (`.mcpb`) or an MCP registry entry (`server.json`).

Above: `mcp-host plugin add x.mcpb|server.json`. Below: `bundles` (safe extraction, the
bundle's manifest, `resolve_launch`), `registry_entries` (the entry's stdio package) and
`install` (the staging folder, npm and pip, the generated manifest that grants nothing).

A bundle is unpacked into the staging folder and started as its `mcp_config` says, resolved
for the sandbox (the plugin folder is `/plugin` there): a node server with `node`, a python
server with the host's `python` (the SDK) unless it ships its own packages (`PYTHONPATH`), a
binary by its path in the bundle; a `uv` server is refused (it needs the network to start).
Its `user_config` fields become declared owner config (`secret` when `sensitive`, `required`
when required without a default). A registry entry's npm or PyPI package is installed pinned,
its `packageArguments` become the arguments and its environment variables with values the
child's environment.

A value the owner must give (a required setting without a default, a secret) reaches the
child as an environment variable (`transport.env_from_config`, from declared owner config):
a bundle's `mcp_config.env` entry that is exactly `${user_config.KEY}`, a registry entry's
`environmentVariables` with `isRequired` and no value or `isSecret`. One the command line or a
longer text would need (an argument, `"Bearer ${user_config.token}"`) is still refused, in
one sentence: a secret never goes on a command line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from mcp_host.errors import InvalidArguments

from .bundles import SANDBOX_PLUGIN_DIR, BundleManifest, UserConfigField, extract_bundle, resolve_launch
from .install import Installed, Launched, Staging, check_id, default_id, npm_into, pypi_into
from .manifest import MAX_TITLE_CHARS, PLUGIN_ID_RE
from .registry_entries import StdioPackage, parse_server_json, stdio_package
from .sources import BundleSource, NpmSource, PypiSource, RegistryEntrySource, parse_source
from .text_safety import MAX_DESCRIPTION_BYTES, shown, text_problem

__all__ = ["install_bundle", "install_registry_entry"]

_MAX_SERVER_JSON = 1024 * 1024
_VARIABLE = re.compile(r"\$\{user_config\.([^${}]*)\}")
_KEY_RE = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
_NOT_ENV = "owner config reaches a server only as a whole environment variable, so it is refused"
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
    """The package's arguments, its fixed environment, the owner config it declares and the
    variables made from it; refused when an argument needs the owner's value."""
    args: list[str] = []
    for argument in package.arguments:
        label = argument.name or argument.value_hint or "a positional argument"
        value = _entry_value(argument.resolved, argument.is_required, argument.is_secret, f"argument {shown(label)}")
        if value is None:
            continue
        args.extend((argument.name, value) if argument.type == "named" and argument.name else (value,))
    env: list[tuple[str, str]] = []
    config: dict[str, dict[str, Any]] = {}
    env_from: list[tuple[str, str]] = []
    for variable in package.environment:
        value = variable.resolved
        if variable.is_secret or (value is None and variable.is_required):
            key = _config_key(variable.name, config, f"server.json's environment variable {shown(variable.name)}")
            config[key] = _described(
                {"key": key, "type": "string", "label": variable.name},
                variable.description or "",
                secret=variable.is_secret,
                required=variable.is_required,
            )
            env_from.append((variable.name, key))
        elif value is not None:
            env.append((variable.name, value))
    return tuple(args), tuple(env), tuple(config.values()), tuple(env_from)


def _entry_value(value: str | None, required: bool, secret: bool, what: str) -> str | None:
    if secret:
        raise InvalidArguments(f"the server.json's {what} is a secret the owner must give; {_NOT_ENV}.")
    if value is None and required:
        raise InvalidArguments(f"the server.json's {what} is required and has no default; {_NOT_ENV}.")
    return value


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
    """The command that starts the bundle's server in the sandbox, and its declared config."""
    server = manifest.server
    if server.type == "uv":
        raise InvalidArguments("the bundle is a uv server, which needs the network to start; it is not supported.")
    config = server.mcp_config
    assert config is not None  # parse_bundle_manifest: only a uv server may lack it
    keys = _config_keys(manifest)
    whole = {name: found.group(1) for name, text in config.env.items() if (found := _VARIABLE.fullmatch(text))}
    inline = [text for name, text in config.env.items() if name not in whole]
    elsewhere = {key for text in (config.command, *config.args, *inline) for key in _VARIABLE.findall(text)}
    for key in sorted(elsewhere):
        if _owner_gives(manifest.user_config.get(key)):
            raise InvalidArguments(
                f"the bundle's setting {shown(key)} has no default and is used on the command line or inside a"
                f" longer value; {_NOT_ENV}."
            )
    from_owner = {
        name: key
        for name, key in whole.items()
        if key not in elsewhere and key in keys and _owner_gives(manifest.user_config.get(key))
    }
    # The owner's values replace these at start: resolved here to nothing, then left out.
    launch = resolve_launch(manifest, dict.fromkeys(from_owner.values(), ""), SANDBOX_PLUGIN_DIR)
    env = {name: value for name, value in launch.env.items() if name not in from_owner}
    if server.type == "node":
        if PurePosixPath(launch.command).name != "node":
            raise InvalidArguments("the bundle is a node server whose mcp_config does not start node.")
        command = "node"
    elif server.type == "python" and "PYTHONPATH" not in launch.env and "/" not in launch.command:
        command = "python"  # the host's interpreter with the SDK: the bundle ships no packages
    else:
        command = _in_bundle(launch.command, folder) if "/" in launch.command else launch.command
    return Launched(
        command,
        launch.args,
        manifest.version,
        manifest.display_name or manifest.name,
        manifest.description,
        env=tuple(env.items()),
        config=_declared_config(manifest, keys),
        env_from_config=tuple((name, keys[key]) for name, key in from_owner.items()),
    )


def _owner_gives(field: UserConfigField | None) -> bool:
    """Whether only the owner can give the setting's value: a secret, or required and no default."""
    return field is not None and field.default is None and (field.sensitive or field.required)


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


def _declared_config(manifest: BundleManifest, keys: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """The bundle's `user_config` as the manifest's `config` fields."""
    return tuple(_config_field(keys[name], field) for name, field in manifest.user_config.items())


def _config_field(key: str, field: UserConfigField) -> dict[str, Any]:
    default = field.default
    kind: str
    if field.type == "boolean":
        kind = "bool"
    elif field.type == "number" and (default is None or (isinstance(default, int) and not isinstance(default, bool))):
        kind = "int"
    elif field.multiple or isinstance(default, list):
        kind = "string_list"
        default = (
            None
            if default is None
            else [str(item) for item in default]
            if isinstance(default, list)
            else [str(default)]
        )
    else:
        kind = "string"
        default = None if default is None else str(default)
    if kind == "bool" and not isinstance(default, bool):
        default = None
    description = field.description.strip()
    if field.sensitive:
        description = f"{description} (A secret.)".strip()
    secret = field.sensitive and kind == "string" and default is None  # a secret has no default
    declared: dict[str, Any] = {"key": key, "type": kind, "label": field.title}
    if default is not None:
        declared["default"] = default
    return _described(declared, description, secret=secret, required=field.required and default is None)


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
