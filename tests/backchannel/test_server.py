"""The back-channel end to end: a hostile sandboxed plugin against a real host and Postgres.

The `forger` plugin speaks raw MCP to its host-op socket (no plugin kit) and tries what a
hostile plugin would: ops it did not name, no grant, a made-up grant, a grant kept from an
earlier call, a forged owner, SQL in collection names, more ops than its budget, oversized
messages and too many connections. One host serves every test of this module.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import mcp.types as types
import pytest
from anyio.abc import SocketStream
from inline_snapshot import snapshot

from mcp_host.backchannel import fast_ops
from mcp_host.backchannel.grants import GrantBook
from mcp_host.backchannel.ops import OpServices
from mcp_host.backchannel.server import BackChannel, BackChannelLimits
from mcp_host.backchannel.sockets import OpSockets
from mcp_host.plugins.loading import load_plugins
from mcp_host.sandbox.procs import proc_stat
from mcp_host.settings import Settings
from mcp_host.wire.tool_results import error_result
from tests.hosting import PLUGINS, RunningHost, host_fixture
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

BUDGET = 6
MAX_MESSAGE = 8192
MAX_CONNECTIONS = 4
DENIED = {"is_error": True, "structured": {"code": "denied", "message": "denied"}}


served = host_fixture(
    ["forger", "notes"],
    name="served",
    scope="module",
    grant_op_budget=BUDGET,
    host_op_max_message_bytes=MAX_MESSAGE,
    host_op_max_connections=MAX_CONNECTIONS,
)


@pytest.fixture(scope="module")
async def host(served: RunningHost) -> tuple[RunningHost, dict[str, Any]]:
    return served, await served.new_session()


async def forge(host: tuple[RunningHost, dict[str, Any]], tool: str, **arguments: Any) -> Any:
    running, session = host
    async with running.client(session) as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result
    return result.structured_content


async def test_socket_lists_exactly_the_ops_the_manifest_named(host: Any) -> None:
    assert await forge(host, "listed_ops") == {"ops": ["store.claim", "store.count", "store.insert", "store.query"]}


async def test_sandbox_sees_its_own_socket_only_at_the_fixed_path(host: Any) -> None:
    assert await forge(host, "socket_view") == snapshot(
        {"socket": "/run/mcp-host/ops.sock", "folder": ["ops.sock"], "run": ["mcp-host"]}
    )


async def test_op_the_manifest_did_not_name_is_denied_naming_the_op_and_the_manifest_key(host: Any) -> None:
    answer = await forge(host, "op", name="owner.meta", arguments={"field": "email"})
    unnamed = (
        "denied: op 'owner.meta' is not named in this plugin's manifest; "
        "name it in transport.sandbox.host_ops to use it"
    )
    assert answer == {"outcomes": [{"is_error": True, "structured": {"code": "denied", "message": unnamed}}]}


@pytest.mark.parametrize("grant", ["none", "x" * 43, "", "y" * 5000])
async def test_op_without_a_genuine_grant_is_denied(host: Any, grant: str) -> None:
    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"}, grant=grant)
    assert answer == {"outcomes": [DENIED]}


async def test_grant_replayed_after_its_call_ended_is_denied(host: Any) -> None:
    assert await forge(host, "keep_grant") == {"kept": True}

    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"}, grant="kept")

    assert answer == {"outcomes": [DENIED]}
    running, _ = host
    assert running.live_grants() == 0


async def test_owner_forged_in_op_meta_is_ignored(host: Any) -> None:
    running, session = host
    forged = {"mcp-host/session": {"owner_id": "intruder", "session_id": session["session_id"], "mode": "owner"}}

    answer = await forge(
        host, "op", name="store.insert", arguments={"collection": "forged", "doc": {"n": 1}}, extra_meta=forged
    )

    assert answer["outcomes"][0]["is_error"] is False
    store = running.stores.bound("capability", "forger")
    assert [r.doc for r in await store.query(running.owner_id, "forged")] == [{"n": 1}]
    assert await store.query("intruder", "forged") == []


async def test_owner_named_in_op_arguments_is_refused(host: Any) -> None:
    arguments = {"collection": "forged", "doc": {}, "owner_id": "intruder"}

    answer = await forge(host, "op", name="store.insert", arguments=arguments)

    assert answer["outcomes"][0]["structured"]["code"] == "invalid_arguments"


@pytest.mark.parametrize(
    "collection", ['x"; DROP SCHEMA mcp_host CASCADE; --', "../notes", "notes.*", "mcp_host.owners"]
)
async def test_collection_that_is_not_a_plain_name_is_refused(host: Any, collection: str) -> None:
    answer = await forge(host, "op", name="store.count", arguments={"collection": collection})
    assert answer["outcomes"][0]["structured"]["code"] == "invalid_arguments"


async def test_plugin_reaches_only_its_own_store(host: Any) -> None:
    running, _ = host
    await forge(host, "op", name="store.insert", arguments={"collection": "notes", "doc": {"text": "planted"}})

    notes = running.stores.bound("capability", "notes")
    forger = running.stores.bound("capability", "forger")

    assert await notes.query(running.owner_id, "notes") == []
    assert [r.doc for r in await forger.query(running.owner_id, "notes")] == [{"text": "planted"}]


async def test_a_call_gets_at_most_its_budget_of_ops(host: Any) -> None:
    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"}, repeat=BUDGET + 2)

    outcomes = answer["outcomes"]
    assert [o["is_error"] for o in outcomes] == [False] * BUDGET + [True, True]
    assert outcomes[-1] == DENIED


TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


@pytest.fixture
def fast_lines(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each line the back-channel read was taken by its fast path (the host runs in
    this process, so its module is this one)."""
    taken: list[bool] = []
    read = fast_ops.fast_call

    def counted(line: bytes) -> fast_ops.FastCall | None:
        call = read(line)
        taken.append(call is not None)
        return call

    monkeypatch.setattr(fast_ops, "fast_call", counted)
    return taken


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("store.count", {"collection": "alike"}),
        ("store.count", {"collection": "../notes"}),  # invalid_arguments
        ("store.count", {"collection": "alike", "owner": "someone"}),  # an argument the op lacks
        ("store.delete", {"collection": "alike"}),  # an op the manifest does not name
    ],
)
async def test_the_fast_path_answers_an_op_line_as_the_sdks_server_does(
    host: Any, fast_lines: list[bool], name: str, arguments: dict[str, Any]
) -> None:
    await forge(host, "op", name="store.insert", arguments={"collection": "alike", "doc": {"n": 1}})
    fast_lines.clear()
    fast = await forge(host, "raw_op", name=name, arguments=arguments, extra_meta={})
    assert fast_lines == [True]
    # A trace in the envelope: the SDK's server continues it, so the fast path leaves it the line.
    traced = await forge(host, "raw_op", name=name, arguments=arguments, extra_meta=TRACE)
    assert fast_lines == [True, False]
    assert fast == traced, json.dumps([fast, traced])
    assert fast["id"] == 7 and set(fast["result"]) == {"content", "structuredContent", "isError", "resultType", "_meta"}


async def test_the_kits_ops_take_the_fast_path(host: Any, fast_lines: list[bool]) -> None:
    running, session = host
    async with running.client(session) as client:
        added = await client.call_tool("note_add", {"text": "fast"})
    assert not added.is_error, added
    assert fast_lines and all(fast_lines), fast_lines


async def test_oversized_message_ends_the_connection_and_the_socket_keeps_serving(host: Any) -> None:
    assert await forge(host, "oversized", size=MAX_MESSAGE * 4) == {"closed": True}

    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"})
    assert answer["outcomes"][0]["is_error"] is False


async def test_connections_over_the_cap_are_closed_at_once(host: Any) -> None:
    assert await forge(host, "connections", count=MAX_CONNECTIONS + 3) == {"closed": 3}

    answer = await forge(host, "op", name="store.count", arguments={"collection": "things"})
    assert answer["outcomes"][0]["is_error"] is False


# -- without a host: the denial log, serving, and the socket folder ------------------------------

BURST, PER_S = 20, 1.0
LIMITS = BackChannelLimits(MAX_MESSAGE, MAX_CONNECTIONS, denials_logged_per_s=PER_S, denials_logged_burst=BURST)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp dir with a short path: a socket path must stay under 108 bytes (pytest's are long)."""
    path = Path(tempfile.mkdtemp(prefix="bc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _forger() -> Any:
    [plugin] = load_plugins(None, [PLUGINS / "forger"]).plugins
    return plugin


class _NoServices:
    """Op services that no op of these tests may reach: each is refused before it runs."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"an op reached services.{name}")


NO_SERVICES = cast(OpServices, _NoServices())


def test_denial_log_limits_are_pinned(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert (settings.backchannel.denials_logged_burst, settings.backchannel.denials_logged_per_s) == (20, 1.0)


async def test_a_flood_of_denied_ops_is_refused_every_time_but_logged_within_the_limit(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host.backchannel.server")
    forger, denied = _forger(), error_result("denied", "denied")
    unnamed = error_result(
        "denied",
        "denied: op 'store.bogus' is not named in this plugin's manifest; "
        "name it in transport.sandbox.host_ops to use it",
    )
    async with (
        OpSockets([forger], temp_dir=short_tmp) as sockets,
        BackChannel(sockets, GrantBook(budget=BUDGET), NO_SERVICES, LIMITS) as channel,
    ):
        started = time.monotonic()
        answers = [
            # ops it did not name, and a named op with a made-up grant
            await channel.call(forger, "store.bogus", {}, None)
            if n % 2
            else await channel.call(forger, "store.count", {"collection": "x"}, {"mcp-host/grant": f"made-up-{n}"})
            for n in range(5000)
        ]
        elapsed = time.monotonic() - started
    assert all(answer == (unnamed if n % 2 else denied) for n, answer in enumerate(answers))
    lines = [r.getMessage() for r in caplog.records if r.name == "mcp_host.backchannel.server"]
    denials = [line for line in lines if " denied: " in line]
    summaries = [line for line in lines if "more host-op denials suppressed" in line]
    assert len(lines) == len(denials) + len(summaries)
    assert BURST <= len(denials) <= BURST + elapsed * PER_S + 1
    held = sum(int(line.split(": ")[1].split()[0]) for line in summaries)
    assert len(denials) + held == 5000  # every denial is either logged or counted


@pytest.fixture
def left_folders(short_tmp: Path) -> Iterator[dict[str, Path]]:
    """Socket folders in `short_tmp` as hosts leave them: one of a host that is gone, one of a
    live host (another process), one of this process, and one not named like ours."""

    def folder(pid: int) -> Path:
        stat = proc_stat(pid)
        assert stat is not None
        path = short_tmp / f"mcp-host-ops-{pid}-{stat.starttime}-x1"
        path.mkdir()
        (path / "0123456789abcdef.sock").touch()
        return path

    with subprocess.Popen(["sleep", "60"]) as gone, subprocess.Popen(["sleep", "60"]) as live:
        dead_host = folder(gone.pid)
        gone.kill()
        gone.wait()
        not_ours = short_tmp / "mcp-host-ops-abcdefgh"  # an older host's name, or anyone's
        not_ours.mkdir()
        try:
            yield {"dead": dead_host, "live": folder(live.pid), "this": folder(os.getpid()), "not_ours": not_ours}
        finally:
            live.kill()


async def test_socket_folders_of_dead_hosts_are_swept_at_start_and_live_ones_kept(
    short_tmp: Path, left_folders: dict[str, Path]
) -> None:
    async with OpSockets([_forger()], temp_dir=short_tmp) as sockets:
        socket = sockets.socket_for("forger")
        assert socket is not None and socket.exists()
        left = set(os.listdir(short_tmp))
    kept = {left_folders[k].name for k in ("live", "this", "not_ours")}
    assert left == kept | {socket.parent.name}
    assert socket.parent.name.startswith(f"mcp-host-ops-{os.getpid()}-")
    assert not left_folders["dead"].exists()
    assert not socket.parent.exists()  # and its own, at a clean stop


async def test_a_connection_made_before_the_channel_serves_waits_and_is_then_served(short_tmp: Path) -> None:
    meta = {
        types.PROTOCOL_VERSION_META_KEY: types.LATEST_PROTOCOL_VERSION,
        types.CLIENT_CAPABILITIES_META_KEY: {},
        types.CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"},
        "mcp-host/grant": "made-up",
    }
    params = {"name": "store.count", "arguments": {"collection": "x"}, "_meta": meta}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    async with OpSockets([_forger()], temp_dir=short_tmp) as sockets:
        socket = sockets.socket_for("forger")
        assert socket is not None
        with anyio.fail_after(10):
            async with await anyio.connect_unix(socket) as conn:
                await conn.send(json.dumps(request).encode() + b"\n")  # waits in the backlog
                async with BackChannel(sockets, GrantBook(budget=BUDGET), NO_SERVICES, LIMITS):
                    answer = json.loads(await _line(conn))
    result = answer["result"]  # refused (a made-up grant), but answered: the connection was served
    assert (answer["id"], result["isError"], result["structuredContent"]) == (1, True, DENIED["structured"])


async def _line(conn: SocketStream) -> bytes:
    buffered = b""
    while not buffered.endswith(b"\n"):
        buffered += await conn.receive()
    return buffered
