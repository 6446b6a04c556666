"""MCP Bundles (`.mcpb`): the typed model of a bundle's `manifest.json`, the launch command it
declares resolved for the sandbox, and safe extraction of the archive.

Above: the installer (`mcp-host plugin add x.mcpb`), which extracts a bundle into a new plugin
folder and writes its `manifest.yaml` from the model here. Below: `source_json` (hostile JSON
into models), `errors`, and the standard library's `zipfile`.

The format is the MCPB spec's (github.com/modelcontextprotocol/mcpb, MANIFEST.md, 0.3/0.4):
only the parts the host uses are modelled; other keys the spec allows (icons, localization,
`_meta`, `compatibility`, …) are ignored. An unknown `server.type` is refused: the host does not
know how to run it.

Everything here refuses with one `InvalidArguments` whose message is one sentence for the
owner; nothing echoes an internal exception.
"""

from __future__ import annotations

import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator

from mcp_host.errors import InvalidArguments

from .manifest import MANIFEST_NAME
from .source_json import parse_document
from .text_safety import check_text, shown

__all__ = [
    "BUNDLE_MANIFEST",
    "SANDBOX_PLUGIN_DIR",
    "BundleCaps",
    "BundleManifest",
    "BundleServer",
    "BundleTool",
    "Launch",
    "McpConfig",
    "UserConfigField",
    "UserConfigValue",
    "extract_bundle",
    "parse_bundle_manifest",
    "resolve_default",
    "resolve_launch",
]

BUNDLE_MANIFEST = "manifest.json"
SANDBOX_PLUGIN_DIR = "/plugin"
"""Where the plugin folder appears inside the sandbox: what `${__dirname}` becomes."""

UserConfigValue = str | int | float | bool | list[str]
"""A value the owner set for a `user_config` field (a list for `multiple` files or folders)."""

_CONFIG_KEY = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
_ENV_NAME = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class _Model(BaseModel):
    # The spec allows keys this model does not read (and grows them); they are dropped.
    model_config = ConfigDict(extra="ignore", frozen=True)


def _safe_line(value: str) -> str:
    return check_text(value, "the text", multiline=False, max_bytes=4096)


class McpConfig(_Model):
    """How to start the server: `command`, `args` and `env`, with `${…}` variables unresolved."""

    command: StrictStr = Field(min_length=1, max_length=4096)
    args: list[StrictStr] = Field(default_factory=list, max_length=256)
    env: dict[_ENV_NAME, StrictStr] = Field(default_factory=dict)

    @field_validator("command")
    @classmethod
    def _command_text(cls, value: str) -> str:
        return _safe_line(value)

    @field_validator("args")
    @classmethod
    def _args_text(cls, value: list[str]) -> list[str]:
        return [_safe_line(arg) for arg in value]

    @field_validator("env")
    @classmethod
    def _env_text(cls, value: dict[str, str]) -> dict[str, str]:
        return {name: _safe_line(text) for name, text in value.items()}


def _relative_path(value: str) -> str:
    problem = _path_problem(value)
    if problem is not None:
        raise ValueError(f"the path {problem}")
    return value


class BundleServer(_Model):
    """`server`: the runtime (`type`), the main file (`entry_point`) and the launch command."""

    type: Literal["node", "python", "binary", "uv"]
    entry_point: StrictStr = Field(min_length=1, max_length=1024)
    mcp_config: McpConfig | None = None  # optional only for `uv`, whose host runs it

    @field_validator("entry_point")
    @classmethod
    def _entry_inside(cls, value: str) -> str:
        return _relative_path(value)


class UserConfigField(_Model):
    """One `user_config` entry: a setting the owner gives at install (a secret when `sensitive`)."""

    type: Literal["string", "number", "boolean", "directory", "file"]
    title: StrictStr = Field(max_length=200)
    description: StrictStr = Field(default="", max_length=8192)
    required: StrictBool = False
    sensitive: StrictBool = False
    multiple: StrictBool = False
    default: StrictStr | StrictBool | StrictInt | StrictFloat | list[StrictStr] | None = None

    @field_validator("title", "description")
    @classmethod
    def _text(cls, value: str) -> str:
        return check_text(value, "the text")


class BundleTool(_Model):
    """A tool the bundle declares (its real list comes from the server's `tools/list`)."""

    name: StrictStr = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: StrictStr = Field(default="", max_length=8192)

    @field_validator("description")
    @classmethod
    def _text(cls, value: str) -> str:
        return check_text(value, "the tool description")


class BundleAuthor(_Model):
    name: StrictStr = Field(max_length=200)


class BundleManifest(_Model):
    """A bundle's `manifest.json`, the parts the host reads."""

    manifest_version: StrictStr = Field(max_length=16)
    name: StrictStr = Field(min_length=1, max_length=200)
    display_name: StrictStr | None = Field(default=None, max_length=200)
    version: StrictStr = Field(min_length=1, max_length=64)
    description: StrictStr = Field(max_length=8192)
    author: BundleAuthor
    server: BundleServer
    user_config: dict[_CONFIG_KEY, UserConfigField] = Field(default_factory=dict, max_length=64)
    tools: list[BundleTool] = Field(default_factory=list, max_length=256)

    @field_validator("name", "display_name", "version", "description")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else check_text(value, "the text")


def parse_bundle_manifest(data: bytes) -> BundleManifest:
    """`data`, a bundle's `manifest.json`, as a `BundleManifest`; raises `InvalidArguments`."""
    manifest = parse_document(data, BundleManifest, "the bundle's manifest.json")
    if manifest.server.mcp_config is None and manifest.server.type != "uv":
        raise InvalidArguments(
            f"the bundle's manifest.json has no server.mcp_config, which a {manifest.server.type} server needs."
        )
    return manifest


# ---------------------------------------------------------------------------------------------
# Resolving `${…}` in mcp_config


@dataclass(frozen=True, slots=True)
class Launch:
    """The command that starts the bundle's server inside the sandbox, variables resolved."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]


_VARIABLE = re.compile(r"\$\{([^${}]*)\}")
_FIXED = {"/": "/", "pathSeparator": "/"}  # the sandbox is Linux


def _as_text(key: str, value: UserConfigValue) -> str:
    if isinstance(value, list):
        raise InvalidArguments(
            f"the setting {shown(key)} has several values, which can only stand alone as an argument."
        )
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _setting(key: str, fields: Mapping[str, UserConfigField], values: Mapping[str, UserConfigValue]) -> UserConfigValue:
    field = fields.get(key)
    if field is None:
        raise InvalidArguments(f"the bundle's mcp_config uses the setting {shown(key)}, which its user_config lacks.")
    if key in values:
        return values[key]
    if field.default is not None:
        if isinstance(field.default, str):
            return _substitute(field.default, {}, {}, "")
        if isinstance(field.default, list):
            return [_substitute(item, {}, {}, "") for item in field.default]
        return field.default
    if field.required:
        raise InvalidArguments(f"the bundle's setting {shown(key)} is required and has no value.")
    return ""


def _substitute(
    text: str, fields: Mapping[str, UserConfigField], values: Mapping[str, UserConfigValue], dirname: str
) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "__dirname" and dirname:
            return dirname
        if name in _FIXED:
            return _FIXED[name]
        if name.startswith("user_config.") and fields:
            key = name.removeprefix("user_config.")
            return _as_text(key, _setting(key, fields, values))
        raise InvalidArguments(
            f"the bundle uses the variable {shown('${' + name + '}')}, which the host does not provide."
        )

    resolved = _VARIABLE.sub(one, text)
    if "${" in _VARIABLE.sub("", text):
        raise InvalidArguments("the bundle has a `${` that does not open a variable the host knows.")
    return resolved


def resolve_default(key: str, text: str, *, strict: bool = True) -> str:
    """A `user_config` field's default text as the sandbox can take it: `${__dirname}` (→
    `/plugin`), `${/}` and `${pathSeparator}` resolved. Another variable (`${HOME}` does not
    exist in the sandbox) raises `InvalidArguments` naming it when `strict`, else `text` is kept
    as it is (the default of a setting nothing uses)."""
    try:
        return _substitute(text, {}, {}, SANDBOX_PLUGIN_DIR)
    except InvalidArguments:
        if strict:
            raise
        return text


def resolve_launch(
    manifest: BundleManifest,
    user_config: Mapping[str, UserConfigValue],
    install_dir: str = SANDBOX_PLUGIN_DIR,
) -> Launch:
    """The bundle's `mcp_config` with `${__dirname}` (→ `install_dir`), `${/}`,
    `${pathSeparator}` and `${user_config.KEY}` (the owner's value, else the field's default)
    resolved. An argument that is exactly one multi-valued setting becomes one argument per value.

    Raises `InvalidArguments`: no `mcp_config` (a `uv` bundle: the installer runs it), any other
    variable (`${HOME}` and the like do not exist in the sandbox), a setting the manifest does
    not declare, or a required setting without a value.
    """
    config = manifest.server.mcp_config
    if config is None:
        raise InvalidArguments("the bundle declares no mcp_config to start its server with.")
    fields = manifest.user_config
    args: list[str] = []
    for arg in config.args:
        whole = _VARIABLE.fullmatch(arg)
        if whole is not None and whole.group(1).startswith("user_config."):
            value = _setting(whole.group(1).removeprefix("user_config."), fields, user_config)
            if isinstance(value, list):
                args.extend(value)
                continue
            if value == "":  # an optional setting left unset: no argument at all
                continue
        args.append(_substitute(arg, fields, user_config, install_dir))
    return Launch(
        command=_substitute(config.command, fields, user_config, install_dir),
        args=tuple(args),
        env={name: _substitute(text, fields, user_config, install_dir) for name, text in config.env.items()},
    )


# ---------------------------------------------------------------------------------------------
# Safe extraction


@dataclass(frozen=True, slots=True)
class BundleCaps:
    """Limits on an archive, all checked from its central directory before anything is written
    (and the sizes again while writing, since a zip's headers can lie)."""

    max_members: int = 20_000
    max_file_bytes: int = 256 * 1024 * 1024
    max_total_bytes: int = 1024 * 1024 * 1024
    max_ratio: int = 200
    """Uncompressed over compressed size, per member above `ratio_floor` bytes and in total."""
    ratio_floor: int = 1024 * 1024


_DRIVE = re.compile(r"\A[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CHUNK = 1024 * 1024


def _path_problem(name: str) -> str | None:
    """Why `name` (a relative POSIX path, `/`-separated) is not a safe path, or None."""
    if _CONTROL.search(name):
        return f"{shown(name)} contains a control character"
    if "\\" in name:
        return f"{shown(name)} contains a backslash"
    if name.startswith("/"):
        return f"{shown(name)} is absolute"
    if _DRIVE.match(name):
        return f"{shown(name)} starts with a drive letter"
    parts = name.removesuffix("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"{shown(name)} has an empty, `.` or `..` part"
    if any(len(part.encode()) > 255 for part in parts) or len(name.encode()) > 1024:
        return f"{shown(name)} is too long"
    return None


def _member_name(info: zipfile.ZipInfo) -> str:
    """The member's name as UTF-8 text, NUL and all (zipfile cuts `filename` at a NUL and
    decodes names without the UTF-8 flag as cp437)."""
    if info.flag_bits & 0x800:
        return info.orig_filename
    try:
        return info.orig_filename.encode("cp437").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise InvalidArguments(f"the bundle has a file name that is not valid UTF-8: {shown(info.filename)}.") from None


def _member_kind(info: zipfile.ZipInfo) -> Literal["file", "dir"]:
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if stat.S_ISLNK(mode):
        raise InvalidArguments(f"the bundle's member {shown(info.filename)} is a symbolic link.")
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise InvalidArguments(f"the bundle's member {shown(info.filename)} is a device, pipe or socket.")
    return "dir" if info.is_dir() or kind == stat.S_IFDIR else "file"


@dataclass(frozen=True, slots=True)
class _Member:
    info: zipfile.ZipInfo
    path: PurePosixPath
    kind: Literal["file", "dir"]


def _check_member(info: zipfile.ZipInfo, caps: BundleCaps) -> _Member:
    name = _member_name(info)
    problem = _path_problem(name)
    if problem is not None:
        raise InvalidArguments(f"the bundle's member {problem}.")
    kind = _member_kind(info)
    if info.flag_bits & 0x1:
        raise InvalidArguments(f"the bundle's member {shown(name)} is encrypted.")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise InvalidArguments(f"the bundle's member {shown(name)} uses a compression the host does not read.")
    if info.file_size > caps.max_file_bytes:
        raise InvalidArguments(
            f"the bundle's member {shown(name)} is {info.file_size} bytes; the limit is {caps.max_file_bytes}."
        )
    if info.file_size > caps.ratio_floor and info.file_size > caps.max_ratio * max(info.compress_size, 1):
        raise InvalidArguments(f"the bundle's member {shown(name)} is compressed beyond {caps.max_ratio} to 1.")
    return _Member(info, PurePosixPath(name.removesuffix("/")), kind)


def _check_members(archive: zipfile.ZipFile, caps: BundleCaps) -> list[_Member]:
    infos = archive.infolist()
    if len(infos) > caps.max_members:
        raise InvalidArguments(f"the bundle has {len(infos)} members; the limit is {caps.max_members}.")
    members = [_check_member(info, caps) for info in infos]
    seen: dict[PurePosixPath, str] = {}
    for member in members:
        if member.path in seen:
            raise InvalidArguments(f"the bundle has the name {shown(str(member.path))} twice.")
        seen[member.path] = member.kind
    for member in members:  # a file cannot also be a folder another member sits in
        if any(seen.get(parent) == "file" for parent in member.path.parents):
            raise InvalidArguments(f"the bundle's member {shown(str(member.path))} sits under a file.")
    # The installer writes the plugin's manifest.yaml at the folder's top: a member may be a
    # file of that name (overwritten), never a folder (the write would fail).
    if seen.get(PurePosixPath(MANIFEST_NAME)) == "dir" or any(
        len(member.path.parts) > 1 and member.path.parts[0] == MANIFEST_NAME for member in members
    ):
        raise InvalidArguments(f"the bundle has a folder named {MANIFEST_NAME}, the name of the host's manifest.")
    total = sum(member.info.file_size for member in members)
    packed = sum(member.info.compress_size for member in members)
    if total > caps.max_total_bytes:
        raise InvalidArguments(f"the bundle unpacks to {total} bytes; the limit is {caps.max_total_bytes}.")
    if total > caps.ratio_floor and total > caps.max_ratio * max(packed, 1):
        raise InvalidArguments(f"the bundle is compressed beyond {caps.max_ratio} to 1.")
    return members


def _write_member(archive: zipfile.ZipFile, member: _Member, root: Path, caps: BundleCaps) -> int:
    target = root.joinpath(*member.path.parts)
    if member.kind == "dir":
        target.mkdir(parents=True, exist_ok=True)
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    limit = min(member.info.file_size, caps.max_file_bytes)
    written = 0
    with archive.open(member.info) as source, target.open("xb") as sink:
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            if written > limit:
                raise InvalidArguments(f"the bundle's member {shown(str(member.path))} is larger than it declares.")
            sink.write(chunk)
    executable = (member.info.external_attr >> 16) & 0o100
    target.chmod(0o755 if executable else 0o644)  # never setuid, setgid or world-writable
    return written


def extract_bundle(path: Path, dest: Path, caps: BundleCaps | None = None) -> BundleManifest:
    """Unpack the bundle at `path` into the new folder `dest` and return its manifest.

    Every member is checked before anything is written: a relative UTF-8 path without `..`,
    `.`, empty parts, backslashes, drive letters or control characters; no symbolic links,
    devices, pipes or sockets; no name twice; no encryption; sizes, member count and
    compression ratio within `caps`. `manifest.json` must be at the root and valid, and its
    `entry_point` must be a file in the archive.

    Unpacks into a temporary sibling of `dest` and renames it into place, so on any problem
    `InvalidArguments` (one sentence) is raised and `dest` does not exist.
    """
    caps = caps or BundleCaps()
    if dest.exists() or dest.is_symlink():
        raise InvalidArguments(f"the folder {shown(dest.name)} exists already.")
    if not path.is_file():
        raise InvalidArguments(f"the bundle {shown(path.name)} is not a file.")
    try:
        with zipfile.ZipFile(path) as archive:
            members = _check_members(archive, caps)
            manifest = _read_manifest(archive, members)
            _unpack(archive, members, dest, caps)
    except UnicodeDecodeError:  # zipfile decodes names flagged as UTF-8 when it opens the archive
        raise InvalidArguments("the bundle has a file name that is not valid UTF-8.") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError):
        raise InvalidArguments("the bundle is not a readable zip archive.") from None
    return manifest


def _read_manifest(archive: zipfile.ZipFile, members: Sequence[_Member]) -> BundleManifest:
    files = {member.path: member for member in members if member.kind == "file"}
    entry = files.get(PurePosixPath(BUNDLE_MANIFEST))
    if entry is None:
        raise InvalidArguments(f"the bundle has no {BUNDLE_MANIFEST} at its root.")
    with archive.open(entry.info) as source:
        data = source.read(1024 * 1024 + 1)
    manifest = parse_bundle_manifest(data)
    if PurePosixPath(manifest.server.entry_point) not in files:
        raise InvalidArguments(
            f"the bundle's entry_point {shown(manifest.server.entry_point)} is not a file in the bundle."
        )
    return manifest


def _unpack(archive: zipfile.ZipFile, members: Sequence[_Member], dest: Path, caps: BundleCaps) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        total = 0
        for member in members:
            total += _write_member(archive, member, staging, caps)
            if total > caps.max_total_bytes:
                raise InvalidArguments("the bundle unpacks to more bytes than it declares.")
        staging.chmod(0o755)
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
