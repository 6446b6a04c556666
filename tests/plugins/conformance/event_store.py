"""An in-memory SSE event store, so the direct HTTP baseline can resume a closed stream (SEP-1699).

Used only by `server.py --http`; under the host this plugin speaks stdio and has no streams.
"""

from __future__ import annotations

import itertools

from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.types import JSONRPCMessage


class MemoryEventStore(EventStore):
    """Every event of every stream, in order; replay sends a stream's events after an id."""

    def __init__(self) -> None:
        self._events: list[tuple[str, str, JSONRPCMessage | None]] = []
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(next(self._ids))
        self._events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream = next((s for s, e, _ in self._events if e == last_event_id), None)
        if stream is None:
            return None
        after = int(last_event_id)
        for stream_id, event_id, message in self._events:
            if stream_id == stream and int(event_id) > after and message is not None:  # None: a priming event
                await send_callback(EventMessage(message, event_id))
        return stream
