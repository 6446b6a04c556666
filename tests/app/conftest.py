"""Fixtures of the command-line and process tests in tests/app."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.plugins.installed_once import InstalledOnce, run_folder


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


@pytest.fixture(scope="session")
def installed_once(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> InstalledOnce:
    """whisper-server installed with pip once in the run, copied into the tests that take it
    (`tests/plugins/installed_once.py`)."""
    return InstalledOnce(run_folder(tmp_path_factory, request.config))
