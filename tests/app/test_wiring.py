"""The composition root: what starts with the host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.hosting import free_port, host_settings, running_host, wait_until

pytestmark = pytest.mark.anyio


async def test_children_every_session_sees_are_prestarted(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo", "shifty"], prestart_children=True)
    async with running_host(settings) as host:

        def both_running() -> bool:
            children = [host.child(i) for i in ("test.echo", "test.shifty")]
            return all(c is not None and c.running for c in children)

        await wait_until(both_running, within_s=15)
        session = await host.new_session()
        async with host.client(session) as client:
            assert len((await client.list_tools()).tools) == 6
        assert len(host.spawned) == 2  # the visitor's list reused them


def test_serve_without_bubblewrap_refuses_to_start_and_says_how_to_install(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "HOME": str(tmp_path), "MCP_HOST_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "mcp-host"), "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "bubblewrap (bwrap) is not on PATH" in done.stderr
    assert "apt-get install bubblewrap" in done.stderr
    assert not (tmp_path / "data" / "postgres").exists()  # nothing was started


@pytest.mark.anyio
async def test_the_owner_token_is_shown_once_on_the_terminal_at_first_start(
    tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"])
    async with running_host(settings) as first:
        token = first.owner_token()
    shown = capsys.readouterr().out
    async with running_host(settings.model_copy(update={"port": free_port()})):
        pass

    again = f"{Path(sys.executable).parent / 'mcp-host'} owner token --data-dir {settings.data_dir.resolve()}"
    assert f"owner token (shown once; `{again}` prints it again): {token}" in shown
    assert token not in capsys.readouterr().out
    assert all(token not in r.getMessage() for r in caplog.records)
