"""owner_console: the owner's web console at `/owner/` — the owner door's tools, in a browser.

Above: the composition root `mcp_host.app.wiring` (which builds it) and `mcp_host.app.asgi`
(which routes `/owner…` to it): the only modules of `mcp_host` that import this package.
Below: `owner_facade.OwnerDoor` (every read and change, with its audit rows) and `mcp_host`'s
public surface (each package's `__all__`).
"""

from .app import CONSOLE_PATH, SESSION_TTL, SIGN_IN_THROTTLE, OwnerConsole
from .sessions import ConsoleSessions, MemoryConsoleSessions, PostgresConsoleSessions, cookie_owner

__all__ = [
    "CONSOLE_PATH",
    "SESSION_TTL",
    "SIGN_IN_THROTTLE",
    "ConsoleSessions",
    "MemoryConsoleSessions",
    "OwnerConsole",
    "PostgresConsoleSessions",
    "cookie_owner",
]
