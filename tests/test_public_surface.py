"""Every module names its public surface in `__all__`, and every name there exists."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import mcp_host
import owner_console
import owner_facade
from mcp_host.app.wiring import Host

MODULES = sorted(m.name for m in pkgutil.walk_packages(mcp_host.__path__, "mcp_host."))


@pytest.mark.parametrize("name", MODULES)
def test_module_declares_an_all_whose_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    public = getattr(module, "__all__", None)
    assert isinstance(public, list), f"{name} has no __all__"
    missing = [n for n in public if not hasattr(module, n)]
    assert missing == []


BUSINESS_WORDS = re.compile(
    r"(?<![a-z])(booking|bookings|booked|calendar|calendars|mail|mails)(?![a-z])", re.IGNORECASE
)


def test_the_host_knows_no_business_word() -> None:
    """The host executes declarations: what a capability is about never appears in its code."""
    root = Path(mcp_host.__file__).parent
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in sorted([*root.rglob("*.py"), *root.rglob("*.sql")])
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BUSINESS_WORDS.search(line)
    ]
    assert found == []


FACADE_MODULES = sorted(m.name for m in pkgutil.walk_packages(owner_facade.__path__, "owner_facade."))
# The owner's web console follows the owner facade's rules (it is another client of its door).
CONSOLE_MODULES = sorted(m.name for m in pkgutil.walk_packages(owner_console.__path__, "owner_console."))


@pytest.mark.parametrize("name", ["owner_facade", *FACADE_MODULES, "owner_console", *CONSOLE_MODULES])
def test_facade_module_declares_an_all_whose_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    public = getattr(module, "__all__", None)
    assert isinstance(public, list), f"{name} has no __all__"
    assert [n for n in public if not hasattr(module, n)] == []


@pytest.mark.parametrize("package", ["owner_facade", "owner_console"])
def test_only_the_composition_root_imports_the_owner_facade(package: str) -> None:
    root = Path(mcp_host.__file__).parent
    pattern = re.compile(rf"^\s*(from|import) {package}\b", re.MULTILINE)
    importers = sorted(p.name for p in root.rglob("*.py") if pattern.search(p.read_text()))
    assert importers == ["doors.py", "wiring.py"]


def test_tests_reach_a_running_host_only_through_the_test_api() -> None:
    """`tests/hosting.RunningHost` is the one place a test reads the running `Host`'s parts,
    so the composition root can change `Host` without touching the tests."""
    fields = "|".join(f.name for f in dataclasses.fields(Host))
    reach = re.compile(rf"\.host\.({fields})\b|\bapp\.state\.host\b|\bfrom mcp_host\.app\.wiring import\b")
    tests = Path(__file__).parent
    found = [
        f"{path.relative_to(tests)}:{number}: {line.strip()}"
        for path in sorted(tests.rglob("*.py"))
        if path.name != "hosting.py" and path != Path(__file__)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if reach.search(line)
    ]
    assert found == []
