"""List changes, told to the visitor sessions that see the child they came from.

Above: `visitor.http` (registers each session's listeners: a 2025-11-25 client's connection,
reached on its standalone stream; a 2026-07-28 client's `subscriptions/listen` streams). The
children's notifications arrive through `ChildPool.on_list_changed` as `children.ListChange`.

A child's `notifications/tools/list_changed` becomes a `tools/list_changed` for exactly the
sessions whose lists come from that child; likewise prompts, resources and a resource's
update. A session that cannot see the child hears nothing of it. Whose lists come from it:
- a shared child: every session that sees the plugin;
- a per-session instance: its own session only. Its resources, lists and updates are that
  visitor's; another visitor told "resource X was updated" would learn what A's instance did;
- a per-session plugin's owner-context instance: its list changes reach the sessions that see
  the plugin and list through it (`ChildFactory.lister`: those with no running instance of
  their own), and its resource updates reach no visitor (a session subscribes in, and reads
  from, its own instance; the owner-context one's state is the owner's).

A session's own list change (its tool search working set grew, `tell_session`) reaches a
2025-11-25 connection that is `answering` the request that grew it on that request's stream,
before its result (`visitor.server` sends it): on the standalone stream it would arrive after
the result, and a client that leaves right after half-reads it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp.types as types
from anyio.abc import TaskGroup
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from mcp_host.access import Session
from mcp_host.children import (
    Changed,
    ListChange,
    PromptsChanged,
    ResourceContentChanged,
    ResourcesChanged,
    ToolsChanged,
)

__all__ = ["Answering", "ChangeFeed", "SessionBus"]

logger = logging.getLogger(__name__)

# Standing connections and listen streams kept per visitor session, and in all.
_PER_SESSION = 8
_IN_ALL = 4096


@dataclass
class _Listeners:
    session: Session
    connections: dict[str, ServerSession] = field(default_factory=dict)
    streams: list[Callable[[ServerEvent], None]] = field(default_factory=list)
    subscribed: set[str] = field(default_factory=set)
    """Resource URIs whose updates this session's 2025-11-25 connections asked for."""

    def empty(self) -> bool:
        return not self.connections and not self.streams


@dataclass
class Answering:
    """A request a 2025-11-25 connection is being answered (`ChangeFeed.answering`)."""

    connection_id: str
    tools_changed: bool = False
    """The session's own tool list changed meanwhile: the request tells its connection itself."""


def _event(what: Changed) -> ServerEvent:
    match what:
        case ToolsChanged():
            return ToolsListChanged()
        case PromptsChanged():
            return PromptsListChanged()
        case ResourcesChanged():
            return ResourcesListChanged()
        case ResourceContentChanged(uri=uri):
            return ResourceUpdated(uri=uri)


def _notification(event: ServerEvent) -> types.ServerNotification:
    if isinstance(event, ToolsListChanged):
        return types.ToolListChangedNotification()
    if isinstance(event, PromptsListChanged):
        return types.PromptListChangedNotification()
    if isinstance(event, ResourcesListChanged):
        return types.ResourceListChangedNotification()
    return types.ResourceUpdatedNotification(params=types.ResourceUpdatedNotificationParams(uri=event.uri))


class ChangeFeed:
    def __init__(
        self,
        sees: Callable[[Session, str], bool],
        task_group: TaskGroup,
        runs_own: Callable[[str, str], bool] = lambda plugin_id, session_id: False,
        relay: Callable[[ListChange], None] | None = None,
        in_all: int = _IN_ALL,
    ) -> None:
        """`sees(session, plugin_id)`: whether the session can see that child now;
        `runs_own(plugin_id, session_id)`: whether the session has a running per-session
        instance of that plugin (`ChildPool.runs_own`); `relay(change)`: tells the other
        replicas of a change said here (`Fleet.relay`); `in_all`: the visitor sessions kept
        (and resource subscriptions of one), the least recently seen forgotten first."""
        self._relay = relay
        self._in_all = in_all
        self._sees = sees
        self._runs_own = runs_own
        self._tg = task_group
        self._by_session: OrderedDict[str, _Listeners] = OrderedDict()
        self._answering: dict[str, list[Answering]] = {}

    def _listeners(self, session: Session) -> _Listeners:
        listeners = self._by_session.get(session.id)
        if listeners is None:
            if len(self._by_session) >= self._in_all:
                self._evict()
            listeners = self._by_session[session.id] = _Listeners(session)
        self._by_session.move_to_end(session.id)
        listeners.session = session  # the latest authentication (its role snapshot, revocation)
        return listeners

    def _evict(self) -> None:
        """Forget the least recently seen session that has no open listen stream (its legacy
        connections are re-remembered on its next request); OverflowError when every one has."""
        for session_id, listeners in self._by_session.items():
            if not listeners.streams:
                del self._by_session[session_id]
                return
        raise OverflowError("too many sessions are listening for changes")

    def keep_connection(self, session: Session, connection_id: str, server_session: ServerSession) -> None:
        """A 2025-11-25 client's connection (its `Mcp-Session-Id`), told of changes on its
        standalone stream."""
        try:
            listeners = self._listeners(session)
        except OverflowError:  # every remembered session holds a listen stream; this one waits
            logger.warning("session %s: too many sessions listening; its change notices are skipped", session.id)
            return
        if connection_id in listeners.connections or len(listeners.connections) < _PER_SESSION:
            listeners.connections[connection_id] = server_session

    def subscribe_uri(self, session: Session, uri: str) -> None:
        listeners = self._listeners(session)
        if len(listeners.subscribed) < self._in_all:
            listeners.subscribed.add(uri)

    def unsubscribe_uri(self, session: Session, uri: str) -> None:
        listeners = self._by_session.get(session.id)
        if listeners is not None:
            listeners.subscribed.discard(uri)

    def bus(self, session: Session) -> SessionBus:
        """The subscription bus of one session, for the SDK's `ListenHandler`."""
        return SessionBus(self, session)

    def _subscribe(self, session: Session, deliver: Callable[[ServerEvent], None]) -> Callable[[], None]:
        listeners = self._listeners(session)
        if len(listeners.streams) >= _PER_SESSION:
            raise OverflowError("this session has as many listen streams as it may")
        listeners.streams.append(deliver)

        def unsubscribe() -> None:
            if deliver in listeners.streams:
                listeners.streams.remove(deliver)
            if listeners.empty():
                self._by_session.pop(session.id, None)

        return unsubscribe

    def publish(self, change: ListChange) -> None:
        """A child said its `change.what` changed (a list, or one resource): told to the sessions
        whose lists come from that child, here and (through `relay`) on the other replicas."""
        if self._relay is not None:
            self._relay(change)
        self.publish_remote(change)

    def publish_remote(self, change: ListChange) -> None:
        """A change another replica's child said (or one said here, once relayed): told to
        this replica's sessions whose lists come from that child."""
        event = _event(change.what)
        if change.session_id is not None:  # a per-session instance: its own session's only
            own = self._by_session.get(change.session_id)
            audience = [own] if own is not None else []
        else:
            audience = list(self._by_session.values())
        for listeners in audience:
            if not self._hears(listeners.session, change):
                continue
            for deliver in list(listeners.streams):
                deliver(event)  # the SDK's listen handler keeps only what the stream asked for
            if isinstance(event, ResourceUpdated) and event.uri not in listeners.subscribed:
                continue
            for connection_id, server_session in list(listeners.connections.items()):
                self._tg.start_soon(self._notify, listeners, connection_id, server_session, event)

    @contextmanager
    def answering(self, session_id: str, connection_id: str) -> Iterator[Answering]:
        """While a request of the 2025-11-25 connection `connection_id` is answered: a change of
        the session's own tool list (`tell_session`) is not sent on that connection's standalone
        stream but marked on the `Answering`, for the request to send on its own stream."""
        answering = Answering(connection_id)
        self._answering.setdefault(session_id, []).append(answering)
        try:
            yield answering
        finally:
            left = self._answering[session_id]
            left.remove(answering)
            if not left:
                del self._answering[session_id]

    def tell_session(self, session_id: str) -> None:
        """Only this session's tool list changed (its tool search working set grew): told to
        its listeners on this replica, as a child's change would be, except the connections
        `answering` a request, which that request tells."""
        listeners = self._by_session.get(session_id)
        if listeners is not None and listeners.session.credential_revoked:
            return
        answering = self._answering.get(session_id, [])
        for request in answering:
            request.tools_changed = True
        if listeners is None:
            return
        told_in_request = {request.connection_id for request in answering}
        event = ToolsListChanged()
        for deliver in list(listeners.streams):
            deliver(event)
        for connection_id, server_session in list(listeners.connections.items()):
            if connection_id not in told_in_request:
                self._tg.start_soon(self._notify, listeners, connection_id, server_session, event)

    def announce(self, plugin_id: str) -> None:
        """A plugin was added, or is about to be removed (call it first: it tells the sessions
        that see the plugin now): its tools, prompts and resources lists changed for them."""
        for what in (ToolsChanged(), PromptsChanged(), ResourcesChanged()):
            self.publish(ListChange(plugin_id, what))

    def _hears(self, session: Session, change: ListChange) -> bool:
        if session.credential_revoked or not self._sees(session, change.plugin_id):
            return False
        if change.owner_context:
            is_update = isinstance(change.what, ResourceContentChanged)
            return not is_update and not self._runs_own(change.plugin_id, session.id)
        return True

    async def _notify(
        self, listeners: _Listeners, connection_id: str, server_session: ServerSession, event: ServerEvent
    ) -> None:
        try:
            with anyio.fail_after(5):
                await server_session.send_notification(_notification(event))
        except Exception:  # the connection is gone: forget it
            logger.debug("session %s: a change notice could not be sent", listeners.session.id, exc_info=True)
            if listeners.connections.get(connection_id) is server_session:
                del listeners.connections[connection_id]
            if listeners.empty():
                self._by_session.pop(listeners.session.id, None)

    def forget(self, session_id: str) -> None:
        self._by_session.pop(session_id, None)

    def forget_connection(self, session_id: str, connection_id: bytes) -> None:
        """The 2025-11-25 connection `connection_id` of `session_id` ended (`edge.ProtocolSessions`
        says so: closed, deleted, expired or resting): its SDK session, which the kept
        `ServerSession` holds (~40 KB), is let go, and the session's entry with it once nothing
        else of it is kept (its resource subscriptions outlast a connection that rests)."""
        listeners = self._by_session.get(session_id)
        if listeners is None:
            return
        listeners.connections.pop(connection_id.decode("latin-1"), None)
        if listeners.empty() and not listeners.subscribed:
            del self._by_session[session_id]

    def listening_count(self) -> int:
        return sum(len(x.connections) + len(x.streams) for x in self._by_session.values())


class SessionBus:
    """A `SubscriptionBus` whose listeners hear only what their session may see."""

    def __init__(self, feed: ChangeFeed, session: Session) -> None:
        self._feed = feed
        self._session = session

    async def publish(self, event: ServerEvent) -> None:
        """Tell this session's listen streams (the host's events come through `ChangeFeed.publish`)."""
        listeners = self._feed._by_session.get(self._session.id)
        for deliver in list(listeners.streams) if listeners is not None else []:
            deliver(event)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], Any]:
        return self._feed._subscribe(self._session, listener)
