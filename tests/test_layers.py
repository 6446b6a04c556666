"""The sub-packages of `mcp_host` form a hierarchy: a module imports only from its own
sub-package or from one below it, and from another sub-package only what that sub-package's
`__init__` names in `__all__`. In the spirit of import-linter's layers contract, over every
import statement (those under `TYPE_CHECKING` and inside functions too)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import mcp_host

# Lowest first. `errors` and `settings` are modules at the root; the rest are sub-packages.
LAYERS = [
    "errors",
    "settings",
    "wire",
    "edge",
    "plugins",
    "store",
    "oauth",
    "sandbox",
    "children",
    "access",
    "connectors",
    "policy",
    "backchannel",
    "visitor",
    "owner",
    "app",
]
ROOT = Path(mcp_host.__file__).parent
SOURCES = sorted(p for p in ROOT.rglob("*.py") if p.parent != ROOT or p.stem in LAYERS)


def _layer(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return parts[0]


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """Each `mcp_host` import of `path`: line, absolute module, names imported from it."""
    tree = ast.parse(path.read_text())
    package = ["mcp_host", *path.relative_to(ROOT).parent.parts]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
    return [(line, module, names) for line, module, names in found if module.split(".")[0] == "mcp_host"]


def test_every_module_is_in_a_layer() -> None:
    unplaced = [p.name for p in ROOT.glob("*.py") if p.stem not in (*LAYERS, "__init__")]
    unplaced += [p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in (*LAYERS, "__pycache__")]
    assert unplaced == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_upward_or_past_a_sub_packages_surface(path: Path) -> None:
    here = _layer(path)
    wrong = []
    for line, module, names in _imports(path):
        parts = module.split(".")
        if len(parts) == 1:
            wrong.append(f"{line}: imports the root package")
            continue
        there = parts[1]
        if there == here:
            continue
        if LAYERS.index(there) > LAYERS.index(here):
            wrong.append(f"{line}: {here} imports {module}, a layer above it")
        elif there not in ("errors", "settings"):
            if len(parts) > 2:
                wrong.append(f"{line}: imports {module}, inside {there}; import from mcp_host.{there}")
            surface = importlib.import_module(f"mcp_host.{there}").__all__
            wrong += [f"{line}: {there}.{name} is not in its __all__" for name in names if name not in surface]
    assert wrong == []
