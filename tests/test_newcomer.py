"""What a newcomer meets in the first hour: the start's output, the README's commands, the demo.

The host is started as `scripts/run` starts it (`mcp-host serve`, embedded PostgreSQL in the
data directory); the README and the scripts are read as files.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import anyio
import httpx2
import pytest

from hosting import PLUGINS, free_port

REPO = Path(__file__).resolve().parent.parent
MCP_HOST = Path(sys.executable).parent / "mcp-host"


@pytest.mark.anyio
async def test_serve_prints_no_runtime_dir_warning_when_xdg_runtime_dir_is_unset(postgres_dir: Path) -> None:
    # A root shell, a container or CI has no XDG_RUNTIME_DIR; pgserver looks a runtime dir up
    # at import, and platformdirs warned about its fallback at every start.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_HOST_", "PYTHONWARNINGS"))}
    env.pop("XDG_RUNTIME_DIR", None)
    env |= {"MCP_HOST_BUILTIN_DIR": str(PLUGINS / "echo"), "MCP_HOST_PRESTART_CHILDREN": "false"}
    env |= {"MCP_HOST_SANDBOX": "off"}
    port = free_port()
    log = postgres_dir / "serve.log"
    argv = [str(MCP_HOST), "serve", "--port", str(port), "--data-dir", str(postgres_dir / "data")]
    with log.open("wb") as out:
        process = await anyio.open_process(argv, env=env, stdout=out, stderr=out)
    try:
        async with httpx2.AsyncClient() as http:
            with anyio.fail_after(90):
                while True:
                    assert process.returncode is None, log.read_text()
                    try:
                        if (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                            break
                    except httpx2.TransportError:
                        pass
                    await anyio.sleep(0.1)
    finally:
        process.terminate()
        with anyio.fail_after(30):
            await process.wait()
        await process.aclose()

    printed = log.read_text()
    assert "embedded PostgreSQL" in printed  # the start that used to warn did run
    assert not re.search(r"RuntimeDirWarning|XDG_RUNTIME_DIR", printed), printed
