"""Test plugin: tools that fail the way a plugin author's do.

`boom` raises RuntimeError("boom-42") inside an MCPServer tool (the SDK answers an opaque
isError result and logs the traceback to stderr through rich), after `noise` lines of stderr
that use up the host's stderr rate limit. `crash` raises in a thread, whose plain traceback
Python prints to stderr, and then the process exits with code 3.
"""

from __future__ import annotations

import os
import sys
import threading

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("boom", version="1", log_level="WARNING")


def fail(message: str) -> None:
    raise RuntimeError(message)


@mcp.tool()
def boom(noise: int = 0) -> str:
    """Write `noise` lines to stderr, then raise RuntimeError("boom-42")."""
    for n in range(noise):
        sys.stderr.write(f"noise {n}\n")
    sys.stderr.flush()
    fail("boom-42")
    return "unreachable"


@mcp.tool()
def crash() -> str:
    """Raise RuntimeError in a thread (a plain traceback on stderr), then exit with code 3."""
    thread = threading.Thread(target=fail, args=("crash-7 \x1b[2J",), name="worker")
    thread.start()
    thread.join()
    sys.stderr.flush()
    os._exit(3)


if __name__ == "__main__":
    mcp.run()
