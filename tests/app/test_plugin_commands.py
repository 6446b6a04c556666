"""`mcp-host plugin add|list|remove` on a data directory: what each prints, and refusals as one
line on stderr with exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_host.app.cli import main
from mcp_host.plugins import install_pypi
from tests.plugins.packages import PYPI_SOURCE, wheel


def test_add_refuses_a_hostile_source_and_a_missing_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugin", "add", "npm:--registry=http://evil", "--data-dir", str(tmp_path)]) == 2
    assert main(["plugin", "add", "x.mcpb", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("mcp-host: '--registry=http://evil' is not an npm package name")
    assert err[1] == "mcp-host: the bundle 'x.mcpb' is not a file."
    assert not (tmp_path / "plugins").exists()


def test_list_and_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugin", "list", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"no plugins installed in {tmp_path / 'plugins'}\n"
    install_pypi(PYPI_SOURCE, tmp_path, spec=str(wheel(tmp_path)))
    assert main(["plugin", "list", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "pypi.whisper_server  1.0.0  whisper-server\n"
    assert main(["plugin", "remove", "pypi.whisper_server", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(
        f"removed pypi.whisper_server ({tmp_path / 'plugins' / 'pypi.whisper_server'})"
    )
    assert main(["plugin", "remove", "pypi.whisper_server", "--data-dir", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err == f"mcp-host: no plugin pypi.whisper_server is installed in {tmp_path / 'plugins'}\n"
    )
