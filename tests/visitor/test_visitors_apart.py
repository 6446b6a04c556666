"""Two visitors on one session-unaware server never meet: each gets only its own roots
request, its own sampling request, its own log messages, its own in-process state and its own
instance's notices, resource updated and tool list changed (a per-session instance each); a
shared child's requests and log messages that name no call reach no visitor at all.

Real host, real children, real SDK clients over streamable HTTP, both eras; the `sessionless`
fixture is a plain SDK server (no plugin kit) that asks and logs without naming the call.
"""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path
from typing import Any, cast

import anyio
import mcp.types as types
import pytest
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import FileUrl

from tests.hosting import PLUGINS, RunningHost, host_settings, running_host

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "auto"]  # auto negotiates 2026-07-28 with this host
_LOG_INFO = cast(types.RequestParamsMeta, {"io.modelcontextprotocol/logLevel": "info"})


class _Visitor:
    """One visitor's client callbacks and what reached them."""

    def __init__(self, name: str, both_sampling: _Both) -> None:
        self.name = name
        self.sampled: list[str] = []
        self.rooted = 0
        self.logged: list[Any] = []
        self._both = both_sampling

    async def roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        self.rooted += 1
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl(f"file:///visitor/{self.name}"))])

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        first = params.messages[0].content
        self.sampled.append(first.text if isinstance(first, types.TextContent) else "?")
        await self._both.arrive()  # both visitors' calls are in flight, each asking, at once
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"{self.name} wrote"), model="m"
        )

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logged.append(params.data)


class _Both:
    """A meeting point for `count` tasks (bounded)."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._all = anyio.Event()

    async def arrive(self) -> None:
        self._count -= 1
        if self._count <= 0:
            self._all.set()
        with anyio.fail_after(20):
            await self._all.wait()


async def _probe(host: RunningHost, session: dict[str, Any], mode: str, visitor: _Visitor) -> tuple[Any, Any]:
    """`probe` then `count` in `session`, the visitor's callbacks on, its log level info."""
    async with host.client(
        session,
        mode,
        list_roots_callback=visitor.roots,
        sampling_callback=visitor.sample,
        logging_callback=visitor.log,
    ) as client:
        if mode == "legacy":
            with warnings.catch_warnings():  # logging/setLevel is 2025-11-25's, deprecated at 2026-07-28
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.set_logging_level("info")
        probed = await client.call_tool("probe", {"tag": visitor.name}, meta=_LOG_INFO)
        counted = await client.call_tool("count", {})
    return probed, counted


@pytest.mark.parametrize("mode", ERAS)
async def test_two_concurrent_visitors_each_get_only_their_own_requests_logs_and_state(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    both = _Both(2)
    a, b = _Visitor("a", both), _Visitor("b", both)
    results: dict[str, tuple[Any, Any]] = {}
    async with running_host(host_settings(tmp_path, database_url, ["sessionless"])) as host:
        session_a, session_b = await host.new_session(), await host.new_session()

        async def run(session: dict[str, Any], visitor: _Visitor) -> None:
            results[visitor.name] = await _probe(host, session, mode, visitor)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, session_a, a)
            tg.start_soon(run, session_b, b)
    for visitor in (a, b):
        probed, counted = results[visitor.name]
        assert probed.structured_content == {
            "roots": [f"file:///visitor/{visitor.name}"],
            "sampled": f"{visitor.name} wrote",
            "pid": probed.structured_content["pid"],
        }
        assert visitor.sampled == [visitor.name] and visitor.rooted == 1
        assert visitor.logged == [f"probe {visitor.name}"]
        assert counted.structured_content["count"] == 1  # its own process's counter


def _shared_variant(tmp_path: Path) -> Path:
    folder = tmp_path / "sessionless_shared"
    shutil.copytree(PLUGINS / "sessionless", folder)
    manifest = folder / "manifest.yaml"
    manifest.write_text(manifest.read_text() + "instances: shared\n")
    return folder


@pytest.mark.parametrize("mode", ERAS)
async def test_a_shared_childs_unnamed_requests_and_logs_reach_no_visitor(
    tmp_path: Path, database_url: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    visitor = _Visitor("a", _Both(1))
    settings = host_settings(tmp_path, database_url, [str(_shared_variant(tmp_path))])  # an absolute path
    with caplog.at_level(logging.INFO, logger="mcp_host.children.call_routing"):
        async with running_host(settings) as host:
            session = await host.new_session()
            probed, counted = await _probe(host, session, mode, visitor)
    # The one session calling is not taken for the one the child means: nothing reached it.
    assert (visitor.rooted, visitor.sampled, visitor.logged) == (0, [], [])
    assert probed.is_error is True  # the child's roots request was refused, so its tool failed
    assert counted.structured_content["count"] == 1
    kept = [r.getMessage() for r in caplog.records if "belongs to no call" in r.getMessage()]
    assert kept == [
        "test.sessionless: log message that belongs to no call; kept in the host log only: [info] probe a",
        "test.sessionless: sent roots/list that belongs to no call in flight (1 in flight, shared child); refused",
    ]


class _Heard:
    """What one visitor's connection was told: resource updates and tool list changes."""

    def __init__(self) -> None:
        self.updated: list[str] = []
        self.tools_changed = 0
        self.own_heard = anyio.Event()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
        elif isinstance(message, types.ToolListChangedNotification):
            self.tools_changed += 1
        if self.updated and self.tools_changed:
            self.own_heard.set()


async def test_a_per_session_instances_notices_reach_its_own_visitor_only_legacy(
    tmp_path: Path, database_url: str
) -> None:
    heard = {"a": _Heard(), "b": _Heard()}
    async with running_host(host_settings(tmp_path, database_url, ["sessionless"])) as host:
        sessions = {"a": await host.new_session(), "b": await host.new_session()}
        async with (
            host.client(sessions["a"], "legacy", message_handler=heard["a"].on_message) as client_a,
            host.client(sessions["b"], "legacy", message_handler=heard["b"].on_message) as client_b,
        ):
            clients = {"a": client_a, "b": client_b}
            with warnings.catch_warnings():  # resources/subscribe is 2025-11-25's
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                for client in clients.values():
                    for tag in ("a", "b"):  # both would hear either, were it told to them
                        await client.subscribe_resource(f"sessionless://{tag}")
            for name in ("a", "b"):  # one after the other: A's notices are out before B touches
                await clients[name].call_tool("touch", {"tag": name})
                with anyio.fail_after(10):
                    await heard[name].own_heard.wait()
            # B has heard its own, sent after A's: had A's reached B, they would have come first.
            await clients["a"].call_tool("count", {})  # and A's connection is still served
    assert (heard["a"].updated, heard["a"].tools_changed) == (["sessionless://a"], 1)
    assert (heard["b"].updated, heard["b"].tools_changed) == (["sessionless://b"], 1)


async def test_a_per_session_instances_notices_reach_its_own_2026_listener_only(
    tmp_path: Path, database_url: str
) -> None:
    events: dict[str, list[str]] = {"a": [], "b": []}
    async with running_host(host_settings(tmp_path, database_url, ["sessionless"])) as host:
        sessions = {"a": await host.new_session(), "b": await host.new_session()}
        async with host.client(sessions["a"], "auto") as client_a, host.client(sessions["b"], "auto") as client_b:
            clients = {"a": client_a, "b": client_b}
            uris = ["sessionless://a", "sessionless://b"]
            async with (
                client_a.listen(tools_list_changed=True, resource_subscriptions=uris) as listen_a,
                client_b.listen(tools_list_changed=True, resource_subscriptions=uris) as listen_b,
            ):
                listens = {"a": listen_a, "b": listen_b}
                for name in ("a", "b"):
                    await clients[name].call_tool("touch", {"tag": name})
                    with anyio.fail_after(10):
                        async for event in listens[name]:
                            events[name].append(getattr(event, "uri", type(event).__name__))
                            if len(events[name]) == 2:
                                break
    assert sorted(events["a"]) == ["ToolsListChanged", "sessionless://a"]
    assert sorted(events["b"]) == ["ToolsListChanged", "sessionless://b"]
