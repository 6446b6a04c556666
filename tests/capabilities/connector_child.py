"""A builtin connector run as a real stdio MCP child, called as the host calls it: settings in
`_meta["mcp-host/connection"]`, per call. Shared by the caldav and smtp connector tests."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, RequestParamsMeta

import mcp_host_kit
from mcp_host.egress import EgressCaps, EgressProxy, MemoryResolver
from mcp_host.plugins import EgressPolicy
from mcp_host_kit import CONNECTION_KEY
from mcp_host_kit.contract import refusal_of

KIT_TREE = Path(mcp_host_kit.__file__).parent.parent


@dataclass
class Connector:
    client: Client
    stderr: Path
    category: str

    async def call(self, verb: str, args: dict[str, Any], settings: dict[str, Any] | None) -> CallToolResult:
        connection = {"owner_id": "owner-1", "category": self.category, "settings": settings}
        meta = cast(RequestParamsMeta, {CONNECTION_KEY: connection})  # the key is a variable, not a literal
        return await self.client.call_tool(verb, args, meta=meta if settings is not None else None)

    async def ok(self, verb: str, args: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
        result = await self.call(verb, args, settings)
        assert result.is_error is False, result.structured_content
        assert result.structured_content is not None
        structured: dict[str, Any] = result.structured_content
        return structured


@asynccontextmanager
async def connector_child(
    server: Path, category: str, folder: Path, env: dict[str, str] | None = None
) -> AsyncIterator[Connector]:
    """One connector child (it keeps nothing of a call but the auth scheme each server took);
    its stderr goes to `folder/stderr.log`, so tests can check no password reaches the log.
    `env` is added to the few variables the SDK passes on (a proxy, a CA file); PYTHONPATH
    names the tree these tests import the kit from, as the host names its own to a child."""
    stderr = folder / "stderr.log"
    env = {"PYTHONPATH": str(KIT_TREE), **(env or {})}
    params = StdioServerParameters(command=sys.executable, args=[str(server)], cwd=str(server.parent), env=env)
    with stderr.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield Connector(client, stderr, category)


@asynccontextmanager
async def loopback_egress(plugin_id: str, port: int) -> AsyncIterator[Path]:
    """The host's egress proxy with one gate for a sandboxed child of `plugin_id` (its socket's
    path, for `launch_for(egress_socket=…)`) letting it reach 127.0.0.1:`port` alone: the
    manifest's `allow_net` and the loopback server named as a private host, as an owner's
    `plugin allow ID 127.0.0.1:PORT --private` would."""
    policy = EgressPolicy.of([f"127.0.0.1:{port}"], allow_net=True, allow_private=["127.0.0.1"])
    caps = EgressCaps(connections=8, bytes_per_minute=64 * 1024 * 1024, idle_s=60)
    # A short folder: the gate's socket path must stay under 108 bytes.
    with tempfile.TemporaryDirectory(prefix="egress-", dir="/tmp") as folder:
        async with EgressProxy(Path(folder) / "run", MemoryResolver({})) as proxy:
            gate = await proxy.open(plugin_id, None, policy, caps)
            try:
                yield gate.path
            finally:
                await gate.aclose()


def refusal(result: CallToolResult) -> dict[str, Any] | None:
    """The `{code, message}` of a refused call (asserting it was refused)."""
    assert result.is_error is True
    found = refusal_of(result)  # the host's key in `_meta`, else a plugin's structured pair
    return None if found is None else found.model_dump()
