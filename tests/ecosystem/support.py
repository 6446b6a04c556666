"""The ecosystem's servers and clients as the proof tests use them.

What scripts/install-ecosystem put under .cache/ecosystem (plugin folders, the pinned
TypeScript SDK and MCP Inspector), a host over those plugins with the host's DEFAULT settings
(only the test-only ones differ: address, data folder, database, no builtins), the owner's
review of every pending tool at start, and the three kinds of visitor client: the Python SDK,
the TypeScript SDK client (tests/ecosystem/js/ecosystem_visitor.mjs) and the Inspector CLI.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_host.settings import Settings
from owner_facade import OWNER_PATH
from tests.conftest import fresh_database
from tests.hosting import REPO, RunningHost, free_port, running_host

ECOSYSTEM = REPO / ".cache" / "ecosystem"
PLUGINS_ROOT = ECOSYSTEM / "plugins"
CLIENTS = ECOSYSTEM / "clients" / "node_modules"
TS_SDK = CLIENTS / "@modelcontextprotocol" / "sdk"
INSPECTOR = CLIENTS / ".bin" / "inspector"
JS = Path(__file__).resolve().parent / "js"

ERAS = ["legacy", "auto"]  # the Python SDK: 2025-11-25, and auto, which negotiates 2026-07-28 here
ERA_VERSION = {"legacy": "2025-11-25", "auto": "2026-07-28"}

# The tools each server lists to a client that can answer sampling, elicitation and roots
# (server-everything registers some only then): read from their dist/ and mcp_server_time.
EXPECTED_TOOLS: dict[str, set[str]] = {
    "eco.everything": {
        "echo",
        "get-annotated-message",
        "get-env",
        "get-resource-links",
        "get-resource-reference",
        "get-structured-content",
        "get-sum",
        "get-tiny-image",
        "gzip-file-as-resource",
        "toggle-simulated-logging",
        "toggle-subscriber-updates",
        "trigger-long-running-operation",
        "get-roots-list",
        "trigger-elicitation-request",
        "trigger-sampling-request",
    },
    "eco.memory": {
        "create_entities",
        "create_relations",
        "add_observations",
        "delete_entities",
        "delete_observations",
        "delete_relations",
        "read_graph",
        "search_nodes",
        "open_nodes",
    },
    "eco.filesystem": {
        "read_file",
        "read_text_file",
        "read_media_file",
        "read_multiple_files",
        "write_file",
        "edit_file",
        "create_directory",
        "list_directory",
        "list_directory_with_sizes",
        "directory_tree",
        "move_file",
        "search_files",
        "get_file_info",
        "list_allowed_directories",
    },
    "eco.time": {"get_current_time", "convert_time"},
}
ALL_EXPECTED = set().union(*EXPECTED_TOOLS.values())


def missing() -> str | None:
    """Why the ecosystem tests cannot run here, or None."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    if shutil.which("node") is None:
        return "node is not installed: the reference servers are Node programs (install Node.js 20+)"
    wanted = [PLUGINS_ROOT / name / "manifest.yaml" for name in ("everything", "memory", "filesystem", "time")]
    wanted += [TS_SDK / "package.json", INSPECTOR]
    absent = [str(path.relative_to(REPO)) for path in wanted if not path.exists()]
    if absent:
        return f"run scripts/install-ecosystem first (missing: {', '.join(absent)})"
    return None


def ecosystem_settings(folder: Path, database_url: str) -> Settings:
    """The host's defaults; only what a test must set: address, data folder, database, and no
    builtins (the host's own capabilities are not the subject here). Every visitor of these
    tests comes from 127.0.0.1, one principal to the host, so the per-principal shares of
    per-session instances are the host's whole table here (tests/children/test_instance_shares
    covers the shares)."""
    return Settings(
        host="127.0.0.1",
        port=free_port(),
        data_dir=folder / "data",
        database_url=database_url,
        builtin_dir=None,
        plugins=[PLUGINS_ROOT],
        principal_session_instances=32,
        principal_instance_starts_per_minute=1000,
    )


@dataclass
class Ecosystem:
    """A running host over the ecosystem's plugins, after the owner's review at start."""

    running: RunningHost
    pending_at_start: list[dict[str, Any]]  # tools_pending before any visitor session
    rejected_at_start: list[dict[str, Any]]  # what it said the host drops, with causes
    approved: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # the tool_approve answers
    refused: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # approvals that failed

    @property
    def token(self) -> str:
        return owner_token(self.running)

    async def new_session(self) -> dict[str, Any]:
        return await self.running.new_session()


def ecosystem_host(name: str = "eco", scope: Literal["module", "session"] = "module") -> Any:
    """A fixture `name` of `scope`: one host on a database of its own, its tools pending at
    start approved by the owner before any test runs."""

    async def serving(postgres_server: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Ecosystem]:
        folder = tmp_path_factory.mktemp(name)
        async with fresh_database(postgres_server) as url, running_host(ecosystem_settings(folder, url)) as running:
            review = await pending_at_start(running)
            ecosystem = Ecosystem(running, list(review.get("pending", [])), list(review.get("rejected", [])))
            await approve_all(ecosystem)
            # The four servers have 44 tools, above the default tool search threshold (40): these
            # tests are about every tool listed and called by name, so the owner raises it
            # (`test_reference_servers` checks tool search with the default too).
            await set_tool_search_threshold(ecosystem.running, LISTS_EVERY_TOOL)
            yield ecosystem

    return pytest.fixture(serving, scope=scope, name=name)


# -- the owner --------------------------------------------------------------------------------


LISTS_EVERY_TOOL = 1000
"""The owner's tool search threshold in these tests: no session here sees that many tools."""


async def set_tool_search_threshold(running: RunningHost, threshold: int) -> None:
    """The owner's setting (`host_settings_set`), then the second the door may keep the old
    value for (`visitor/tool_search.py`, `_THRESHOLD_TTL_S`)."""
    async with owner_client(running) as owner:
        failed, answer = await owner_call(owner, "host_settings_set", tool_search_threshold=threshold)
    assert not failed and answer["tool_search_threshold"] == threshold, answer
    await anyio.sleep(1.1)


def owner_token(running: RunningHost) -> str:
    return running.owner_token()


@asynccontextmanager
async def owner_client(running: RunningHost) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {owner_token(running)}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        transport = streamable_http_client(f"{running.url}{OWNER_PATH}", http_client=http)
        async with Client(transport, cache=None) as client:
            yield client


async def owner_call(client: Client, name: str, /, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(name, arguments)
    return bool(result.is_error), dict(result.structured_content or {})


def pending_names(pending: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Plugin id -> the names of its pending tools."""
    names: dict[str, set[str]] = {}
    for entry in pending:
        names.setdefault(entry["capability"], set()).add(entry["tool"])
    return names


async def pending_at_start(running: RunningHost) -> dict[str, Any]:
    """`tools_pending` of a fresh host, before any visitor session, asked once: it answers once
    the host has listed its plugins' tools at start (it waits for that review, bounded)."""
    async with owner_client(running) as owner:
        _, answer = await owner_call(owner, "tools_pending")
    return answer


def approvable(entry: dict[str, Any]) -> bool:
    """A pending entry the owner can approve: it has a live definition (a rejected tool shows
    its cause instead, whatever the key the host names it with)."""
    return isinstance(entry.get("live"), dict) and "live_sha256" in entry


async def approve_all(ecosystem: Ecosystem) -> None:
    """The owner approves each pending tool as reviewed (its `live_sha256`); collisions are
    not expected among these four servers, so `hide_colliding` stays off."""
    async with owner_client(ecosystem.running) as owner:
        for entry in ecosystem.pending_at_start:
            if not approvable(entry):
                continue
            key = (entry["capability"], entry["tool"])
            failed, answer = await owner_call(
                owner, "tool_approve", capability=key[0], tool=key[1], live_sha256=entry["live_sha256"]
            )
            (ecosystem.refused if failed else ecosystem.approved)[key] = answer


# -- visitors ---------------------------------------------------------------------------------


@asynccontextmanager
async def python_visitor(
    ecosystem: Ecosystem, mode: str, session: dict[str, Any] | None = None, **callbacks: Any
) -> AsyncIterator[Client]:
    """A Python SDK client on a (new) visitor session; `callbacks` go to `Client`."""
    session = session or await ecosystem.new_session()
    async with ecosystem.running.client(session, mode, **callbacks) as client:
        yield client


def text_of(result: Any) -> str:
    """The text blocks of a tool result (an SDK model), joined by newlines."""
    return "\n".join(block.text for block in result.content if getattr(block, "type", None) == "text")


async def typescript_visitor(session: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the official TypeScript SDK client (pinned, from .cache/ecosystem) on a visitor
    session: it lists the tools, makes `calls` ({name, arguments}) in order and prints one JSON
    document: {protocolVersion, tools: [names], calls: [{result} | {error: {code, message}}]}."""
    argv = ["node", str(JS / "ecosystem_visitor.mjs"), str(TS_SDK), session["mcp_url"], json.dumps(calls)]
    env = {**os.environ, "MCP_VISITOR_TOKEN": session["token"]}  # not on the command line
    with anyio.fail_after(120):
        done = await anyio.run_process(argv, env=env, check=False)
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, f"the TypeScript client failed ({done.returncode}): {stderr[-2000:]}"
    answer: dict[str, Any] = json.loads(stdout)
    return answer


@dataclass(frozen=True)
class InspectorRun:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """What it printed on stdout, parsed."""
        return json.loads(self.stdout)

    def result(self) -> Any:
        """The MCP result it printed (`--format json` wraps it: {"result": …})."""
        return self.json()["result"]


async def inspector(session: dict[str, Any], era: str, home: Path, *arguments: str) -> InspectorRun:
    """The MCP Inspector CLI (pinned) against a visitor session over streamable HTTP, in
    `era` (legacy: 2025-11-25, modern: 2026-07-28); its catalogue and state under `home`."""
    argv = [
        "node",
        str(INSPECTOR),
        "--cli",
        session["mcp_url"],
        "--transport",
        "http",
        "--header",
        f"Authorization: Bearer {session['token']}",
        "--protocol-era",
        era,
        "--format",
        "json",
        "--quiet",
        *arguments,
    ]
    env = {**os.environ, "HOME": str(home), "MCP_CATALOG_PATH": str(home / "mcp.json")}
    with anyio.fail_after(120):
        done = await anyio.run_process(argv, env=env, check=False)
    return InspectorRun(done.returncode, done.stdout.decode(), done.stderr.decode())
