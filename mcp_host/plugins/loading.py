"""Plugin folders: finding them, loading their manifests, and linting them.

Above: the registry and catalogue (which take a `LoadReport`) and the CLI (`mcp-host serve
--plugins DIR`, `mcp-host check DIR…`). Below: `manifest`, which reads one folder's
`manifest.yaml`.

A root is either a folder laid out like `capabilities/` (one sub-folder per plugin; hidden
sub-folders and sub-folders without a manifest are ignored) or a single plugin folder holding
`manifest.yaml`. Builtins must load — a broken builtin stops the host — while a broken plugin
from an extra root is skipped and reported. `check_paths` is stricter than loading: it reports
a plugin's mistakes (which load, read fail-closed) as errors.

Whether a stdio command's program or script can be started from the plugin folder is decided
once, by `launch_problems`, for both: loading keeps its findings among the plugin's mistakes
(the host logs them at start), `check` reports them. A program reached through a link out of
the folder (a plugin venv's `venv/bin/python`, a link to the base interpreter) is what the
sandbox runs (`sandbox.runtimes` binds its install tree), so it passes; a script `python` runs
must resolve inside the folder, the only tree of the plugin's the sandbox binds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mcp_host.errors import ManifestError

from .bundles import SANDBOX_PLUGIN_DIR
from .manifest import MANIFEST_NAME, Manifest, ManifestResult, collision_key, read_manifest
from .text_safety import shown

__all__ = [
    "CheckReport",
    "LoadReport",
    "Plugin",
    "check_paths",
    "declared_collisions",
    "launch_problems",
    "load_plugins",
    "plugin_folders",
]


@dataclass(frozen=True)
class Plugin:
    """One loaded plugin: its manifest, its folder (absolute, resolved), and what loading it
    found without stopping it: warnings, and mistakes (`manifest.ManifestResult`)."""

    manifest: Manifest
    folder: Path
    builtin: bool
    warnings: tuple[str, ...] = ()
    mistakes: tuple[ManifestError, ...] = ()


@dataclass(frozen=True)
class LoadReport:
    """The plugins that loaded (sorted by id) and the problems of the ones skipped."""

    plugins: tuple[Plugin, ...]
    errors: tuple[ManifestError, ...]


def plugin_folders(root: Path) -> list[Path]:
    """The plugin folders under `root`, resolved and sorted; `[]` if there are none.

    `root` itself when it holds `manifest.yaml`, else each non-hidden sub-folder that does.
    """
    root = root.resolve()
    if (root / MANIFEST_NAME).is_file():
        return [root]
    if not root.is_dir():
        return []
    found = {
        child.resolve()
        for child in root.iterdir()
        if not child.name.startswith(".") and child.is_dir() and (child / MANIFEST_NAME).is_file()
    }
    return sorted(found)


def _root_error(root: Path) -> ManifestError | None:
    if not root.exists():
        return ManifestError(str(root), "", "no such folder")
    if not root.is_dir():
        return ManifestError(str(root), "", "not a folder")
    if not plugin_folders(root):
        return ManifestError(str(root), "", f"no plugin folders (no {MANIFEST_NAME} here or one level down)")
    return None


def _id_error(plugin: Plugin, problem: str) -> ManifestError:
    return ManifestError(str(plugin.folder / MANIFEST_NAME), "id", problem)


def _read_plugin(folder: Path, *, builtin: bool) -> tuple[Plugin | None, ManifestResult]:
    """The plugin in `folder` (None when its manifest does not load) with its launch problems
    among its mistakes, and what reading the manifest found."""
    result = read_manifest(folder)
    if result.manifest is None:
        return None, result
    plugin = Plugin(result.manifest, folder, builtin, result.warnings, result.mistakes)
    launch = launch_problems(plugin)
    if launch:
        plugin = Plugin(result.manifest, folder, builtin, result.warnings, (*result.mistakes, *launch))
    return plugin, result


def _load_builtins(root: Path) -> list[Plugin]:
    """Every builtin under `root`; raises the first `ManifestError` (the host must not start)."""
    if not root.is_dir():
        raise ManifestError(str(root), "", "builtin plugin folder does not exist")
    plugins: dict[str, Plugin] = {}
    for folder in plugin_folders(root):
        plugin, result = _read_plugin(folder, builtin=True)
        if plugin is None:
            raise result.errors[0]
        other = plugins.get(plugin.manifest.id)
        if other is not None:
            raise _id_error(plugin, f"{plugin.manifest.id!r} is also the id of {other.folder}")
        plugins[plugin.manifest.id] = plugin
    return list(plugins.values())


def _read_extras(roots: Sequence[Path], skip: set[Path]) -> tuple[list[Plugin], list[ManifestError]]:
    """Plugins under `roots` (each folder once, none in `skip`) and the problems of the rest."""
    plugins: list[Plugin] = []
    errors: list[ManifestError] = []
    for folder in _each_folder(roots, set(skip), errors):
        plugin, result = _read_plugin(folder, builtin=False)
        if plugin is None:
            errors.extend(result.errors)
        else:
            plugins.append(plugin)
    return plugins, errors


def _each_folder(roots: Sequence[Path], seen: set[Path], errors: list[ManifestError]) -> Iterator[Path]:
    """Each plugin folder under `roots` once, none already in `seen` (which it fills); a root
    that is neither a plugin folder nor a folder of them adds its error to `errors`."""
    for root in roots:
        root_error = _root_error(root)
        if root_error is not None:
            errors.append(root_error)
            continue
        for folder in plugin_folders(root):
            if folder not in seen:
                seen.add(folder)
                yield folder


def _refuse_duplicate_ids(
    builtins: Sequence[Plugin], extras: Sequence[Plugin]
) -> tuple[list[Plugin], list[ManifestError]]:
    """Drop every extra whose id a builtin or another extra also uses; say why for each."""
    builtin_ids = {plugin.manifest.id: plugin for plugin in builtins}
    by_id: defaultdict[str, list[Plugin]] = defaultdict(list)
    for plugin in extras:
        by_id[plugin.manifest.id].append(plugin)
    kept: list[Plugin] = []
    errors: list[ManifestError] = []
    for plugin_id, group in by_id.items():
        if plugin_id in builtin_ids:
            owner = builtin_ids[plugin_id].folder
            errors.extend(_id_error(p, f"{plugin_id!r} is the id of the builtin plugin {owner}") for p in group)
        elif len(group) > 1:
            for plugin in group:
                others = ", ".join(str(p.folder) for p in group if p is not plugin)
                errors.append(_id_error(plugin, f"{plugin_id!r} is also the id of {others}"))
        else:
            kept.append(group[0])
    return kept, errors


def load_plugins(builtin_root: Path | None, extra_roots: Sequence[Path]) -> LoadReport:
    """Load the builtins under `builtin_root` and the plugins under each of `extra_roots`.

    Raises `ManifestError` if `builtin_root` is missing or any builtin fails to load. For the
    extra roots nothing raises: a missing or empty root, every problem of a plugin that fails
    to load, and every extra whose id is taken (by a builtin, or by another extra — then all of
    them are skipped) become entries of `LoadReport.errors`.
    """
    builtins = _load_builtins(builtin_root) if builtin_root is not None else []
    extras, errors = _read_extras(extra_roots, skip={plugin.folder for plugin in builtins})
    kept, id_errors = _refuse_duplicate_ids(builtins, extras)
    plugins = sorted([*builtins, *kept], key=lambda plugin: plugin.manifest.id)
    return LoadReport(tuple(plugins), (*errors, *id_errors))


@dataclass(frozen=True)
class CheckReport:
    """What `mcp-host check` found: errors (the exit status) and warnings, each naming its file."""

    errors: tuple[ManifestError, ...]
    warnings: tuple[ManifestError, ...]


def check_paths(paths: Sequence[Path], *, builtin_root: Path | None = None) -> CheckReport:
    """Every problem `mcp-host check` reports for `paths`, all of them in one run.

    Errors: a path with no plugin folders; every error and every mistake of every manifest
    (`manifest.read_manifest`) and every launch problem (`launch_problems`), as loading finds
    them; ids used by more than one of the folders found, or by a builtin under `builtin_root`
    other than those folders, which `serve` would refuse. A folder under `builtin_root` is
    checked like any other when it is in `paths`.
    """
    errors: list[ManifestError] = []
    warnings: list[ManifestError] = []
    checked: list[Plugin] = []
    seen: set[Path] = set()
    for folder in _each_folder(paths, seen, errors):
        plugin, result = _read_plugin(folder, builtin=False)
        errors.extend((*result.errors, *(result.mistakes if plugin is None else plugin.mistakes)))
        warnings.extend(ManifestError(str(result.path), "", warning) for warning in result.warnings)
        if plugin is not None:
            checked.append(plugin)
    others = [plugin for plugin in _builtins_that_load(builtin_root) if plugin.folder not in seen]
    errors.extend(_refuse_duplicate_ids(others, checked)[1])
    return CheckReport(tuple(errors), tuple(warnings))


def _builtins_that_load(root: Path | None) -> list[Plugin]:
    """The builtins under `root` that load, for their ids; `check` is not about the others."""
    if root is None or not root.is_dir():
        return []
    plugins = []
    for folder in plugin_folders(root):
        manifest = read_manifest(folder).manifest
        if manifest is not None:
            plugins.append(Plugin(manifest, folder, builtin=True))
    return plugins


# Options of `python` that take the next argument as their value, and those after which no
# script is run (a module or a command string instead).
_PYTHON_VALUED_OPTIONS = frozenset({"-W", "-X"})
_PYTHON_NO_SCRIPT = frozenset({"-m", "-c", "-"})


def _python_script(args: Sequence[str]) -> int | None:
    """The index in `args` of the script `python` runs, or None when it runs none."""
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
        elif arg in _PYTHON_NO_SCRIPT or arg.startswith(("-m", "-c")) and not arg.startswith("--"):
            return None
        elif arg in _PYTHON_VALUED_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return index
    return None


def launch_problems(plugin: Plugin) -> list[ManifestError]:
    """Why `plugin`'s stdio child could not be started from its folder: a command given as a
    relative path that is not a file there, or the script `command: python` runs that is not a
    file inside the folder (the sandbox binds no other tree of the plugin's). The one rule for
    loading (kept among `Plugin.mistakes`) and `mcp-host check` (errors).

    A command path is the folder's own entry — every folder on its way inside the plugin folder
    — and may be a link to a program elsewhere: the launch runs that program and binds its
    install tree (`sandbox.runtimes.command_view`), as for a plugin venv's `venv/bin/python`.
    """
    transport = plugin.manifest.transport
    if transport is None or transport.kind != "stdio" or transport.command is None:
        return []
    path = str(plugin.folder / MANIFEST_NAME)
    if transport.command == "python":
        index = _python_script(transport.args)
        if index is None:
            if transport.args:
                return []
            return [ManifestError(path, "transport.args", "python runs no script: name it, e.g. [server.py]")]
        field, value, ok = f"transport.args.{index}", transport.args[index], _script_inside
    elif "/" in transport.command and not transport.command.startswith("/"):
        field, value, ok = "transport.command", transport.command, _program_inside
    else:
        return []
    if ok(plugin.folder, value):
        return []
    return [ManifestError(path, field, f"{shown(value)} is not a file inside the plugin folder")]


def _script_inside(folder: Path, relative: str) -> bool:
    """Whether `relative` names a file inside `folder` after resolving `..` and every link; a
    path under `/plugin`, where the sandbox shows the folder (a bundle's `${__dirname}`), names
    the file of the folder below it."""
    if relative.startswith(f"{SANDBOX_PLUGIN_DIR}/"):
        relative = relative.removeprefix(f"{SANDBOX_PLUGIN_DIR}/")
    if relative.startswith("/"):
        return False
    root = folder.resolve()
    target = (root / relative).resolve()
    return target.is_relative_to(root) and target.is_file()


def _program_inside(folder: Path, relative: str) -> bool:
    """Whether `relative` is an entry of `folder` (its parent folder resolves inside it, its
    name is no `..`) that is, or links to, a file."""
    parts = PurePosixPath(relative).parts
    if relative.startswith("/") or not parts or parts[-1] in (".", ".."):
        return False
    root = folder.resolve()
    entry = root.joinpath(*parts)
    return entry.parent.resolve().is_relative_to(root) and entry.is_file()


def declared_collisions(plugins: Iterable[Plugin]) -> dict[str, list[str]]:
    """Visitor tool names that manifests of different plugins both declare.

    Names that differ only in case, `-` or `_` collide too (docs/security.md E9, `collision_key`). Each
    colliding name as declared maps to the sorted ids of every plugin declaring it or a variant
    of it. Not a load
    error: the runtime reconciles the children's real lists and hides every colliding tool.
    """
    by_folded: defaultdict[str, set[tuple[str, str]]] = defaultdict(set)
    for plugin in plugins:
        for name in plugin.manifest.visitor_tools:
            by_folded[collision_key(name)].add((name, plugin.manifest.id))
    collisions: dict[str, list[str]] = {}
    for declared in by_folded.values():
        ids = sorted({plugin_id for _, plugin_id in declared})
        if len(ids) > 1:
            collisions.update((name, list(ids)) for name, _ in sorted(declared))
    return dict(sorted(collisions.items()))
