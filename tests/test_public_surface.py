"""Every module names its public surface in `__all__`, and every name there exists."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import mcp_host

MODULES = sorted(m.name for m in pkgutil.walk_packages(mcp_host.__path__, "mcp_host."))


@pytest.mark.parametrize("name", MODULES)
def test_module_declares_an_all_whose_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    public = getattr(module, "__all__", None)
    assert isinstance(public, list), f"{name} has no __all__"
    missing = [n for n in public if not hasattr(module, n)]
    assert missing == []
