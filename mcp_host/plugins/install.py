"""Installing a plugin from npm or PyPI into the host's data directory, listing and removing it.

Above: `admin` (the plugin-admin service of `mcp-host plugin add|remove` and the owner door),
`mcp-host plugin list` and the host's start (`installed_root`, one more plugin root). Below: npm
and pip, run as programs, and the manifest model (`manifest`), which the generated
`manifest.yaml` is loaded back with before it counts.

Every install happens in `<data dir>/plugins/.staging-<random>` (hidden: `loading` skips dot
folders) and is renamed to `<data dir>/plugins/<id>` only once complete; any failure removes
the staging folder, so nothing is left behind, and raises one sentence (`HostError`). npm runs
with `--ignore-scripts` and pip with `--only-binary :all:`: no package code runs at install.
The manifest grants nothing: `acl: role_granted`, no network (npm and PyPI packages name no
hosts; the owner gives one with `mcp-host plugin allow`), no host ops, no workspace, one
instance per session. Within `installer_output(on_line)`, each line npm, pip or venv prints is
handed to `on_line` as it comes (the command line prints it, the owner door sends it as MCP
progress); `reach` (its own module) says in sentences what the installed server can reach.
"""

from __future__ import annotations

import configparser
import datetime
import json
import re
import secrets
import shutil
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

import yaml

from mcp_host.errors import InvalidArguments, ManifestError, Unavailable

from .manifest import MANIFEST_NAME, MAX_TITLE_CHARS, PLUGIN_ID_RE, Manifest, load_manifest
from .sources import (
    BundleSource,
    NpmSource,
    PypiSource,
    RegistryEntrySource,
    RemoteSource,
    Source,
    plugin_id_words,
    remote_id_words,
)
from .text_safety import MAX_DESCRIPTION_BYTES, printable, text_problem

__all__ = [
    "Installed",
    "install_npm",
    "install_pypi",
    "install_remote",
    "installed",
    "installed_root",
    "installer_output",
    "plugins_dir",
    "recorded_source",
    "remove",
]

_STAGING_PREFIX = ".staging-"
_TIMEOUT_S = 900
_NICENESS = 10
_NPM_BIN_RE = re.compile(r"\A[A-Za-z0-9@._/-]{1,256}\Z")
_SCRIPT_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_LINE_CHARS = 200  # of one installer output line passed on
_KEPT_LINES = 400  # of an installer's output kept to find the line that says why it failed
_EXIT_WAIT_S = 10.0  # for an installer to exit once its output ended
# npm's second line per package, the tarball read back from its cache (`http cache … 0ms (cache hit)`)
# after the `http fetch` that got it: not passed on as progress.
_NOISE_RE = re.compile(r"\Anpm http cache ")
_SOURCE_RE = re.compile(r"\A# Installed by `mcp-host plugin add (.{1,300})` on ")
"""The manifest header's first line, which names the source (`recorded_source` reads it back)."""


@dataclass(frozen=True)
class Installed:
    """A plugin folder `add` made: its id, folder, and the command the host starts."""

    id: str
    folder: Path
    command: str
    args: tuple[str, ...]
    version: str


InstallerLine = Callable[[str], None]
_OUTPUT: ContextVar[InstallerLine | None] = ContextVar("mcp_host_installer_output", default=None)


@contextmanager
def installer_output(on_line: InstallerLine) -> Iterator[None]:
    """Within the block (in this thread), every non-empty line npm, pip or venv prints while
    installing is passed to `on_line` as it comes, as `"npm: <line>"` (npm's own `npm ` prefix
    and its cache-hit echoes dropped), printable and at most 200 characters. `on_line` runs in
    the installer's thread; what it raises is not caught."""
    token = _OUTPUT.set(on_line)
    try:
        yield
    finally:
        _OUTPUT.reset(token)


def recorded_source(folder: Path) -> str | None:
    """The source text `plugin add` recorded in the first line of `folder`'s manifest (None: no
    such line, or no manifest)."""
    try:
        with (folder / MANIFEST_NAME).open(encoding="utf-8") as file:
            found = _SOURCE_RE.match(file.readline(512))
    except OSError:
        return None
    return found.group(1) if found else None


def plugins_dir(data_dir: Path) -> Path:
    """Where installed plugins live: `<data dir>/plugins`."""
    return data_dir / "plugins"


def installed_root(data_dir: Path) -> Path | None:
    """`<data dir>/plugins` when it holds an installed plugin (a root for `load_plugins`), else
    None: a host that never installed one has no such root, which is fine."""
    root = plugins_dir(data_dir)
    if not root.is_dir():
        return None
    has = any(not c.name.startswith(".") and (c / MANIFEST_NAME).is_file() for c in root.iterdir())
    return root if has else None


def installed(data_dir: Path) -> list[tuple[str, Path, Manifest | None]]:
    """Each installed plugin folder: its name, path and manifest (None when it does not load)."""
    root = plugins_dir(data_dir)
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        try:
            manifest: Manifest | None = load_manifest(folder)
        except ManifestError:
            manifest = None
        found.append((folder.name, folder, manifest))
    return found


def remove(data_dir: Path, plugin_id: str) -> Path:
    """Delete the installed plugin `plugin_id`'s folder; returns it. Its store and config stay
    (`mcp-host uninstall` drops them)."""
    check_id(plugin_id)
    folder = plugins_dir(data_dir) / plugin_id
    if not folder.is_dir() or folder.is_symlink():
        raise InvalidArguments(f"no plugin {plugin_id} is installed in {plugins_dir(data_dir)}")
    doomed = folder.with_name(f"{_STAGING_PREFIX}removed-{secrets.token_hex(6)}")
    folder.rename(doomed)  # gone from the host's view at once; the delete may take a while
    shutil.rmtree(doomed, ignore_errors=True)
    return folder


def install_npm(
    source: NpmSource, data_dir: Path, *, plugin_id: str | None = None, spec: str | None = None
) -> Installed:
    """Install `source` with npm as a plugin folder; `spec` replaces what npm is given (a local
    tarball, for tests offline) while `source.package` still names the package installed."""
    with Staging(data_dir, default_id(source) if plugin_id is None else plugin_id) as staging:
        got = npm_into(staging.path, source, spec)
        return staging.finish(source, f"{source.package} {got.version} from npm", got)


def install_pypi(
    source: PypiSource, data_dir: Path, *, plugin_id: str | None = None, spec: str | None = None
) -> Installed:
    """Install `source` with pip into the plugin's own virtual environment; `spec` replaces
    what pip is given (a local wheel, installed with --no-index, for tests offline)."""
    with Staging(data_dir, default_id(source) if plugin_id is None else plugin_id) as staging:
        got = pypi_into(staging.path, source, spec)
        return staging.finish(source, f"{source.package} {got.version} from PyPI", got)


# The one setting a remote plugin's manifest declares: what it sends as Authorization, if set.
_REMOTE_AUTH = {
    "key": "authorization",
    "label": "Authorization header",
    "type": "string",
    "secret": True,
    "description": "Sent to the remote server as its Authorization header when set (e.g. Bearer <token>).",
}


def install_remote(source: RemoteSource, data_dir: Path, *, plugin_id: str | None = None) -> Installed:
    """Write a plugin folder whose manifest reaches the remote MCP server `source` over
    streamable HTTP: its id from the host name (unless given), the url's host the only one it
    may reach, and one optional secret setting sent as Authorization. It grants nothing
    (`role_granted`, one MCP session per visitor session); its tools wait for approval."""
    chosen = ".".join(remote_id_words(source)) if plugin_id is None else plugin_id
    if plugin_id is None and not PLUGIN_ID_RE.match(chosen):
        raise InvalidArguments(f"no plugin id can be made from {printable(source.host, 80)}; choose one with --id")
    with Staging(data_dir, chosen) as staging:
        manifest: dict[str, Any] = {
            "id": staging.plugin_id,
            "title": _shown_text(source.host, "title", MAX_TITLE_CHARS, multiline=False),
            "version": "",
            "description": _shown_text(f"The remote MCP server at {source.url}", "description", 2048, multiline=True),
            "acl": "role_granted",
            "instances": "per_session",
            "config": [_REMOTE_AUTH],
            "transport": {
                "kind": "http",
                "url": source.url,
                "allowed_hosts": [source.host],
                "headers_from_config": {"Authorization": _REMOTE_AUTH["key"]},
            },
        }
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        header = (
            f"# Installed by `mcp-host plugin add {printable(str(source), 300)}` on {today}:\n"
            f"# a remote MCP server; the host connects to {printable(source.host, 200)} only.\n"
            "# Nothing runs locally; the owner approves its tools before visitors see them.\n"
        )
        return staging.write(manifest, header, Installed(staging.plugin_id, staging.target, source.url, (), ""))


@dataclass(frozen=True)
class Launched:
    """What an installer put in a staging folder: the command that starts it (relative to the
    plugin folder), the environment and owner config it declares, and its metadata."""

    command: str
    args: tuple[str, ...]
    version: str
    title: object
    description: object
    env: tuple[tuple[str, str], ...] = ()
    config: tuple[dict[str, Any], ...] = ()
    env_from_config: tuple[tuple[str, str], ...] = ()
    """(variable, config key): values the owner gives, put in the child's environment at start."""


def npm_into(folder: Path, source: NpmSource, spec: str | None) -> Launched:
    """Install `source` (or `spec`) with npm into `folder`; what starts it."""
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed; install Node.js 20+ with npm to add npm packages")
    argv = [npm, "install", "--prefix", str(folder), "--ignore-scripts", "--no-audit", "--no-fund"]
    # --loglevel=http: a line per package fetched, the progress `installer_output` passes on.
    _run([*argv, "--no-save", "--no-package-lock", "--loglevel=http", "--", spec or source.spec], "npm", source)
    package_dir = folder / "node_modules" / source.package
    meta = _json_file(package_dir / "package.json", source)
    bin_path = _npm_bin(meta, source)
    if not (package_dir / bin_path).resolve().is_relative_to(package_dir.resolve()):
        raise InvalidArguments(f"{source.package}'s bin points outside its package")
    if not (package_dir / bin_path).is_file():
        raise InvalidArguments(f"{source.package}'s bin {printable(bin_path, 80)} is not a file in the package")
    args = (f"node_modules/{source.package}/{bin_path.removeprefix('./')}",)
    return Launched("node", args, _str(meta.get("version")), source.package, meta.get("description"))


def pypi_into(folder: Path, source: PypiSource, spec: str | None) -> Launched:
    """Install `source` (or `spec`) with pip into `folder`/venv; what starts it."""
    _run([_base_python(), "-m", "venv", str(folder / "venv")], "venv", source)
    pip = [str(folder / "venv" / "bin" / "python"), "-m", "pip", "install", "--only-binary", ":all:"]
    pip += ["--disable-pip-version-check", "--no-input", "--progress-bar", "off"]
    if spec is not None and Path(spec).is_file():
        pip.append("--no-index")
    _run([*pip, "--", spec or source.spec], "pip", source)
    dist_info = _dist_info(folder / "venv", source)
    headers = HeaderParser().parsestr((dist_info / "METADATA").read_text(encoding="utf-8", errors="replace"))
    script = _console_script(dist_info, source)
    title = headers.get("Name") or source.package
    return Launched(
        "venv/bin/python", (f"venv/bin/{script}",), _str(headers.get("Version")), title, headers.get("Summary")
    )


# ---------------------------------------------------------------------------------------------
# The staging folder


class Staging:
    """`<root>/.staging-<random>` for one install: renamed to `<root>/<id>` by `finish`,
    removed on any failure (and on success if `finish` was not reached)."""

    def __init__(self, data_dir: Path, plugin_id: str | None, *, replacing: bool = False) -> None:
        """`replacing`: an upgrade, finished into another hidden folder beside the installed one."""
        self.replacing = replacing
        self.root = plugins_dir(data_dir)
        self.path = self.root / f"{_STAGING_PREFIX}{secrets.token_hex(8)}"
        self.plugin_id = ""
        self.target = self.root
        if plugin_id is not None:
            self.name(plugin_id)

    def name(self, plugin_id: str) -> None:
        """The id (and folder name) the plugin gets; refused when taken. `None` at the start
        (a bundle's id comes from its manifest) must be named before `finish`."""
        check_id(plugin_id)
        target = self.root / plugin_id
        if self.replacing:
            target = self.root / f"{_STAGING_PREFIX}new-{plugin_id}-{secrets.token_hex(6)}"
        elif target.exists() or target.is_symlink():
            raise InvalidArguments(f"a plugin {plugin_id} is already installed at {target}; choose --id")
        self.plugin_id, self.target = plugin_id, target

    def __enter__(self) -> Staging:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.path.mkdir()
        except OSError as exc:
            raise Unavailable(f"cannot make a folder in {self.root} ({exc.strerror or 'error'})") from None
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def finish(self, source: Source, origin: str, got: Launched) -> Installed:
        """Write and check the manifest (`origin`: what was installed, for its header), then
        move the folder into place."""
        if not self.plugin_id:
            raise InvalidArguments("the plugin has no id; choose one with --id")
        transport: dict[str, Any] = {"command": got.command, "args": list(got.args)}
        if got.env:
            transport["env"] = dict(got.env)
        if got.env_from_config:
            transport["env_from_config"] = dict(got.env_from_config)
        transport["sandbox"] = {"allow_net": False}
        manifest: dict[str, Any] = {
            "id": self.plugin_id,
            "title": _shown_text(got.title, "title", MAX_TITLE_CHARS, multiline=False),
            "version": _shown_text(got.version, "version", 64, multiline=False),
            "description": _shown_text(got.description, "description", MAX_DESCRIPTION_BYTES // 4, multiline=True),
            "acl": "role_granted",
            "instances": "per_session",
            "transport": transport,
        }
        if got.config:
            manifest["config"] = list(got.config)
        if isinstance(source, BundleSource | RegistryEntrySource):
            source = type(source)(source.path.absolute())  # read again by an upgrade, from anywhere
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        header = (
            f"# Installed by `mcp-host plugin add {printable(str(source), 300)}` on {today}:\n"
            f"# {printable(origin, 400)}.\n"
            "# No network, no host ops, no workspace; the owner approves its tools before visitors see them.\n"
        )
        return self.write(manifest, header, Installed(self.plugin_id, self.target, got.command, got.args, got.version))

    def write(self, manifest: dict[str, Any], header: str, done: Installed) -> Installed:
        """Write `manifest` under `header`, check that it loads, and move the folder into place."""
        body = yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True)
        (self.path / MANIFEST_NAME).write_text(header + body, encoding="utf-8")
        try:
            load_manifest(self.path)
        except ManifestError as exc:  # our own manifest: the package's metadata did not fit it
            raise InvalidArguments(
                f"the generated manifest does not load ({exc.field or 'manifest'}: invalid)"
            ) from None
        try:
            self.path.rename(self.target)
        except OSError:
            raise InvalidArguments(f"a plugin {self.plugin_id} appeared at {self.target} meanwhile") from None
        return done


# ---------------------------------------------------------------------------------------------
# Helpers


def check_id(plugin_id: str) -> None:
    """Refuse `plugin_id` unless it is a plugin id (one sentence)."""
    if not PLUGIN_ID_RE.match(plugin_id):
        raise InvalidArguments(
            f"{printable(plugin_id, 80)!r} is not a plugin id (dot-joined words of a-z 0-9 _, each starting"
            " with a letter, at most 64)"
        )


def default_id(source: NpmSource | PypiSource) -> str:
    """The plugin id `source` gets unless the owner names one."""
    plugin_id = ".".join(plugin_id_words(source))
    if not PLUGIN_ID_RE.match(plugin_id):
        raise InvalidArguments(f"no plugin id can be made from {source.package}; choose one with --id")
    return plugin_id


def _run(argv: list[str], tool: str, source: NpmSource | PypiSource) -> None:
    """Run `argv`, passing each line it prints to `installer_output`'s `on_line` (if any); a
    failure raises one sentence with the tool's own first error line."""
    # npm and pip run only on CPU time nobody else wants (SCHED_IDLE; else at nice 10): on a
    # small machine the host keeps answering the sessions it serves while a package installs
    # (bench/install.py measures their p99 before and during an install).
    chrt, nice = shutil.which("chrt"), shutil.which("nice")
    if chrt is not None:
        niced = [chrt, "--idle", "0", *argv]
    elif nice is not None:
        niced = [nice, "-n", str(_NICENESS), *argv]
    else:
        niced = argv
    on_line = _OUTPUT.get()
    kept: deque[str] = deque(maxlen=_KEPT_LINES)
    expired = threading.Event()
    try:
        process = subprocess.Popen(
            niced,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, in the order the tool wrote it
            text=True,
            errors="replace",
        )
    except OSError:
        raise Unavailable(f"{tool} could not be started to install {source}") from None

    def expire() -> None:
        expired.set()
        process.kill()

    timer = threading.Timer(_TIMEOUT_S, expire)
    timer.start()
    assert process.stdout is not None  # stdout=PIPE
    read_all = False
    try:
        for raw in process.stdout:
            line = raw.strip()
            if line:
                kept.append(line)
                if on_line is not None and not _NOISE_RE.match(line):
                    on_line(f"{tool}: {printable(line.removeprefix(f'{tool} '), _LINE_CHARS)}")
        read_all = True
    finally:
        process.stdout.close()
        try:  # its output ended: it exits now (else on_line raised: it is stopped at once)
            process.wait(timeout=_EXIT_WAIT_S if read_all else 0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        timer.cancel()
    if expired.is_set():
        raise Unavailable(f"{tool} did not finish installing {source} within {_TIMEOUT_S} s")
    if process.returncode != 0:
        why = _first_error("\n".join(kept)) or f"exit status {process.returncode}"
        raise InvalidArguments(f"{tool} could not install {source}: {why}")


def _first_error(output: str) -> str:
    """The line of npm's or pip's output that says why (npm: its error code and summary; pip:
    its ERROR line), printable and short."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for marker in ("npm error code", "npm error 404", "ERROR:", "npm error", "error:"):
        for line in lines:
            if line.startswith(marker):
                return printable(line, 240)
    return printable(lines[-1], 240) if lines else ""


def _json_file(path: Path, source: NpmSource | PypiSource) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InvalidArguments(f"{source} installed no readable package.json for {source.package}") from None
    if not isinstance(data, dict):
        raise InvalidArguments(f"{source.package}'s package.json is not an object")
    return data


def _npm_bin(meta: dict[str, Any], source: NpmSource) -> str:
    """The package's one program (`bin`): the entry named after the package when it has
    several."""
    raw = meta.get("bin")
    if isinstance(raw, str):
        bins = {source.package.rpartition("/")[2]: raw}
    elif isinstance(raw, dict):
        bins = {str(k): v for k, v in raw.items() if isinstance(v, str)}
    else:
        bins = {}
    if not bins:
        raise InvalidArguments(f"{source.package} declares no program (bin) to start as an MCP server")
    unscoped = source.package.rpartition("/")[2]
    if len(bins) > 1 and unscoped not in bins:
        names = ", ".join(printable(name, 40) for name in sorted(bins))
        raise InvalidArguments(f"{source.package} declares several programs ({names}); none is named {unscoped}")
    path = bins[unscoped] if unscoped in bins else next(iter(bins.values()))
    if not _NPM_BIN_RE.match(path) or ".." in path.split("/") or path.startswith("/"):
        raise InvalidArguments(f"{source.package}'s bin is not a relative path inside the package")
    return path


def _base_python() -> str:
    """The host's base interpreter (not its virtualenv's): a plugin's venv links to it, and the
    sandbox binds it (`sandbox.runtimes`)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return str(base)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_info(venv: Path, source: PypiSource) -> Path:
    wanted = _normal(source.package)
    for dist_info in sorted(venv.glob("lib/python*/site-packages/*.dist-info")):
        metadata = dist_info / "METADATA"
        if not metadata.is_file():
            continue
        name = HeaderParser().parsestr(metadata.read_text(encoding="utf-8", errors="replace")).get("Name", "")
        if _normal(name) == wanted:
            return dist_info
    raise InvalidArguments(f"pip installed no distribution named {source.package}")


def _console_script(dist_info: Path, source: PypiSource) -> str:
    """The distribution's one console script: the one named after it when it has several."""
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string((dist_info / "entry_points.txt").read_text(encoding="utf-8"))
    except (OSError, configparser.Error):
        pass
    scripts = sorted(parser["console_scripts"]) if parser.has_section("console_scripts") else []
    if not scripts:
        raise InvalidArguments(f"{source.package} declares no console script to start as an MCP server")
    named = [s for s in scripts if _normal(s) == _normal(source.package)]
    if len(scripts) > 1 and not named:
        names = ", ".join(printable(s, 40) for s in scripts)
        raise InvalidArguments(f"{source.package} declares several console scripts ({names}); none is named after it")
    script = named[0] if named else scripts[0]
    if not _SCRIPT_RE.match(script):
        raise InvalidArguments(f"{source.package}'s console script name is not a plain file name")
    return script


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _shown_text(value: object, field: str, limit: int, *, multiline: bool) -> str:
    """`value` when it is text the manifest accepts, cut to `limit` characters; else ""."""
    if not isinstance(value, str):
        return ""
    text = value.strip()
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text if text_problem(text, field, multiline=multiline) is None else ""
