"""Fixtures of the command-line and process tests in tests/app."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def host_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No MCP_HOST_* setting from the caller's shell, and no builtin plugins (a module opts in
    with `pytest.mark.usefixtures("host_environment")`).

    The builtins are left out so a host holds only the plugins a test names; the test fixtures'
    own variables (MCP_HOST_TEST_*) stay, as no setting reads them.
    """
    for name in list(os.environ):
        if name.startswith("MCP_HOST_") and not name.startswith("MCP_HOST_TEST_"):
            monkeypatch.delenv(name)
    no_builtins = tmp_path / "no-builtins"
    no_builtins.mkdir()
    monkeypatch.setenv("MCP_HOST_BUILTIN_DIR", str(no_builtins))
