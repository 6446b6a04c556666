"""A test capability that looks around its sandbox (tests/test_launch.py).

`cmdlines` reads /proc/<pid>/cmdline of every process it can see (its sandbox's pid 1 among
them); `mountinfo` lists its mounts, each with its root (/proc/self/mountinfo); `fill` writes a
file of zeros, a MiB at a time, until it has written what it was asked or the file system
refuses; `memfd` writes (never maps) 16 MiB memfds and keeps them open, shared memory that
RLIMIT_AS does not see. Failures are data (the errno's name), so a test can assert the reason.
Only the MCP SDK and the standard library.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("test.peek", version="1", log_level="WARNING")

MiB = 1024 * 1024
_held: list[int] = []  # the memfds `memfd` filled: open until the process ends


@mcp.tool()
def cmdlines() -> dict[str, list[str]]:
    """Every visible process's command line, by pid."""
    found: dict[str, list[str]] = {}
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found[path.parent.name] = path.read_bytes().decode(errors="replace").split("\0")[:-1]
        except OSError:  # exited meanwhile
            continue
    return found


@mcp.tool()
def mountinfo() -> list[dict[str, str]]:
    """Every mount this process sees (/proc/self/mountinfo): where, and its root within the
    file system it comes from (for a bind mount, the source's path there)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        found.append({"root": fields[3], "mount_point": fields[4], "fs": fields[fields.index("-") + 1]})
    return found


@mcp.tool()
def fill(path: str, mib: int) -> dict[str, Any]:
    """Write up to `mib` MiB of zeros to `path` (making its folder first); how many MiB went in
    and the error that stopped it, if any. The file is removed again."""
    target = Path(path)
    written = 0
    error = None
    chunk = bytes(MiB)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as out:
            while written < mib:
                out.write(chunk)
                out.flush()
                written += 1
    except OSError as exc:
        error = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    finally:
        try:
            os.unlink(target)
        except OSError:
            pass
    return {"written_mib": written, "error": error}


@mcp.tool()
def memfd(mib: int) -> dict[str, Any]:
    """Fill 16 MiB memfds with write() until `mib` MiB are written or a write fails; the fds
    stay open (their pages held) until this process ends. How many MiB went in, and the error."""
    written = 0
    error = None
    chunk = bytes(MiB)
    try:
        while written < mib:
            fd = os.memfd_create("peek")
            _held.append(fd)
            for _ in range(min(16, mib - written)):
                os.write(fd, chunk)
                written += 1
    except OSError as exc:
        error = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return {"written_mib": written, "error": error}


if __name__ == "__main__":
    mcp.run()
