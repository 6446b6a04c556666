"""What the MCP Apps tests share: the ext-apps example server scripts/install-apps installs, a
direct Python SDK client of a server (what it answers without the host), the TypeScript SDK
visitor (tests/apps/js/app_visitor.mjs), and an app's contents as the wire carries them."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.ecosystem.support import TS_SDK
from tests.hosting import PLUGINS, REPO, RunningHost
from tests.owner_facade.test_door import call, owner_client

APPS = REPO / ".cache" / "ecosystem" / "apps"
SYSTEM_MONITOR = APPS / "system-monitor"
SYSTEM_MONITOR_SERVER = ["node_modules/@modelcontextprotocol/server-system-monitor/dist/index.js", "--stdio"]
FIXTURE = PLUGINS / "apps"  # tests/fixtures/plugins/apps: the Python test plugin
JS = Path(__file__).resolve().parent / "js"
ERAS = ["legacy", "auto"]  # the Python SDK: 2025-11-25, and auto, which negotiates 2026-07-28 here
ERA_VERSION = {"legacy": "2025-11-25", "auto": "2026-07-28"}


def missing_example() -> str | None:
    """Why the ext-apps example cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed: the ext-apps example is a Node program (install Node.js 20+)"
    if not (SYSTEM_MONITOR / "manifest.yaml").exists() or not (SYSTEM_MONITOR / SYSTEM_MONITOR_SERVER[0]).exists():
        return "run scripts/install-apps first (missing: .cache/ecosystem/apps/system-monitor)"
    return None


def missing_typescript_sdk() -> str | None:
    if not (TS_SDK / "package.json").exists():
        return "run scripts/install-ecosystem first (missing: the TypeScript SDK client)"
    return None


@asynccontextmanager
async def direct(folder: Path, command: str, args: list[str]) -> AsyncIterator[Client]:
    """A Python SDK client of the server in `folder`, started over stdio without the host."""
    server = StdioServerParameters(command=command, args=args, cwd=str(folder))
    async with Client(stdio_client(server), cache=None) as client:
        yield client


def direct_example() -> Any:
    return direct(SYSTEM_MONITOR, "node", SYSTEM_MONITOR_SERVER)


def direct_fixture() -> Any:
    return direct(FIXTURE, sys.executable, ["server.py"])


def wire(model: Any) -> Any:
    """`model` (an SDK model or a list of them) as JSON, the way it travels."""
    if isinstance(model, list):
        return [wire(item) for item in model]
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def app_bytes(read: types.ReadResourceResult) -> list[bytes]:
    """Each of an app's contents (uri, mimeType, `_meta`, text) as UTF-8 JSON bytes: the read's
    envelope (cache hints, the server's own `_meta`) is the hop's, not the app's."""
    return [json.dumps(wire(c), sort_keys=True, ensure_ascii=False).encode() for c in read.contents]


def tool_metas(tools: list[types.Tool]) -> dict[str, Any]:
    return {t.name: t.meta for t in tools}


async def set_tool_search_threshold(running: RunningHost, value: int) -> None:
    """The owner's setting, then the second the door may keep the old value for."""
    async with owner_client(running) as owner:
        failed, answer = await call(owner, "host_settings_set", tool_search_threshold=value)
    assert not failed and answer["tool_search_threshold"] == value, answer
    await anyio.sleep(1.1)


async def typescript_visitor(session: dict[str, Any], uri: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The official TypeScript SDK client (pinned, .cache/ecosystem) on a visitor session: its
    tools (whole definitions), resources, the read of `uri` and `calls`, as one JSON document."""
    argv = ["node", str(JS / "app_visitor.mjs"), str(TS_SDK), session["mcp_url"], uri, json.dumps(calls)]
    env = {**os.environ, "MCP_VISITOR_TOKEN": session["token"]}  # not on the command line
    with anyio.fail_after(120):
        done = await anyio.run_process(argv, env=env, check=False)
    assert done.returncode == 0, f"the TypeScript client failed ({done.returncode}): {done.stderr.decode()[-2000:]}"
    answer: dict[str, Any] = json.loads(done.stdout.decode())
    return answer


async def pending_and_rejected(running: RunningHost, capability: str) -> tuple[dict[str, Any], dict[str, str]]:
    """`tools_pending`'s entries of `capability` by tool, and its rejected tools' causes."""
    async with owner_client(running) as owner:
        failed, review = await call(owner, "tools_pending")
    assert not failed, review
    pending = {p["tool"]: p for p in review["pending"] if p["capability"] == capability}
    rejected = {r["tool"]: r["cause"] for r in review["rejected"] if r["capability"] == capability}
    return pending, rejected


async def refusal_of_read(client: Client, uri: str) -> str:
    try:
        await client.read_resource(uri)
    except MCPError as exc:
        return exc.error.message
    return "served"
