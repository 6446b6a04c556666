"""A hostile MCP server for the sandbox tests: each tool tries one way out of the sandbox.

tests/test_sandbox.py starts this file under `mcp_host.sandbox.build_command` and asserts that
every probe fails. It imports only the MCP SDK and the standard library (never `mcp_host`,
which is not even mounted inside the sandbox). Probes report failures as data
(`{ok, error}` with the errno name) so a test can assert the exact reason.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _open_fds() -> dict[int, str]:
    """The fds open right now, without the one `listdir` itself used (it is closed again)."""
    found: dict[int, str] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own directory fd, already closed
            continue
    return found


# Taken before the SDK is imported or run: its event loop opens fds of its own. The standard
# library imports above open none.
STARTUP_FDS = _open_fds()

from mcp.server.mcpserver import MCPServer  # noqa: E402
from pydantic import BaseModel  # noqa: E402

mcp = MCPServer("test.escape", version="1", log_level="WARNING")

MiB = 1024 * 1024
CLONE_NEWUSER = 0x10000000

# Run in a fresh single-threaded process: unshare(CLONE_NEWUSER) fails with EINVAL in any
# multithreaded process (this server has worker threads), which would pass for the wrong reason.
UNSHARE_PROBE = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(0 if libc.unshare({CLONE_NEWUSER}) == 0 else ctypes.get_errno())
"""

# Double fork: the first child exits at once, so the daemon is re-parented and in its own
# session, like a process trying to outlive its sandbox.
DAEMON = """
import os, sys, time
if os.fork():
    os._exit(0)
os.setsid()
while True:
    with open(sys.argv[1], "a") as f:
        f.write(f"{os.getpid()} {time.monotonic()}\\n")
    time.sleep(0.1)
"""


class Outcome(BaseModel):
    ok: bool
    error: str | None = None


class Counted(BaseModel):
    count: int
    error: str | None = None


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


@mcp.tool()
def try_tcp(host: str, port: int) -> Outcome:
    """Open a TCP connection to host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return Outcome(ok=True)
    except TimeoutError:
        return Outcome(ok=False, error="timeout")
    except OSError as exc:
        return Outcome(ok=False, error=_errno_name(exc))


@mcp.tool()
def try_abstract_unix(name: str) -> Outcome:
    """Connect to the abstract unix socket `@name` (abstract sockets belong to a network namespace)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect("\0" + name)
            return Outcome(ok=True)
    except OSError as exc:
        return Outcome(ok=False, error=_errno_name(exc))


@mcp.tool()
def interfaces() -> list[str]:
    """Network interfaces visible in this network namespace."""
    return sorted(name for _, name in socket.if_nameindex())


@mcp.tool()
def try_write_plugin() -> Outcome:
    """Write /plugin/x (the plugin folder must be read-only)."""
    try:
        Path("/plugin/x").write_text("escaped")
    except OSError as exc:
        return Outcome(ok=False, error=_errno_name(exc))
    return Outcome(ok=True)


@mcp.tool()
def read_env() -> dict[str, str]:
    """This process's whole environment."""
    return dict(os.environ)


@mcp.tool()
def list_fds() -> dict[str, str]:
    """The fds this process inherited (taken at startup), fd -> target."""
    return {str(fd): target for fd, target in sorted(STARTUP_FDS.items())}


@mcp.tool()
def proc_pids() -> list[int]:
    """The pids visible in /proc."""
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


@mcp.tool()
def status() -> dict[str, Any]:
    """Capabilities, no_new_privs and seccomp from /proc/self/status, plus identity."""
    fields = dict(
        line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line
    )
    stat = Path("/proc/self/stat").read_text()
    wanted = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    return {
        **{key: fields[key].strip() for key in wanted},
        "hostname": socket.gethostname(),
        # 0 when the session leader is outside this pid namespace (no --new-session)
        "sid": os.getsid(0),
        "tty_nr": int(stat[stat.rindex(")") + 2 :].split()[4]),
        "cwd": os.getcwd(),
    }


@mcp.tool()
def list_dir(path: str) -> dict[str, Any]:
    """The entries of a directory, or the errno name of why it cannot be listed."""
    try:
        return {"entries": sorted(os.listdir(path)), "error": None}
    except OSError as exc:
        return {"entries": None, "error": _errno_name(exc)}


@mcp.tool()
def spawn_daemon(path: str) -> int:
    """Start a detached daemon that appends a heartbeat to `path` every 100 ms; its pid."""
    subprocess.run([sys.executable, "-c", DAEMON, path], check=True, timeout=10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = Path(path).read_text().splitlines() if Path(path).exists() else []
        if lines:
            return int(lines[0].split()[0])
        time.sleep(0.02)
    raise RuntimeError("daemon did not start")


@mcp.tool()
def try_unshare_user() -> Outcome:
    """Create a nested user namespace (must fail)."""
    done = subprocess.run([sys.executable, "-c", UNSHARE_PROBE], capture_output=True, text=True, timeout=10)
    code = int(done.stdout.strip())
    return Outcome(ok=code == 0, error=errno.errorcode.get(code) if code else None)


@mcp.tool()
def fork_many(n: int) -> Counted:
    """Fork up to n sleeping children; how many were started before fork failed."""
    children: list[int] = []
    error = None
    try:
        for _ in range(n):
            pid = os.fork()
            if pid == 0:  # child: only async-signal-safe work, the parent kills it
                time.sleep(60)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        error = _errno_name(exc)
    finally:
        for pid in children:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    return Counted(count=len(children), error=error)


@mcp.tool()
def try_alloc(mib: int) -> Outcome:
    """Allocate and touch `mib` MiB."""
    try:
        block = bytearray(mib * MiB)
    except MemoryError:
        return Outcome(ok=False, error="MemoryError")
    del block
    return Outcome(ok=True)


@mcp.tool()
def try_write_tmp(mib: int) -> Counted:
    """Write a file of `mib` MiB under /tmp; the MiB written before the first error."""
    written = 0
    error = None
    chunk = b"\0" * MiB
    try:
        with open("/tmp/big", "wb", buffering=0) as f:
            for _ in range(mib):
                f.write(chunk)
                written += 1
    except OSError as exc:  # Python ignores SIGXFSZ, so RLIMIT_FSIZE shows up as EFBIG
        error = _errno_name(exc)
    finally:
        Path("/tmp/big").unlink(missing_ok=True)
    return Counted(count=written, error=error)


@mcp.tool()
def open_many(n: int) -> Counted:
    """Open /dev/null up to n times; how many opened before the first error."""
    opened: list[int] = []
    error = None
    try:
        while len(opened) < n:  # not extend(): the fds opened before EMFILE must be closed
            opened.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as exc:
        error = _errno_name(exc)
    finally:
        for fd in opened:
            os.close(fd)
    return Counted(count=len(opened), error=error)


if __name__ == "__main__":
    mcp.run()
