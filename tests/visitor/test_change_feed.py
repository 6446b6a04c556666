"""The change feed: a child's list change reaches exactly the sessions that see that child.

Logic only (listeners are callables and a recording stand-in for the SDK's ServerSession);
test_passthrough.py proves both eras end to end through a real host, and
test_visitors_apart.py that a per-session instance's notices reach its own visitor only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.server.subscriptions import ResourceUpdated, ServerEvent, ToolsListChanged

from mcp_host.access.sessions import RoleSnapshot, Session
from mcp_host.children import ListChange, PromptsChanged, ResourceContentChanged, ToolsChanged
from mcp_host.visitor.change_feed import ChangeFeed

pytestmark = pytest.mark.anyio


def _session(n: int, capabilities: tuple[str, ...], *, revoked: bool = False) -> Session:
    return Session(
        id=f"{n:032x}",
        owner_id="owner",
        mode="public",
        subject=None,
        visitor=None,
        role=RoleSnapshot(id="r", capabilities=capabilities, config={}),
        created_at=datetime(2026, 11, 30, tzinfo=UTC),
        credential_revoked=revoked,
    )


def _sees(session: Session, plugin_id: str) -> bool:
    return plugin_id in session.role.capabilities


class _Connection:
    def __init__(self, *, broken: bool = False) -> None:
        self.sent: list[str] = []
        self.broken = broken

    async def send_notification(self, notification: types.ServerNotification) -> None:
        if self.broken:
            raise anyio.ClosedResourceError
        self.sent.append(notification.method)


async def test_only_sessions_that_see_the_child_hear_of_it() -> None:
    seeing, blind, revoked = _session(1, ("a",)), _session(2, ("b",)), _session(3, ("a",), revoked=True)
    heard: dict[str, list[ServerEvent]] = {"seeing": [], "blind": [], "revoked": []}
    connections = {"seeing": _Connection(), "blind": _Connection()}
    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg)
        for name, session in (("seeing", seeing), ("blind", blind), ("revoked", revoked)):
            feed.bus(session).subscribe(heard[name].append)
        feed.keep_connection(seeing, "c1", connections["seeing"])  # type: ignore[arg-type]
        feed.keep_connection(blind, "c2", connections["blind"])  # type: ignore[arg-type]
        feed.publish(ListChange("a", ToolsChanged()))
        await anyio.wait_all_tasks_blocked()
    assert heard == {"seeing": [ToolsListChanged()], "blind": [], "revoked": []}
    assert connections["seeing"].sent == ["notifications/tools/list_changed"]
    assert connections["blind"].sent == []


async def test_a_resource_update_reaches_a_legacy_connection_only_when_subscribed() -> None:
    session = _session(1, ("a",))
    connection = _Connection()
    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg)
        feed.keep_connection(session, "c1", connection)  # type: ignore[arg-type]
        feed.publish(ListChange("a", ResourceContentChanged("test://one")))
        await anyio.wait_all_tasks_blocked()
        feed.subscribe_uri(session, "test://one")
        feed.publish(ListChange("a", ResourceContentChanged("test://one")))
        await anyio.wait_all_tasks_blocked()
        feed.unsubscribe_uri(session, "test://one")
        feed.publish(ListChange("a", ResourceContentChanged("test://one")))
        await anyio.wait_all_tasks_blocked()
    assert connection.sent == ["notifications/resources/updated"]


async def test_a_broken_connection_is_forgotten() -> None:
    session = _session(1, ("a",))
    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg)
        feed.keep_connection(session, "c1", _Connection(broken=True))  # type: ignore[arg-type]
        assert feed.listening_count() == 1
        feed.publish(ListChange("a", PromptsChanged()))
        await anyio.wait_all_tasks_blocked()
        assert feed.listening_count() == 0


async def test_a_connection_that_ended_in_the_sdk_is_let_go_and_its_sessions_subscriptions_kept() -> None:
    """`edge.ProtocolSessions` says when a 2025-11-25 connection ends (closed, deleted, expired,
    resting): the `ServerSession` kept for it holds the SDK's whole session, so it goes at once;
    the session's resource subscriptions outlast it, for the connection that wakes it."""
    session, other = _session(1, ("a",)), _session(2, ("a",))
    woken = _Connection()
    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg)
        feed.keep_connection(session, "c1", _Connection())  # type: ignore[arg-type]
        feed.keep_connection(other, "c2", _Connection())  # type: ignore[arg-type]
        feed.subscribe_uri(session, "test://one")
        feed.forget_connection(session.id, b"c1")
        feed.forget_connection(other.id, b"c2")
        feed.forget_connection(other.id, b"c2")  # told twice, or of a connection never kept: nothing
        assert feed.listening_count() == 0
        feed.keep_connection(session, "c3", woken)  # type: ignore[arg-type]
        feed.publish(ListChange("a", ResourceContentChanged("test://one")))
        await anyio.wait_all_tasks_blocked()
    assert woken.sent == ["notifications/resources/updated"]


async def test_listeners_are_capped_per_session() -> None:
    session = _session(1, ("a",))
    sink: list[Any] = []
    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg)
        unsubscribes = [feed.bus(session).subscribe(sink.append) for _ in range(8)]
        with pytest.raises(OverflowError):
            feed.bus(session).subscribe(sink.append)
        for unsubscribe in unsubscribes:
            unsubscribe()
        assert feed.listening_count() == 0
        feed.publish(ListChange("a", ResourceContentChanged("test://x")))
    assert sink == []
    assert ResourceUpdated(uri="test://x") not in sink


async def test_the_least_recently_seen_sessions_are_forgotten_first() -> None:
    first, second, third = _session(1, ("a",)), _session(2, ("a",)), _session(3, ("a",))
    streamed: list[ServerEvent] = []
    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg, in_all=2)
        feed.bus(first).subscribe(streamed.append)  # a listen stream: never evicted
        feed.keep_connection(second, "c2", _Connection())  # type: ignore[arg-type]
        feed.keep_connection(third, "c3", _Connection())  # type: ignore[arg-type]
        assert feed.listening_count() == 2
        feed.publish(ListChange("a", ToolsChanged()))
        await anyio.wait_all_tasks_blocked()
        feed.bus(_session(4, ("a",))).subscribe(streamed.append)  # evicts third
        with pytest.raises(OverflowError):  # both left hold a listen stream
            feed.bus(_session(5, ("a",))).subscribe(streamed.append)
    assert streamed == [ToolsListChanged()]


async def test_a_session_bus_publishes_to_that_session_only() -> None:
    mine, other = _session(1, ("a",)), _session(2, ("a",))
    heard: dict[str, list[ServerEvent]] = {"mine": [], "other": []}
    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg)
        feed.bus(mine).subscribe(heard["mine"].append)
        feed.bus(other).subscribe(heard["other"].append)
        await feed.bus(mine).publish(ToolsListChanged())
    assert heard == {"mine": [ToolsListChanged()], "other": []}


async def test_a_per_session_instances_change_reaches_its_own_session_only() -> None:
    mine, other, blind = _session(1, ("a",)), _session(2, ("a",)), _session(3, ("b",))
    heard: dict[str, list[ServerEvent]] = {"mine": [], "other": [], "blind": []}
    connections = {"mine": _Connection(), "other": _Connection()}
    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg)
        for name, session in (("mine", mine), ("other", other), ("blind", blind)):
            feed.bus(session).subscribe(heard[name].append)
        feed.keep_connection(mine, "c1", connections["mine"])  # type: ignore[arg-type]
        feed.keep_connection(other, "c2", connections["other"])  # type: ignore[arg-type]
        for session in (mine, other):
            feed.subscribe_uri(session, "test://one")
        feed.publish(ListChange("a", ResourceContentChanged("test://one"), session_id=mine.id))
        feed.publish(ListChange("a", ToolsChanged(), session_id=mine.id))
        feed.publish(ListChange("a", ToolsChanged(), session_id=blind.id))  # a session that no longer sees it
        await anyio.wait_all_tasks_blocked()
    assert heard == {"mine": [ResourceUpdated(uri="test://one"), ToolsListChanged()], "other": [], "blind": []}
    assert connections["mine"].sent == ["notifications/resources/updated", "notifications/tools/list_changed"]
    assert connections["other"].sent == []


async def test_an_owner_context_instances_lists_reach_the_sessions_listing_through_it_and_its_updates_none() -> None:
    own, through = _session(1, ("a",)), _session(2, ("a",))
    heard: dict[str, list[ServerEvent]] = {"own": [], "through": []}
    shared_heard: list[ServerEvent] = []

    def runs_own(plugin_id: str, session_id: str) -> bool:
        return (plugin_id, session_id) == ("a", own.id)  # `own` lists through its own instance

    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg, runs_own)
        for name, session in (("own", own), ("through", through)):
            feed.bus(session).subscribe(heard[name].append)
            feed.subscribe_uri(session, "test://one")
        feed.publish(ListChange("a", ToolsChanged(), owner_context=True))
        feed.publish(ListChange("a", ResourceContentChanged("test://one"), owner_context=True))
        # A shared child (not owner context) of a plugin: every session that sees it, as before.
        feed.bus(_session(3, ("a",))).subscribe(shared_heard.append)
        feed.publish(ListChange("a", ResourceContentChanged("test://one")))
        await anyio.wait_all_tasks_blocked()
    assert heard == {
        "own": [ResourceUpdated(uri="test://one")],
        "through": [ToolsListChanged(), ResourceUpdated(uri="test://one")],
    }
    assert shared_heard == [ResourceUpdated(uri="test://one")]


async def test_a_connection_answering_is_left_to_its_request_and_the_others_are_told() -> None:
    """A session's own list change (`tell_session`): the connection whose request is being
    answered is marked for that request to tell; the session's other connection and its listen
    stream are told at once; after the request, that connection is told on its own again."""
    session = _session(1, ("a",))
    asking, other = _Connection(), _Connection()
    streamed: list[ServerEvent] = []
    async with anyio.create_task_group() as tg:
        feed = ChangeFeed(_sees, tg)
        feed.keep_connection(session, "asking", asking)  # type: ignore[arg-type]
        feed.keep_connection(session, "other", other)  # type: ignore[arg-type]
        feed.bus(session).subscribe(streamed.append)
        with feed.answering(session.id, "asking") as answering:
            feed.tell_session(_session(2, ("a",)).id)  # another session's change
            unmarked = not answering.tools_changed
            feed.tell_session(session.id)
            await anyio.wait_all_tasks_blocked()
        feed.tell_session(session.id)
        await anyio.wait_all_tasks_blocked()
    assert unmarked
    assert answering.tools_changed
    assert asking.sent == ["notifications/tools/list_changed"]  # the second tell only
    assert other.sent == ["notifications/tools/list_changed"] * 2
    assert streamed == [ToolsListChanged()] * 2
