"""Plugin folders: finding them, loading their manifests, and linting them.

Above: the registry and catalogue (which take a `LoadReport`) and the CLI (`mcp-host serve
--plugins DIR`, `mcp-host check DIR…`). Below: `manifest`, which reads one folder's
`manifest.yaml`.

A root is either a folder laid out like `capabilities/` (one sub-folder per plugin; hidden
sub-folders and sub-folders without a manifest are ignored) or a single plugin folder holding
`manifest.yaml`. Builtins must load — a broken builtin stops the host — while a broken plugin
from an extra root is skipped and reported. `check_paths` is stricter than loading: it also
reports a manifest's mistakes (which load, read fail-closed) and a stdio command's script that
is not a file in the plugin's folder, as errors.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from mcp_host.errors import ManifestError

from .manifest import MANIFEST_NAME, Manifest, collision_key, read_manifest
from .text_safety import shown

__all__ = [
    "CheckReport",
    "LoadReport",
    "Plugin",
    "check_paths",
    "declared_collisions",
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


def _load_builtins(root: Path) -> list[Plugin]:
    """Every builtin under `root`; raises the first `ManifestError` (the host must not start)."""
    if not root.is_dir():
        raise ManifestError(str(root), "", "builtin plugin folder does not exist")
    plugins: dict[str, Plugin] = {}
    for folder in plugin_folders(root):
        result = read_manifest(folder)
        if result.manifest is None:
            raise result.errors[0]
        plugin = Plugin(result.manifest, folder, True, result.warnings, result.mistakes)
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
        result = read_manifest(folder)
        if result.manifest is None:
            errors.extend(result.errors)
        else:
            plugins.append(Plugin(result.manifest, folder, False, result.warnings, result.mistakes))
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
    (`manifest.read_manifest`); a stdio `command` or the script `command: python` runs that is
    not a file inside the plugin's folder; ids used by more than one of the folders found, or by
    a builtin under `builtin_root` other than those folders, which `serve` would refuse. A
    folder under `builtin_root` is checked like any other when it is in `paths`.
    """
    errors: list[ManifestError] = []
    warnings: list[ManifestError] = []
    checked: list[Plugin] = []
    seen: set[Path] = set()
    for folder in _each_folder(paths, seen, errors):
        result = read_manifest(folder)
        errors.extend((*result.errors, *result.mistakes))
        warnings.extend(ManifestError(str(result.path), "", warning) for warning in result.warnings)
        if result.manifest is not None:
            plugin = Plugin(result.manifest, folder, False, result.warnings, result.mistakes)
            errors.extend(_script_problems(plugin))
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


def _script_problems(plugin: Plugin) -> list[ManifestError]:
    """A stdio command given as a relative path, or the script of `command: python`, that is
    not a file inside the plugin folder (the child would fail to start, or reach outside)."""
    transport = plugin.manifest.transport
    if transport is None or transport.kind != "stdio" or transport.command is None:
        return []
    path = str(plugin.folder / MANIFEST_NAME)
    named: list[tuple[str, str]] = []
    if transport.command == "python":
        index = _python_script(transport.args)
        if index is not None:
            named.append((f"transport.args.{index}", transport.args[index]))
        elif not transport.args:
            return [ManifestError(path, "transport.args", "python runs no script: name it, e.g. [server.py]")]
    elif "/" in transport.command and not transport.command.startswith("/"):
        named.append(("transport.command", transport.command))
    return [
        ManifestError(path, field, f"{shown(value)} is not a file inside the plugin folder")
        for field, value in named
        if not _inside(plugin.folder, value)
    ]


def _inside(folder: Path, relative: str) -> bool:
    """Whether `relative` names a file inside `folder` (after resolving `..` and links)."""
    if relative.startswith("/"):
        return False
    target = (folder / relative).resolve()
    return target.is_relative_to(folder) and target.is_file()


def declared_collisions(plugins: Iterable[Plugin]) -> dict[str, list[str]]:
    """Visitor tool names that manifests of different plugins both declare.

    Names that differ only in case, `-` or `_` collide too (SECURITY E9, `collision_key`). Each
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
