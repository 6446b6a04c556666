"""The kit's public surface, and what it may import: the MCP SDK, never `mcp_host`."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from inline_snapshot import snapshot

import mcp_host_kit

MODULES = sorted(m.name for m in pkgutil.walk_packages(mcp_host_kit.__path__, "mcp_host_kit."))


@pytest.mark.parametrize("name", ["mcp_host_kit", *MODULES])
def test_module_declares_an_all_whose_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    public = getattr(module, "__all__", None)
    assert isinstance(public, list), f"{name} has no __all__"
    assert [n for n in public if not hasattr(module, n)] == []
    assert module.__doc__


def test_the_package_surface_is_what_plugins_import() -> None:
    assert mcp_host_kit.__all__ == snapshot(
        [
            "APP_MIME_TYPE",
            "CONNECTION_KEY",
            "GRANT_KEY",
            "SESSION_KEY",
            "SOCKET_ENV",
            "TEST_SESSION",
            "Config",
            "ConfigValues",
            "ConnectionInfo",
            "Denied",
            "EgressRefused",
            "Host",
            "HostOpError",
            "Inference",
            "InvalidArguments",
            "Kit",
            "Owner",
            "PluginServer",
            "QuotaExhausted",
            "Record",
            "SearchHit",
            "SessionInfo",
            "Store",
            "Subject",
            "Unavailable",
            "Unconfigured",
            "Visitor",
            "error_result",
            "open_tunnel",
            "tool_errors",
        ]
    )


def test_a_hosted_plugin_imports_neither_mcp_host_nor_pyyaml() -> None:
    probe = (
        "import sys, mcp_host_kit\n"
        "kit = mcp_host_kit.Kit('.', environ={'MCP_HOST_SOCKET': '/run/ops.sock'})\n"
        "kit.host({'mcp-host/grant': 'g'})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp_host', 'yaml', 'owner_facade')))\n"
    )
    root = str(Path(mcp_host_kit.__file__).resolve().parent.parent)
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env={"PYTHONPATH": root}, cwd="/"
    )
    assert out.stdout.strip() == "[]"
