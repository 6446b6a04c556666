"""The plugin's handle on the host: `kit = Kit(__file__)` once, `kit.host(ctx)` in each tool
(and, in a connector, `kit.connection(ctx)`).

Above: the plugin's server module. Below: `host` (typed ops) over one of two backends,
chosen once from the environment: the back-channel socket in `MCP_HOST_SOCKET` (`channel`),
or — when it is not set — the in-memory emulation (`local`) built from the plugin's own
`manifest.yaml`, so `python server.py` and the MCP Inspector work without a host.

Failing closed: with the socket set, a call without a grant gets `Denied` from every op
without touching the socket and never falls back to the emulation; standalone, a call that
carries a grant (so came from a host) gets `Unavailable`, since its data would otherwise
land in memory and vanish.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .channel import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT_S, SocketChannel
from .connection import ConnectionInfo, connection_of
from .errors import Unavailable
from .host import Backend, Host
from .local import LocalHost
from .manifest import read_plugin_manifest
from .session import GRANT_KEY, SESSION_KEY, TEST_SESSION, CallSource, SessionInfo, meta_of

__all__ = ["SOCKET_ENV", "Kit"]

logger = logging.getLogger("mcp_host_kit")

SOCKET_ENV = "MCP_HOST_SOCKET"


class Kit:
    """Host ops and the trusted session for one plugin.

    `plugin` is the plugin's folder or a file in it (pass `__file__`). `environ` defaults to
    the process environment; `timeout_s` bounds each op, `max_response_bytes` each answer.
    """

    def __init__(
        self,
        plugin: str | os.PathLike[str],
        *,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        path = Path(plugin).resolve()
        self.folder = path if path.is_dir() else path.parent
        socket_path = (os.environ if environ is None else environ).get(SOCKET_ENV)
        self._channel = (
            SocketChannel(socket_path, timeout_s=timeout_s, max_response_bytes=max_response_bytes)
            if socket_path
            else None
        )
        self._local: LocalHost | None = None

    @property
    def standalone(self) -> bool:
        """True when ops are emulated in memory (no `MCP_HOST_SOCKET`)."""
        return self._channel is None

    def host(self, source: CallSource) -> Host:
        """The host for the call `source` belongs to (an MCPServer `ctx`, a low-level request
        context, or the call's `_meta`).

        Standalone, a call without a session is the fixed test session, and the first call
        reads the manifest (raising RuntimeError without PyYAML, OSError or ValueError for a
        manifest that cannot be read).
        """
        meta = meta_of(source)
        grant = meta.get(GRANT_KEY)
        grant = grant if isinstance(grant, str) and grant else None
        session = _session(meta.get(SESSION_KEY))
        if self._channel is not None:
            return Host(self._channel, grant=grant, session=session)
        if SESSION_KEY not in meta:
            session = TEST_SESSION
        backend: Backend = _FromHost() if grant is not None else self._emulation()
        return Host(backend, grant=grant, session=session)

    def connection(self, source: CallSource) -> ConnectionInfo:
        """The owner's connection a connector's call carries (`_meta["mcp-host/connection"]`):
        `owner_id`, `category` and the decrypted `settings`. Use it for this call only.

        Raises `Unconfigured` when the call carries none or a malformed one. The same under
        the host and standalone: a standalone test passes the connection in the call's `_meta`.
        """
        return connection_of(source)

    async def aclose(self) -> None:
        """Close idle back-channel connections of the running event loop (tests; shutdown)."""
        if self._channel is not None:
            await self._channel.aclose()

    def _emulation(self) -> LocalHost:
        if self._local is None:
            manifest = read_plugin_manifest(self.folder)
            logger.warning(
                "%s is not set: plugin %r runs standalone; host ops are emulated in memory",
                SOCKET_ENV,
                manifest.plugin_id,
            )
            self._local = LocalHost(manifest)
        return self._local


def _session(value: Any) -> SessionInfo | None:
    if value is None:
        return None
    try:
        return SessionInfo.model_validate(value)
    except ValidationError:
        logger.warning("the call's %s is malformed; it is treated as absent", SESSION_KEY)
        return None


class _FromHost:
    """Standalone, but the call came from a host: refuse rather than emulate."""

    async def call(
        self, op: str, arguments: Mapping[str, Any], *, grant: str | None, session: SessionInfo | None
    ) -> dict[str, Any]:
        raise Unavailable(f"{op}: this call carries a host's grant but {SOCKET_ENV} is not set")
