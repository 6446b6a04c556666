"""The sub-packages of `mcp_host` form a hierarchy: a module imports only from its own
sub-package or from one below it, and from another sub-package only what that sub-package's
`__init__` names in `__all__`. `owner_facade` and `owner_console` sit above them all and import
that surface only. In the spirit of import-linter's layers contract, over every import
statement (those under `TYPE_CHECKING` and inside functions too) and every `importlib`
import; a dynamic import whose module is not a literal cannot be checked and is refused.

The core (everything below `edge`) knows nothing of HTTP: no module of it imports Starlette or
uvicorn, and importing any of its sub-packages in a fresh interpreter loads no module of the
HTTP layers (`edge` and above).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import mcp_host

# Lowest first. `errors`, `settings` and `principal` are modules at the root; the rest are
# sub-packages.
LAYERS = [
    "errors",
    "settings",
    "principal",
    "wire",
    "observe",
    "plugins",
    "store",
    "sandbox",
    "children",
    "egress",
    "access",
    "connectors",
    "policy",
    "edge",
    "oauth",
    "backchannel",
    "visitor",
    "desk",
    "owner",
    "app",
]
CORE = LAYERS[: LAYERS.index("edge")]
HTTP_LIBRARIES = ("starlette", "uvicorn", "sse_starlette")
# The packages above `mcp_host` that use its public surface (the composition root imports them).
CLIENTS = ("owner_facade", "owner_console")

ROOT = Path(mcp_host.__file__).parent
TREE = ROOT.parent
SOURCES = sorted(p for p in ROOT.rglob("*.py") if p.parent != ROOT or p.stem in LAYERS)
CLIENT_SOURCES = sorted(p for client in CLIENTS for p in (TREE / client).rglob("*.py"))
_DYNAMIC = {"import_module", "__import__"}


def _imports(source: str, path: Path) -> list[tuple[int, str, list[str]]]:
    """Each import of `source` (at `path`, relative to the tree): line, absolute module, names
    imported from it. A dynamic import of a module that is not a literal string is `?`."""
    package = list(path.parent.parts)
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.Call) and _called(node.func) in _DYNAMIC:
            first = node.args[0] if node.args else None
            literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
            found.append((node.lineno, first.value if literal else "?", []))  # type: ignore[union-attr]
    return found


def _called(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _surface(there: str) -> list[str]:
    """What another layer may import from `there`: its `__init__`'s `__all__` (a root module's own)."""
    return list(importlib.import_module(f"mcp_host.{there}").__all__)


def violations(source: str, path: Path) -> list[str]:
    """The layer rules `source` breaks, were it the module at `path` (relative to the tree:
    `mcp_host/children/pool.py`, `owner_facade/tools.py`)."""
    here = path.parts[1] if path.parts[0] == "mcp_host" else path.parts[0]
    if here.endswith(".py"):
        here = here[: -len(".py")]
    wrong = []
    for line, module, names in _imports(source, path):
        parts = module.split(".")
        if module == "?":
            wrong.append(f"{line}: a dynamic import of a module the layer test cannot read")
            continue
        if parts[0] in HTTP_LIBRARIES and here in CORE:
            wrong.append(f"{line}: {here} is in the core and imports {module}, an HTTP library")
            continue
        if parts[0] != "mcp_host":
            continue
        if len(parts) == 1:
            wrong.append(f"{line}: imports the root package")
            continue
        there = parts[1]
        if there == here:
            continue
        if here in LAYERS and LAYERS.index(there) > LAYERS.index(here):
            wrong.append(f"{line}: {here} imports {module}, a layer above it")
            continue
        if len(parts) > 2:
            wrong.append(f"{line}: imports {module}, inside {there}; import from mcp_host.{there}")
            continue
        surface = _surface(there)
        wrong += [f"{line}: {there}.{name} is not in its __init__'s __all__" for name in names if name not in surface]
    return wrong


def test_every_module_is_in_a_layer() -> None:
    unplaced = [p.name for p in ROOT.glob("*.py") if p.stem not in (*LAYERS, "__init__")]
    unplaced += [p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in (*LAYERS, "__pycache__")]
    assert unplaced == []


@pytest.mark.parametrize("path", SOURCES + CLIENT_SOURCES, ids=lambda p: str(p.relative_to(TREE)))
def test_no_module_imports_upward_or_past_a_sub_packages_surface(path: Path) -> None:
    assert violations(path.read_text(), path.relative_to(TREE)) == []


INJECTED = {
    "upward": ("mcp_host/store/injected.py", "from mcp_host.visitor import VisitorDoor\n"),
    "sibling_upward_under_type_checking": (
        "mcp_host/children/injected.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mcp_host.access import Session\n",
    ),
    "inside_a_function": ("mcp_host/store/injected.py", "def late():\n    from mcp_host.edge import RpcEdge\n"),
    "dynamic_importlib": (
        "mcp_host/children/injected.py",
        "import importlib\ndef late():\n    return importlib.import_module('mcp_host.visitor')\n",
    ),
    "past_a_surface_from_owner_facade": ("owner_facade/injected.py", "from mcp_host.children.lifecycle import Child\n"),
    "relative_upward": ("mcp_host/policy/injected.py", "from ..visitor.door import VisitorDoor\n"),
    "name_outside_all_from_owner_console": ("owner_console/injected.py", "from mcp_host.store import _pool_setup\n"),
    "core_imports_starlette": ("mcp_host/access/injected.py", "from starlette.requests import Request\n"),
    "dynamic_import_of_a_computed_name": ("mcp_host/wire/injected.py", "__import__('mcp_host.' + 'app')\n"),
}


@pytest.mark.parametrize("case", INJECTED, ids=str)
def test_an_injected_violation_is_caught(case: str) -> None:
    """Proves the rules above can fail: each of these modules breaks one of them."""
    path, source = INJECTED[case]
    assert len(violations(source, Path(path))) == 1


def test_a_module_keeping_the_rules_passes() -> None:
    source = (
        "from typing import TYPE_CHECKING\nfrom mcp_host.store import Database\nfrom .pool import ChildPool\n"
        "if TYPE_CHECKING:\n    from mcp_host.wire import PushClient\n"
        "def late():\n    import importlib\n    return importlib.import_module('mcp_host.errors')\n"
    )
    assert violations(source, Path("mcp_host/children/injected.py")) == []


@pytest.mark.parametrize("layer", CORE)
def test_importing_the_core_loads_nothing_of_http(layer: str) -> None:
    """In a fresh interpreter, importing `mcp_host.<layer>` loads no module of `edge` or the
    layers above it, nor the owner's packages. (Starlette and uvicorn themselves are loaded by the
    MCP SDK's own `import mcp`; that no core module imports them is checked above.)"""
    above = [f"mcp_host.{name}" for name in LAYERS[LAYERS.index("edge") :]]
    probe = (
        f"import sys, mcp_host.{layer}\n"
        f"above = {[*above, *CLIENTS]!r}\n"
        "print(sorted(m for m in sys.modules if any(m == a or m.startswith(a + '.') for a in above)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(TREE)},
        cwd="/",
    )
    assert out.stdout.strip() == "[]"
