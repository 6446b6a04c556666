"""A hostile MCP server for the sandbox tests: each tool tries one way out of the sandbox.

tests/test_sandbox.py starts this file under `mcp_host.sandbox.bwrap.build_command` and asserts that
every probe fails; tests/test_seccomp.py starts it as the host does and makes system calls
(`try_syscalls`). It imports only the MCP SDK and the standard library (never `mcp_host`,
which is not even mounted inside the sandbox). Probes report failures as data
(`{ok, error}` with the errno name) so a test can assert the exact reason.
"""

from __future__ import annotations

import errno
import json
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


# Flatpak's try-syscall, in Python: `python -c TRY_SYSCALL NAME...` makes each named call in a
# forked child of a fresh single-threaded process (unshare(CLONE_NEWUSER) answers EINVAL in any
# multithreaded one, and a killed probe must not take the server along) and prints
# {name: "ok" | errno name | "SIG..." (killed) | "n/a" (no such call on this arch)} as JSON.
# The arguments make each call fail harmlessly (bad fd, bad pointer) when it is allowed, so an
# EPERM or ENOSYS can only come from the seccomp filter.
TRY_SYSCALL = """
import ctypes, errno, json, mmap, os, platform, signal, sys
X86 = platform.machine() == "x86_64"
NR = dict(zip(
    ("ioctl clone clone3 chroot unshare setns mount open_tree keyctl ptrace bpf perf_event_open"
     " userfaultfd personality fchmodat listen prctl getpid shmget msgget semget").split(),
    (16, 56, 435, 161, 272, 308, 165, 428, 250, 101, 321, 298, 323, 135, 268, 50, 157, 39, 29, 68, 64) if X86 else
    (29, 220, 435, 51, 97, 268, 40, 428, 219, 117, 280, 241, 282, 92, 53, 201, 167, 172, 194, 186, 190),
))
WRONG = 1  # a pointer the kernel cannot read: EFAULT once the call gets that far
TIOCSTI, TIOCLINUX, TIOCNOTTY = 0x5412, 0x541C, 0x5422
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
PROBES = {
    "ioctl_tiocsti": ("ioctl", -1, TIOCSTI, WRONG),
    "ioctl_tiocsti_high_bits": ("ioctl", -1, 0xFFFFFFFF00000000 | TIOCSTI, WRONG),
    "ioctl_tioclinux": ("ioctl", -1, TIOCLINUX, WRONG),
    "ioctl_tiocnotty": ("ioctl", -1, TIOCNOTTY),
    "ioctl_tiocnotty_devnull": ("ioctl", 0, TIOCNOTTY),
    "clone3": ("clone3", WRONG, 88),
    "clone_newuser": ("clone", CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0),
    "clone_fork": ("clone", SIGCHLD, 0, 0, 0, 0),
    "unshare_newuser": ("unshare", CLONE_NEWUSER),
    "setns": ("setns", -1, 0),
    "chroot": ("chroot", WRONG),
    "mount": ("mount", WRONG, WRONG, WRONG, 0, 0),
    "open_tree": ("open_tree", -1, WRONG, 0),
    "keyctl": ("keyctl", 0xDEAD, 0, 0, 0, 0),
    "ptrace": ("ptrace", 7, 999999, 0, 0),  # PTRACE_CONT of a pid that does not exist
    "bpf": ("bpf", 0xDEAD, WRONG, 0),
    "perf_event_open": ("perf_event_open", WRONG, 0, -1, -1, 0),
    "userfaultfd": ("userfaultfd", 0xDEAD),
    "personality_query": ("personality", 0xFFFFFFFF),
    "personality_no_aslr": ("personality", 0x0040000),  # ADDR_NO_RANDOMIZE
    "chmod": ("fchmodat", -100, WRONG, 0o700, 0),  # AT_FDCWD
    "listen": ("listen", -1, 42),
    "prctl": ("prctl", 37, WRONG, 0, 0, 0),  # PR_GET_CHILD_SUBREAPER
    # System V IPC: a key nobody made, without IPC_CREAT (ENOENT when allowed; nothing is made)
    "shmget": ("shmget", 0xDEAD, 4096, 0),
    "msgget": ("msgget", 0xDEAD, 0),
    "semget": ("semget", 0xDEAD, 1, 0),
    "x32_getpid": ("getpid | x32",),
    "i386_getpid": ("int 0x80",),
}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def i386_getpid():
    # mov eax, 20 (getpid in the i386 table); int 0x80; ret
    code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(bytes.fromhex("b814000000cd80c3"))
    address = ctypes.addressof(ctypes.c_char.from_buffer(code))
    return ctypes.CFUNCTYPE(ctypes.c_int)(address)()

def probe(name):
    call, *args = PROBES[name]
    if call == "int 0x80":
        return i386_getpid()
    nr = NR["getpid"] | 0x40000000 if call == "getpid | x32" else NR[call]
    result = libc.syscall(ctypes.c_long(nr), *(ctypes.c_ulong(arg % 2**64) for arg in args))
    if result == 0 and call == "clone":
        os._exit(0)  # the clone child: a copy of this process
    return result

def run(name):
    if name not in PROBES:
        return "unknown"
    if not X86 and name in ("x32_getpid", "i386_getpid"):
        return "n/a"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        result = probe(name)
        os.write(write, str(ctypes.get_errno() if result == -1 else 0).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        code = answer.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return "ok" if code == "0" else errno.errorcode[int(code)]

print(json.dumps({name: run(name) for name in sys.argv[1:]}))
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
    fields = dict(line.split(":\t", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":\t" in line)
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
def try_syscalls(names: list[str]) -> dict[str, str]:
    """Make each named system call (TRY_SYSCALL's PROBES); name -> "ok", errno name, or signal."""
    done = subprocess.run(
        [sys.executable, "-c", TRY_SYSCALL, *names],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return dict(json.loads(done.stdout))


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
