"""The sandbox: the bwrap argv, pinned flag by flag, and what a child can and cannot do in it.

Real bubblewrap, real MCP stdio clients, no mocks. The escape plugin (tests/fixtures/plugins/escape)
is a real MCP server whose tools try to get out; each test asserts that one way stays shut
(docs/security.md D1-D12, B4, C8). The small scripts in tests/sandbox_helpers stand in for a host
that gets killed. What the cgroups do is tested in tests/test_sandbox_cgroup.py, what the
seccomp filter does (and how the host hands it to bwrap) in tests/test_seccomp.py.

Here bwrap gets its filter from a shell that opens a file holding it (`command`), so any
spawner can run a sandbox, the MCP SDK's stdio client included; the host passes a memfd.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from inline_snapshot import snapshot
from mcp import Client, StdioServerParameters

from mcp_host.errors import Unavailable
from mcp_host.sandbox import egress_view
from mcp_host.sandbox.bwrap import (
    BASE_ENV,
    Limits,
    SandboxLedger,
    SandboxSpec,
    SandboxUnavailable,
    build_command,
    bwrap_arguments,
    bwrap_path,
    require_bwrap,
)
from mcp_host.sandbox.cgroups import SandboxCgroup
from mcp_host.sandbox.egress_view import interpreter_trees
from mcp_host.sandbox.seccomp import program
from tests.hosting import PLUGINS, REPO, TESTS
from tests.processes import FORK_LOOP, needs_bwrap, read_line, wait_until

ESCAPE = (PLUGINS / "escape").resolve()
SOURCES = REPO
# The fd bwrap reads its seccomp filter from, in the snapshots and in `command`.
SECCOMP_FD = 9
HELPERS = TESTS / "sandbox_helpers"
MiB = 1024 * 1024
LIMITS = Limits(memory_bytes=1024 * MiB, max_processes=64, max_open_files=256, cpu_seconds=60, max_file_bytes=16 * MiB)
# What the host binds for `command: python` (mcp_host/launch.py): the venv and its base.
INTERPRETER = tuple(dict.fromkeys((Path(sys.prefix), Path(sys.base_prefix))))
# What a child sees of /etc and of the top-level symlinks into /usr: what this host has.
HOST_ETC_FILES = [name for name in ("ld.so.cache", "localtime") if Path("/etc", name).exists()]
HOST_ROOT_LINKS = {name for name in ("bin", "sbin", "lib", "lib64", "lib32", "libx32") if Path("/", name).exists()}

# A spec as the host builds it for a capability that named host ops; fake paths, so the
# snapshot is the same on every machine with bwrap at /usr/bin and a merged /usr.
TYPICAL = SandboxSpec(
    plugin_dir=Path("/srv/plugins/calendar.book"),
    command="/opt/venv/bin/python",
    args=("server.py", "--verbose"),
    env={"PYTHONUNBUFFERED": "1", "MCP_HOST_SOCKET": "/run/mcp-host.sock"},
    limits=LIMITS,
    extra_ro_binds=(Path("/opt/venv"), Path("/opt/python")),
    hidden=("/opt/python/lib/python3.11/site-packages",),
    socket_binds=((Path("/var/lib/mcp-host/run/calendar.book.sock"), "/run/mcp-host.sock"),),
)

# A sandbox's cgroups as `SandboxCgroups.create` names them (plugin id, host pid and start time,
# random): under cgroup v1 one group per hierarchy (pids, memory), under v2 one for both.
CGROUP = SandboxCgroup(
    pids=Path("/sys/fs/cgroup/pids/mcp-host/calendar.book-4242-170000-0badc0de"),
    memory=Path("/sys/fs/cgroup/memory/mcp-host/calendar.book-4242-170000-0badc0de"),
)
CGROUP_V2 = Path("/sys/fs/cgroup/mcp-host/calendar.book-4242-170000-0badc0de")

# bwrap's flags and how many arguments each takes: parsing an argv with this table fails
# (KeyError) on any flag the builder did not mean to emit.
ARITY = {
    "--unshare-all": 0,
    "--unshare-user": 0,
    "--disable-userns": 0,
    "--share-net": 0,
    "--die-with-parent": 0,
    "--new-session": 0,
    "--cap-drop": 1,
    "--seccomp": 1,
    "--hostname": 1,
    "--clearenv": 0,
    "--setenv": 2,
    "--proc": 1,
    "--dev": 1,
    "--size": 1,
    "--tmpfs": 1,
    "--ro-bind": 2,
    "--ro-bind-try": 2,
    "--symlink": 2,
    "--bind": 2,
    "--remount-ro": 1,
    "--chdir": 1,
}

HOSTILE = [
    "--",
    "--share-net",
    "--bind / /",
    "--setenv",
    "-",
    "-rf",
    "a b",
    "line\nbreak",
    "\t--dev-bind",
    "..",
    "../../etc/shadow",
    "$(id)",
    "a=b",
    " ",
    "",
]

# Writes up to 32 MiB of zeros to each path given (making its folder first) and prints
# {path: [whole MiB written, errno name or null]}: where a child can put bytes, and how many.
WRITE_PROBE = """
import errno, json, os, sys
found = {}
for path in sys.argv[1:]:
    written, error = 0, None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            while written < 32 << 20:
                written += os.write(fd, bytes(min(1 << 20, (32 << 20) - written)))
        finally:
            os.close(fd)
    except OSError as exc:
        error = errno.errorcode[exc.errno]
    found[path] = [written >> 20, error]
print(json.dumps(found))
"""

# Makes a System V shared memory segment, message queue and semaphore set (IPC_PRIVATE,
# IPC_CREAT), then uses POSIX shared memory as Python's multiprocessing does: a 2 MiB
# SharedMemory block read by a Pool's workers (its locks are POSIX semaphores, /dev/shm too),
# then fills /dev/shm to its cap. Prints {call: "ok" | errno name, "pool": [byte per MiB],
# "fill": [bytes written, errno name]}.
IPC_PROBE = """
import ctypes, errno, json, os
from multiprocessing import Pool, shared_memory
libc = ctypes.CDLL(None, use_errno=True)
IPC_PRIVATE, IPC_CREAT, MiB = 0, 0o1000, 1 << 20

def answer(result):
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]

def byte_at(mib):
    return block.buf[mib * MiB]

found = {
    "shmget": answer(libc.shmget(IPC_PRIVATE, MiB, IPC_CREAT | 0o600)),
    "msgget": answer(libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600)),
    "semget": answer(libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o600)),
}
block = shared_memory.SharedMemory(create=True, size=2 * MiB)
block.buf[:] = bytes([1]) * MiB + bytes([2]) * MiB
with Pool(2) as pool:
    found["pool"] = pool.map(byte_at, range(2))
fd = os.open("/dev/shm/fill", os.O_WRONLY | os.O_CREAT)
written = 0
try:
    while True:
        written += os.write(fd, bytes(MiB))
except OSError as exc:
    found["fill"] = [written, errno.errorcode[exc.errno]]
block.close()
block.unlink()
print(json.dumps(found))
"""

UNSHARE_PROBE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno())
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def seccomp_file() -> Iterator[Path]:
    """The seccomp program in a file anyone can read (the fork bomb test runs as nobody)."""
    folder = Path(tempfile.mkdtemp(prefix="mcp-host-seccomp-"))
    folder.chmod(0o755)
    path = folder / "filter.bpf"
    path.write_bytes(program())
    path.chmod(0o644)
    yield path
    path.unlink()
    folder.rmdir()


def command(spec: SandboxSpec, seccomp_file: Path, **changes: Any) -> list[str]:
    """The argv that runs `spec` sandboxed, behind a shell that opens the filter at SECCOMP_FD."""
    argv = build_command(spec, seccomp_fd=SECCOMP_FD, **changes)
    return ["/bin/sh", "-c", f'exec "$@" {SECCOMP_FD}<"$0"', str(seccomp_file), *argv]


@pytest.fixture
def marker() -> Iterator[str]:
    """A value put in the child's env to find its processes from the host; any left are killed."""
    value = f"escape-{secrets.token_hex(8)}"
    yield value
    for pid in _marked(value):
        _sigkill(pid)


def escape_spec(marker: str, **changes: Any) -> SandboxSpec:
    spec = SandboxSpec(
        plugin_dir=ESCAPE,
        command=sys.executable,
        args=("server.py",),
        env={"ESCAPE_MARKER": marker},
        limits=LIMITS,
        extra_ro_binds=INTERPRETER,
    )
    return replace(spec, **changes)


@asynccontextmanager
async def running(spec: SandboxSpec, seccomp_file: Path) -> AsyncIterator[Client]:
    argv = command(spec, seccomp_file)
    # bwrap gets the test's whole environment (the SDK would pass only an allow-list), so it
    # is --clearenv that must keep it out of the child.
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with Client(params, read_timeout_seconds=30) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    content = result.structured_content
    assert content is not None
    return content["result"] if set(content) == {"result"} else content


def parse_bwrap(argv: list[str]) -> tuple[list[tuple[str, ...]], list[str]]:
    """bwrap's operations (flag + its arguments) and the child's argv after `--`."""
    ops: list[tuple[str, ...]] = []
    index = 1
    while argv[index] != "--":
        width = ARITY[argv[index]]
        ops.append(tuple(argv[index : index + 1 + width]))
        index += 1 + width
    return ops, argv[index + 1 :]


def grouped(argv: list[str]) -> list[tuple[str, ...]]:
    """`argv` one bwrap operation per item (bwrap itself first, the child's argv last)."""
    ops, child = parse_bwrap(argv)
    return [(argv[0],), *ops, ("--", *child)]


def prlimit_argv(limits: Limits) -> list[str]:
    return [
        "/usr/bin/prlimit",
        f"--data={limits.data_bytes}",
        f"--nproc={limits.max_processes}",
        f"--nofile={limits.max_open_files}",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds}",
        f"--fsize={limits.max_file_bytes}",
        "--",
    ]


# --- the argv ---------------------------------------------------------------------------


@needs_bwrap
def test_argv_pins_every_flag_for_a_typical_spec() -> None:
    assert grouped(build_command(TYPICAL, seccomp_fd=SECCOMP_FD)) == snapshot(
        [
            ("/usr/bin/bwrap",),
            ("--unshare-all",),
            ("--unshare-user",),
            ("--disable-userns",),
            ("--die-with-parent",),
            ("--new-session",),
            ("--cap-drop", "ALL"),
            ("--seccomp", "9"),
            ("--hostname", "mcp-sandbox"),
            ("--clearenv",),
            ("--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("--setenv", "HOME", "/tmp"),
            ("--setenv", "LANG", "C.UTF-8"),
            ("--setenv", "PYTHONUNBUFFERED", "1"),
            ("--setenv", "MCP_HOST_SOCKET", "/run/mcp-host.sock"),
            ("--proc", "/proc"),
            ("--dev", "/dev"),
            ("--size", "16777216"),
            ("--tmpfs", "/dev/shm"),
            ("--size", "67108864"),
            ("--tmpfs", "/tmp"),
            ("--ro-bind", "/usr", "/usr"),
            ("--symlink", "usr/bin", "/bin"),
            ("--symlink", "usr/sbin", "/sbin"),
            ("--symlink", "usr/lib", "/lib"),
            ("--symlink", "usr/lib64", "/lib64"),
            ("--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"),
            ("--ro-bind-try", "/etc/localtime", "/etc/localtime"),
            ("--ro-bind", "/opt/venv", "/opt/venv"),
            ("--ro-bind", "/opt/python", "/opt/python"),
            ("--size", "4096"),
            ("--tmpfs", "/opt/python/lib/python3.11/site-packages"),
            ("--remount-ro", "/opt/python/lib/python3.11/site-packages"),
            ("--ro-bind", "/srv/plugins/calendar.book", "/plugin"),
            ("--bind", "/var/lib/mcp-host/run/calendar.book.sock", "/run/mcp-host.sock"),
            ("--remount-ro", "/dev"),
            ("--remount-ro", "/"),
            ("--chdir", "/plugin"),
            (
                "--",
                "/usr/bin/prlimit",
                "--data=989855744",
                "--nproc=64",
                "--nofile=256",
                "--cpu=60:60",
                "--fsize=16777216",
                "--",
                "/opt/venv/bin/python",
                "server.py",
                "--verbose",
            ),
        ]
    )


def host_neutral(groups: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """`groups` with the paths that differ between machines named: the base Python's tree and
    the folder of the egress bridge."""
    base = str(interpreter_trees()[0]) if interpreter_trees() else "/nowhere"
    egress = str(Path(egress_view.__file__).resolve().parent.parent / "egress")
    return [tuple(part.replace(base, "<base python>").replace(egress, "<egress>") for part in g) for g in groups]


@needs_bwrap
def test_argv_with_egress_keeps_its_own_network_binds_the_proxy_socket_and_runs_the_bridge() -> None:
    spec = replace(TYPICAL, egress_socket=Path("/var/lib/mcp-host/run/egress/1.sock"))
    assert host_neutral(grouped(build_command(spec, seccomp_fd=SECCOMP_FD))) == snapshot(
        [
            ("/usr/bin/bwrap",),
            ("--unshare-all",),
            ("--unshare-user",),
            ("--disable-userns",),
            ("--die-with-parent",),
            ("--new-session",),
            ("--cap-drop", "ALL"),
            ("--seccomp", "9"),
            ("--hostname", "mcp-sandbox"),
            ("--clearenv",),
            ("--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("--setenv", "HOME", "/tmp"),
            ("--setenv", "LANG", "C.UTF-8"),
            ("--setenv", "PYTHONUNBUFFERED", "1"),
            ("--setenv", "MCP_HOST_SOCKET", "/run/mcp-host.sock"),
            ("--setenv", "HTTP_PROXY", "http://127.0.0.1:3128"),
            ("--setenv", "HTTPS_PROXY", "http://127.0.0.1:3128"),
            ("--setenv", "ALL_PROXY", "http://127.0.0.1:3128"),
            ("--setenv", "http_proxy", "http://127.0.0.1:3128"),
            ("--setenv", "https_proxy", "http://127.0.0.1:3128"),
            ("--setenv", "all_proxy", "http://127.0.0.1:3128"),
            ("--setenv", "NO_PROXY", ""),
            ("--setenv", "no_proxy", ""),
            ("--setenv", "NODE_USE_ENV_PROXY", "1"),
            ("--setenv", "NODE_OPTIONS", "--require /run/mcp-host/egress-node.cjs"),
            ("--proc", "/proc"),
            ("--dev", "/dev"),
            ("--size", "16777216"),
            ("--tmpfs", "/dev/shm"),
            ("--size", "67108864"),
            ("--tmpfs", "/tmp"),
            ("--ro-bind", "/usr", "/usr"),
            ("--symlink", "usr/bin", "/bin"),
            ("--symlink", "usr/sbin", "/sbin"),
            ("--symlink", "usr/lib", "/lib"),
            ("--symlink", "usr/lib64", "/lib64"),
            ("--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"),
            ("--ro-bind-try", "/etc/localtime", "/etc/localtime"),
            ("--ro-bind-try", "/etc/ssl/certs", "/etc/ssl/certs"),
            ("--ro-bind-try", "/etc/ssl/openssl.cnf", "/etc/ssl/openssl.cnf"),
            ("--ro-bind", "/opt/venv", "/opt/venv"),
            ("--ro-bind", "/opt/python", "/opt/python"),
            ("--ro-bind", "<base python>", "<base python>"),
            ("--ro-bind", "<egress>/bridge.py", "/run/mcp-host/egress-bridge.py"),
            ("--ro-bind", "<egress>/node_preload.cjs", "/run/mcp-host/egress-node.cjs"),
            ("--size", "4096"),
            ("--tmpfs", "/opt/python/lib/python3.11/site-packages"),
            ("--remount-ro", "/opt/python/lib/python3.11/site-packages"),
            ("--size", "4096"),
            ("--tmpfs", "<base python>/lib/python3.11/site-packages"),
            ("--remount-ro", "<base python>/lib/python3.11/site-packages"),
            ("--ro-bind", "/srv/plugins/calendar.book", "/plugin"),
            ("--bind", "/var/lib/mcp-host/run/calendar.book.sock", "/run/mcp-host.sock"),
            ("--bind", "/var/lib/mcp-host/run/egress/1.sock", "/run/mcp-host/egress.sock"),
            ("--remount-ro", "/dev"),
            ("--remount-ro", "/"),
            ("--chdir", "/plugin"),
            (
                "--",
                "/usr/bin/prlimit",
                "--data=989855744",
                "--nproc=64",
                "--nofile=256",
                "--cpu=60:60",
                "--fsize=16777216",
                "--",
                "<base python>/bin/python3.11",
                "-I",
                "-S",
                "/run/mcp-host/egress-bridge.py",
                "--listen",
                "127.0.0.1:3128",
                "--socket",
                "/run/mcp-host/egress.sock",
                "--",
                "/opt/venv/bin/python",
                "server.py",
                "--verbose",
            ),
        ]
    )


def test_egress_appends_the_preload_to_the_manifests_node_options() -> None:
    spec = replace(TYPICAL, env={"NODE_OPTIONS": "--max-old-space-size=64"}, egress_socket=Path("/run/e.sock"))
    operations = bwrap_arguments(spec, seccomp_fd=SECCOMP_FD)
    at = operations.index("NODE_OPTIONS")
    assert operations[at + 1] == "--max-old-space-size=64 --require /run/mcp-host/egress-node.cjs"
    assert "--share-net" not in operations


@needs_bwrap
def test_argv_with_cgroups_joins_them_and_then_execs_bwrap() -> None:
    # cgroup v1: the shell joins the pids group ($0), then the memory group ($1), drops the
    # second path and becomes bwrap.
    # bwrap is exec'd with no variable at all: the shell's PWD and OLDPWD would reach pid 1.
    argv = build_command(TYPICAL, seccomp_fd=SECCOMP_FD, cgroup=CGROUP)
    assert [tuple(argv[:5]), tuple(argv[5:7]), *grouped(argv[7:])] == snapshot(
        [
            (
                "/bin/sh",
                "-c",
                'echo $$ > "$0/cgroup.procs" && echo $$ > "$1/cgroup.procs" && shift && exec "$@"',
                "/sys/fs/cgroup/pids/mcp-host/calendar.book-4242-170000-0badc0de",
                "/sys/fs/cgroup/memory/mcp-host/calendar.book-4242-170000-0badc0de",
            ),
            ("/usr/bin/env", "-i"),
            ("/usr/bin/bwrap",),
            ("--unshare-all",),
            ("--unshare-user",),
            ("--disable-userns",),
            ("--die-with-parent",),
            ("--new-session",),
            ("--cap-drop", "ALL"),
            ("--seccomp", "9"),
            ("--hostname", "mcp-sandbox"),
            ("--clearenv",),
            ("--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("--setenv", "HOME", "/tmp"),
            ("--setenv", "LANG", "C.UTF-8"),
            ("--setenv", "PYTHONUNBUFFERED", "1"),
            ("--setenv", "MCP_HOST_SOCKET", "/run/mcp-host.sock"),
            ("--proc", "/proc"),
            ("--dev", "/dev"),
            ("--size", "16777216"),
            ("--tmpfs", "/dev/shm"),
            ("--size", "67108864"),
            ("--tmpfs", "/tmp"),
            ("--ro-bind", "/usr", "/usr"),
            ("--symlink", "usr/bin", "/bin"),
            ("--symlink", "usr/sbin", "/sbin"),
            ("--symlink", "usr/lib", "/lib"),
            ("--symlink", "usr/lib64", "/lib64"),
            ("--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"),
            ("--ro-bind-try", "/etc/localtime", "/etc/localtime"),
            ("--ro-bind", "/opt/venv", "/opt/venv"),
            ("--ro-bind", "/opt/python", "/opt/python"),
            ("--size", "4096"),
            ("--tmpfs", "/opt/python/lib/python3.11/site-packages"),
            ("--remount-ro", "/opt/python/lib/python3.11/site-packages"),
            ("--ro-bind", "/srv/plugins/calendar.book", "/plugin"),
            ("--bind", "/var/lib/mcp-host/run/calendar.book.sock", "/run/mcp-host.sock"),
            ("--remount-ro", "/dev"),
            ("--remount-ro", "/"),
            ("--chdir", "/plugin"),
            (
                "--",
                "/usr/bin/prlimit",
                "--nproc=64",
                "--nofile=256",
                "--cpu=60:60",
                "--fsize=16777216",
                "--",
                "/opt/venv/bin/python",
                "server.py",
                "--verbose",
            ),
        ]
    )


@needs_bwrap
def test_argv_with_one_cgroup_for_both_controllers_joins_it_once() -> None:
    # cgroup v2 (one group, both controllers), or a host with one controller only. With a
    # memory group the memory cap is the group's alone: no RLIMIT_DATA; with pids only it stays.
    without = build_command(TYPICAL, seccomp_fd=SECCOMP_FD)[1:]
    no_data = [arg for arg in without if arg != "--data=989855744"]
    assert len(no_data) == len(without) - 1
    for cgroup, rest in (
        (SandboxCgroup(pids=CGROUP_V2, memory=CGROUP_V2), no_data),
        (SandboxCgroup(memory=CGROUP_V2), no_data),
        (SandboxCgroup(pids=CGROUP_V2), without),
    ):
        argv = build_command(TYPICAL, seccomp_fd=SECCOMP_FD, cgroup=cgroup)
        join = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(CGROUP_V2)]
        assert argv[:7] == [*join, "/usr/bin/env", "-i", "/usr/bin/bwrap"]
        assert argv[7:] == rest


@needs_bwrap
def test_hostile_values_never_become_bwrap_flags() -> None:
    # Whatever a manifest puts in command, args, env or the folder name, bwrap sees the same
    # operations as for TYPICAL: only the plugin bind's source and the --setenv values change,
    # and the command and args come after `--`, behind prlimit's own `--`.
    def without_setenv(ops: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
        return [op for op in ops if op[0] != "--setenv"]

    baseline, _ = parse_bwrap(build_command(TYPICAL, seccomp_fd=SECCOMP_FD))
    plugin_bind = ("--ro-bind", str(TYPICAL.plugin_dir), "/plugin")
    for value in HOSTILE:
        specs = [
            replace(TYPICAL, args=(value, "x", value)),
            replace(TYPICAL, env={**TYPICAL.env, "HOSTILE": value}),
            replace(TYPICAL, plugin_dir=Path(f"/srv/plugins/{value}x")),
        ]
        if value:
            specs.append(replace(TYPICAL, command=value))
        for spec in specs:
            if ".." in spec.plugin_dir.parts:
                with pytest.raises(ValueError, match="plugin_dir"):
                    build_command(spec, seccomp_fd=SECCOMP_FD)
                continue
            ops, child = parse_bwrap(build_command(spec, seccomp_fd=SECCOMP_FD))
            expected = [
                ("--ro-bind", str(spec.plugin_dir), "/plugin") if op == plugin_bind else op
                for op in without_setenv(baseline)
            ]
            assert without_setenv(ops) == expected, value
            setenv = [op for op in ops if op[0] == "--setenv"]
            assert setenv == [("--setenv", key, val) for key, val in {**BASE_ENV, **spec.env}.items()]
            assert child == [*prlimit_argv(spec.limits), spec.command, *spec.args]


@needs_bwrap
def test_argv_with_an_args_fd_names_only_the_fd_prlimit_and_the_command() -> None:
    # What the host spawns (launch.py): bwrap reads its operations, every host path among
    # them, from the fd; its command line is also the sandbox's pid 1's.
    argv = build_command(TYPICAL, seccomp_fd=SECCOMP_FD, cgroup=CGROUP, args_fd=10)
    assert argv == snapshot(
        [
            "/bin/sh",
            "-c",
            'echo $$ > "$0/cgroup.procs" && echo $$ > "$1/cgroup.procs" && shift && exec "$@"',
            "/sys/fs/cgroup/pids/mcp-host/calendar.book-4242-170000-0badc0de",
            "/sys/fs/cgroup/memory/mcp-host/calendar.book-4242-170000-0badc0de",
            "/usr/bin/env",
            "-i",
            "/usr/bin/bwrap",
            "--args",
            "10",
            "--",
            "/usr/bin/prlimit",
            "--nproc=64",
            "--nofile=256",
            "--cpu=60:60",
            "--fsize=16777216",
            "--",
            "/opt/venv/bin/python",
            "server.py",
            "--verbose",
        ]
    )
    # The fd holds exactly the operations the inline argv has.
    inline = build_command(TYPICAL, seccomp_fd=SECCOMP_FD)
    plain = build_command(TYPICAL, seccomp_fd=SECCOMP_FD, args_fd=10)  # no cgroup: RLIMIT_DATA too
    assert plain[:4] == ["/usr/bin/bwrap", "--args", "10", "--"]
    assert bwrap_arguments(TYPICAL, seccomp_fd=SECCOMP_FD) == inline[1 : inline.index("--chdir") + 2]
    assert [*inline[:1], *bwrap_arguments(TYPICAL, seccomp_fd=SECCOMP_FD), *plain[3:]] == inline


@pytest.mark.parametrize("args_fd", [0, 2, -1, True, "10", SECCOMP_FD])
def test_an_args_fd_that_is_not_one_of_its_own_is_refused(args_fd: Any) -> None:
    with pytest.raises(ValueError, match="args_fd"):
        build_command(TYPICAL, seccomp_fd=SECCOMP_FD, args_fd=args_fd)


@needs_bwrap
def test_bwrap_reads_its_operations_from_the_args_fd(seccomp_file: Path, tmp_path: Path) -> None:
    spec = replace(escape_spec("unused"), command="/bin/cat", args=("/proc/1/cmdline",))
    args_file = tmp_path / "args"
    args_file.write_bytes(b"".join(arg.encode() + b"\0" for arg in bwrap_arguments(spec, seccomp_fd=SECCOMP_FD)))
    argv = build_command(spec, seccomp_fd=SECCOMP_FD, args_fd=8)  # dash opens fds 0-9 only
    opener = ["/bin/sh", "-c", f'a="$1"; shift; exec "$@" {SECCOMP_FD}<"$0" 8<"$a"', str(seccomp_file)]
    done = subprocess.run([*opener, str(args_file), *argv], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(b"\0")[:-1] == [arg.encode() for arg in argv]  # pid 1 is bwrap's init


def test_tmpfs_caps_are_part_of_the_memory_budget() -> None:
    limits = replace(LIMITS, memory_bytes=100 * MiB, tmp_bytes=64 * MiB, shm_bytes=16 * MiB)
    assert limits.data_bytes == 20 * MiB
    assert "--data=20971520" in build_command(replace(TYPICAL, limits=limits), seccomp_fd=SECCOMP_FD)
    with pytest.raises(ValueError, match="must exceed tmp_bytes"):
        replace(limits, memory_bytes=80 * MiB)


@needs_bwrap
def test_hostile_arguments_reach_the_child_verbatim(seccomp_file: Path) -> None:
    spec = replace(escape_spec("unused"), command="/usr/bin/printf", args=("%s\\0", *HOSTILE))
    done = subprocess.run(command(spec, seccomp_file), capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(b"\0")[:-1] == [value.encode() for value in HOSTILE]


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"command": ""}, id="empty-command"),
        pytest.param({"command": "py\0thon"}, id="nul-in-command"),
        pytest.param({"args": ("ok", "a\0b")}, id="nul-in-arg"),
        pytest.param({"env": {"K": "v\0"}}, id="nul-in-env-value"),
        pytest.param({"env": {"": "v"}}, id="empty-env-key"),
        pytest.param({"env": {"1A": "v"}}, id="env-key-starting-with-digit"),
        pytest.param({"env": {"A-B": "v"}}, id="env-key-with-dash"),
        pytest.param({"env": {"A=B": "v"}}, id="env-key-with-equals"),
        pytest.param({"env": {"--share-net": "v"}}, id="env-key-as-flag"),
        pytest.param({"env": {"A\nB": "v"}}, id="env-key-with-newline"),
        pytest.param({"env": {"A\n": "v"}}, id="env-key-ending-in-newline"),
        pytest.param({"env": {"A\0": "v"}}, id="env-key-with-nul"),
        pytest.param({"plugin_dir": Path("plugins/x")}, id="relative-plugin-dir"),
        pytest.param({"plugin_dir": Path("/srv/../etc")}, id="dotdot-plugin-dir"),
        pytest.param({"extra_ro_binds": (Path("/"),)}, id="bind-whole-root"),
        pytest.param({"extra_ro_binds": (Path("opt"),)}, id="relative-extra-bind"),
        pytest.param({"socket_binds": ((Path("/run/a.sock"), "run/a.sock"),)}, id="relative-socket-inside"),
        pytest.param({"socket_binds": ((Path("/run/../a.sock"), "/a.sock"),)}, id="dotdot-socket-host"),
    ],
)
@pytest.mark.parametrize("sandbox", [True, False], ids=["sandbox", "dev"])
def test_unsafe_values_are_refused(changes: dict[str, Any], sandbox: bool) -> None:
    with pytest.raises(ValueError):
        build_command(replace(TYPICAL, **changes), seccomp_fd=SECCOMP_FD, sandbox=sandbox)


@pytest.mark.parametrize("seccomp_fd", [None, 0, 2, -1, True, "9"])
def test_a_sandboxed_argv_without_a_seccomp_fd_is_refused(seccomp_fd: Any) -> None:
    # Fails closed (docs/security.md D11): no sandbox without its filter, and never stdio as one.
    with pytest.raises(ValueError, match="seccomp filter's fd"):
        build_command(TYPICAL, seccomp_fd=seccomp_fd)


def test_dev_mode_ignores_the_seccomp_fd() -> None:
    assert build_command(TYPICAL, sandbox=False) == build_command(TYPICAL, seccomp_fd=SECCOMP_FD, sandbox=False)


def test_dev_mode_argv_is_env_with_a_clean_environment() -> None:
    assert build_command(TYPICAL, sandbox=False) == snapshot(
        [
            "/usr/bin/env",
            "-i",
            "--",
            "PATH=/usr/local/bin:/usr/bin:/bin",
            "HOME=/tmp",
            "LANG=C.UTF-8",
            "PYTHONUNBUFFERED=1",
            "MCP_HOST_SOCKET=/run/mcp-host.sock",
            "/opt/venv/bin/python",
            "server.py",
            "--verbose",
        ]
    )


def test_dev_mode_refuses_a_command_env_would_take_for_an_assignment() -> None:
    with pytest.raises(ValueError, match="'=' is not allowed"):
        build_command(replace(TYPICAL, command="A=B"), sandbox=False)


def test_dev_mode_child_sees_only_its_declared_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOST_CANARY", "leaked")
    spec = replace(TYPICAL, command="/usr/bin/env", args=(), env={"DECLARED": "yes"})
    done = subprocess.run(build_command(spec, sandbox=False), capture_output=True, text=True, timeout=10)
    assert dict(line.split("=", 1) for line in done.stdout.splitlines()) == {**BASE_ENV, "DECLARED": "yes"}


@pytest.mark.parametrize(
    "field",
    ["memory_bytes", "max_processes", "max_open_files", "cpu_seconds", "max_file_bytes", "tmp_bytes", "shm_bytes"],
)
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_limits_must_be_positive_ints(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"Limits.{field}"):
        replace(LIMITS, **{field: value})


def test_missing_bwrap_refuses_to_start_with_install_instructions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bwrap_path() is None
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap") as caught:
        require_bwrap()
    assert isinstance(caught.value, Unavailable) and caught.value.code == "unavailable"
    with pytest.raises(SandboxUnavailable):
        build_command(TYPICAL, seccomp_fd=SECCOMP_FD)  # fails closed: never an unsandboxed argv
    assert build_command(TYPICAL, sandbox=False)[0] == "/usr/bin/env"


@needs_bwrap
def test_require_bwrap_returns_the_bwrap_on_path() -> None:
    assert require_bwrap() == shutil.which("bwrap")


# --- what a child can do --------------------------------------------------------------------


@needs_bwrap
@pytest.mark.anyio
async def test_child_without_egress_reaches_no_network(marker: str, seccomp_file: Path) -> None:
    abstract = f"mcp-host-test-{marker}"
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix_listener,
    ):
        unix_listener.bind("\0" + abstract)
        unix_listener.listen()
        port = listener.getsockname()[1]
        async with running(escape_spec(marker), seccomp_file) as child:
            assert await call(child, "interfaces") == ["lo"]
            refused = {"ok": False, "error": "ECONNREFUSED"}  # the sandbox's own, empty loopback
            assert await call(child, "try_tcp", host="127.0.0.1", port=port) == refused
            assert await call(child, "try_tcp", host="1.1.1.1", port=53) == {
                "ok": False,
                "error": "ENETUNREACH",
            }
            assert await call(child, "try_abstract_unix", name=abstract) == refused


@needs_bwrap
@pytest.mark.anyio
async def test_child_sees_only_its_own_read_only_tree(marker: str, tmp_path: Path, seccomp_file: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "secret").write_text("host data")
    spec = escape_spec(marker)
    async with running(spec, seccomp_file) as child:
        assert await call(child, "try_write_plugin") == {"ok": False, "error": "EROFS"}
        root = await call(child, "list_dir", path="/")
        etc = await call(child, "list_dir", path="/etc")
        home = await call(child, "list_dir", path=str(Path.home()))
        data = await call(child, "list_dir", path=str(data_dir))
        tmp = await call(child, "list_dir", path="/tmp")
    top = {path.parts[1] for path in INTERPRETER}
    assert root == {
        "entries": sorted({"dev", "etc", "plugin", "proc", "tmp", "usr"} | HOST_ROOT_LINKS | top),
        "error": None,
    }
    assert etc == {
        "entries": HOST_ETC_FILES,
        "error": None,
    }
    # The host's home shows only the path down to an interpreter bound under it, if any.
    below_home = sorted({p.relative_to(Path.home()).parts[0] for p in INTERPRETER if p.is_relative_to(Path.home())})
    assert home == ({"entries": below_home, "error": None} if below_home else {"entries": None, "error": "ENOENT"})
    assert data == {"entries": None, "error": "ENOENT"}  # under the host's /tmp: the child's /tmp is its own
    # Empty, but for the mount point of an interpreter bound from under the host's /tmp (a
    # checkout cloned there, with its venv): bwrap makes that path inside the private tmpfs.
    below_tmp = sorted({p.relative_to("/tmp").parts[0] for p in spec.extra_ro_binds if p.is_relative_to("/tmp")})
    assert tmp == {"entries": below_tmp, "error": None}


@needs_bwrap
@pytest.mark.anyio
async def test_child_env_holds_only_declared_variables(
    marker: str, monkeypatch: pytest.MonkeyPatch, seccomp_file: Path
) -> None:
    monkeypatch.setenv("HOST_CANARY", "leaked")
    spec = escape_spec(marker, env={"ESCAPE_MARKER": marker, "DECLARED": "a\nb --x"})
    async with running(spec, seccomp_file) as child:
        env = await call(child, "read_env")
    assert "HOST_CANARY" not in env
    # PWD is bwrap's own, from --chdir.
    assert env == {**BASE_ENV, "ESCAPE_MARKER": marker, "DECLARED": "a\nb --x", "PWD": "/plugin"}


@needs_bwrap
@pytest.mark.anyio
async def test_child_sees_only_sandbox_pids_and_has_no_privileges(marker: str, seccomp_file: Path) -> None:
    async with running(escape_spec(marker), seccomp_file) as child:
        pids = await call(child, "proc_pids")
        status = await call(child, "status")
    assert pids == [1, 2]  # bwrap's init and the server: nothing of the host
    assert status == {
        "CapInh": "0000000000000000",
        "CapPrm": "0000000000000000",
        "CapEff": "0000000000000000",
        "CapBnd": "0000000000000000",
        "CapAmb": "0000000000000000",
        "NoNewPrivs": "1",
        "Seccomp": "2",  # a filter is loaded (docs/security.md D6, D13); 0 would mean none
        "hostname": "mcp-sandbox",
        "sid": 1,  # --new-session: the session starts inside the sandbox, with no tty
        "tty_nr": 0,
        "cwd": "/plugin",
    }


@needs_bwrap
@pytest.mark.anyio
async def test_child_inherits_no_fds_beyond_stdio(marker: str, tmp_path: Path, seccomp_file: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    leaked = os.open(secret, os.O_RDONLY)
    os.set_inheritable(leaked, True)
    try:
        async with running(escape_spec(marker), seccomp_file) as child:
            fds = await call(child, "list_fds")
    finally:
        os.close(leaked)
    assert sorted(fds, key=int) == ["0", "1", "2"], fds


@needs_bwrap
@pytest.mark.anyio
async def test_stopping_the_child_ends_every_process_in_its_sandbox(marker: str, seccomp_file: Path) -> None:
    async with running(escape_spec(marker), seccomp_file) as child:
        await call(child, "spawn_daemon", path="/tmp/heartbeat")
        assert len(_marked(marker)) == 2  # the server and its detached daemon
    with anyio.fail_after(3):
        while _marked(marker):  # noqa: ASYNC110 - polls /proc: no event exists for another process's death
            await anyio.sleep(0.05)


@needs_bwrap
@pytest.mark.anyio
async def test_child_cannot_make_a_nested_user_namespace(marker: str, seccomp_file: Path) -> None:
    async with running(escape_spec(marker), seccomp_file) as child:
        # The seccomp filter answers first; --disable-userns stands behind it (next test).
        assert await call(child, "try_unshare_user") == {"ok": False, "error": "EPERM"}


@needs_bwrap
def test_nested_user_namespace_is_stopped_by_seccomp_and_by_disable_userns_each(seccomp_file: Path) -> None:
    # The controls for the test above: the probe can succeed, and each layer stops it alone.
    def probe(argv: list[str]) -> str:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()

    spec = replace(escape_spec("unused"), command=sys.executable, args=("-c", UNSHARE_PROBE))
    argv = command(spec, seccomp_file)
    assert probe(argv) == "1"  # EPERM: seccomp
    unfiltered = _without_seccomp(argv)
    assert probe(unfiltered) == "28"  # ENOSPC: --disable-userns
    unfiltered.remove("--disable-userns")
    assert probe(unfiltered) == "0"


# --- resource limits -----------------------------------------------------------------------


@needs_bwrap
@pytest.mark.anyio
async def test_limits_deny_memory_open_files_and_file_size(marker: str, seccomp_file: Path) -> None:
    limits = replace(LIMITS, memory_bytes=512 * MiB, max_open_files=64, max_file_bytes=8 * MiB)
    async with running(escape_spec(marker, limits=limits), seccomp_file) as child:
        assert await call(child, "try_alloc", mib=600) == {"ok": False, "error": "MemoryError"}
        assert await call(child, "try_alloc", mib=64) == {"ok": True, "error": None}
        opened = await call(child, "open_many", n=1000)
        assert await call(child, "try_write_tmp", mib=20) == {"count": 8, "error": "EFBIG"}
    assert opened["error"] == "EMFILE" and 50 < opened["count"] < 64


@needs_bwrap
def test_cpu_limit_kills_a_spinning_child(seccomp_file: Path) -> None:
    spec = replace(
        escape_spec("unused"),
        command=sys.executable,
        args=("-c", "while True: pass"),
        limits=replace(LIMITS, cpu_seconds=1),
    )
    started = time.monotonic()
    done = subprocess.run(command(spec, seccomp_file), capture_output=True, timeout=30)
    assert done.returncode == 128 + signal.SIGKILL  # bwrap reports the child's signal this way
    assert time.monotonic() - started < 10


@needs_bwrap
def test_private_tmp_is_capped_at_tmp_bytes(seccomp_file: Path) -> None:
    spec = replace(
        escape_spec("unused"),
        command="/bin/sh",
        args=("-c", "head -c 20000000 /dev/zero > /tmp/f"),
        limits=replace(LIMITS, tmp_bytes=8 * MiB, max_file_bytes=64 * MiB),
    )
    done = subprocess.run(command(spec, seccomp_file), capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "No space left on device" in done.stderr


@needs_bwrap
def test_only_tmp_and_dev_shm_take_writes_each_up_to_its_cap(seccomp_file: Path) -> None:
    # bwrap's root (/, /etc, /run …) and /dev are tmpfs without a size: writable, anything a
    # child put there would be host RAM outside every limit. Read-only, but for the two capped
    # tmpfs; the device nodes work as before.
    paths = ["/x", "/etc/x", "/run/x", "/run/mcp-host/x", "/opt/x", "/dev/x", "/plugin/x", "/usr/x"]
    paths += ["/dev/null", "/tmp/x", "/dev/shm/x"]
    spec = replace(
        escape_spec("unused"),
        command=sys.executable,
        args=("-c", WRITE_PROBE, *paths),
        limits=replace(LIMITS, tmp_bytes=8 * MiB, shm_bytes=4 * MiB, max_file_bytes=64 * MiB),
    )
    done = subprocess.run(command(spec, seccomp_file), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "/x": [0, "EROFS"],
        "/etc/x": [0, "EROFS"],
        "/run/x": [0, "EROFS"],  # mkdir /run
        "/run/mcp-host/x": [0, "EROFS"],
        "/opt/x": [0, "EROFS"],
        "/dev/x": [0, "EROFS"],
        "/plugin/x": [0, "EROFS"],
        "/usr/x": [0, "EROFS"],
        "/dev/null": [32, None],
        "/tmp/x": [8, "ENOSPC"],
        "/dev/shm/x": [4, "ENOSPC"],
    }


@needs_bwrap
def test_no_system_v_ipc_object_can_be_made_and_posix_shared_memory_works_up_to_its_cap(seccomp_file: Path) -> None:
    # A System V object outlives its process until the sandbox's IPC namespace ends, and no
    # limit counts it: measured in a 512 MiB sandbox, 800 MiB of detached shm segments (host
    # Shmem), 400 MiB each of queued messages and semaphore arrays (kernel slab). The filter
    # refuses the three calls that make one; POSIX shared memory (the capped /dev/shm) is
    # what multiprocessing uses, and it works. The same sandbox without the filter: a control.
    spec = replace(
        escape_spec("unused"),
        command=sys.executable,
        args=("-c", IPC_PROBE),
        limits=replace(LIMITS, shm_bytes=4 * MiB, max_file_bytes=64 * MiB),
    )
    argv = command(spec, seccomp_file)
    found: dict[str, Any] = {}
    for name, each in (("filtered", argv), ("control", _without_seccomp(argv))):
        done = subprocess.run(each, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        found[name] = json.loads(done.stdout)
    written, error = found["filtered"].pop("fill")
    assert found["filtered"] == {"shmget": "EPERM", "msgget": "EPERM", "semget": "EPERM", "pool": [1, 2]}
    assert found["control"]["shmget"] == found["control"]["msgget"] == found["control"]["semget"] == "ok"
    # The cap less the 2 MiB block and the pool's semaphores, a page each.
    assert error == "ENOSPC" and 2 * MiB - 64 * 1024 < written < 2 * MiB


@needs_bwrap
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is needed to drop to nobody")
def test_fork_bomb_is_capped_per_sandbox_when_the_host_is_not_root(seccomp_file: Path) -> None:
    # The same uid runs 12 other processes and two sandboxes at once: each sandbox still gets
    # its whole budget (prlimit runs inside the sandbox's user namespace; see sandbox.py).
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.geteuid() == 0 else []
    limits = replace(LIMITS, max_processes=24)
    plugin_dir = Path(tempfile.mkdtemp(prefix="mcp-host-fork-"))
    plugin_dir.chmod(0o755)
    others = [subprocess.Popen([*as_user, "sleep", "30"]) for _ in range(12)]
    try:
        spec = SandboxSpec(plugin_dir, "/bin/sh", ("-c", FORK_LOOP), {}, limits)
        bombs = [
            subprocess.Popen(
                [*as_user, *command(spec, seccomp_file)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            for _ in range(2)
        ]
        counts = [int(bomb.communicate(timeout=30)[0]) for bomb in bombs]
    finally:
        for other in others:
            other.kill()
            other.wait()
        plugin_dir.rmdir()
    assert all(limits.max_processes - 6 <= count < limits.max_processes for count in counts), counts


# --- dying with the host, and the sweep -------------------------------------------------------


@needs_bwrap
def test_child_and_its_daemon_die_with_a_killed_host(marker: str, seccomp_file: Path) -> None:
    argv = command(escape_spec(marker), seccomp_file)
    with subprocess.Popen([sys.executable, str(HELPERS / "host.py"), json.dumps(argv)], stdout=subprocess.PIPE) as host:
        try:
            json.loads(read_line(host, timeout=30))  # the daemon is running
            assert len(_marked(marker)) == 2  # the server and its detached daemon
            host.kill()
            host.wait(timeout=5)
            assert wait_until(lambda: not _marked(marker), timeout=3), _marked(marker)
        finally:
            host.kill()


@needs_bwrap
def test_sweep_kills_a_sandbox_its_dead_host_left_but_spares_a_live_hosts(
    marker: str, tmp_path: Path, seccomp_file: Path
) -> None:
    spec = replace(escape_spec(marker), command="/bin/sh", args=("-c", "sleep 60 & exec sleep 60"))
    argv = command(spec, seccomp_file)
    # Stands for bwrap #633: a host killed before bwrap armed PDEATHSIG leaves the sandbox alive.
    argv.remove("--die-with-parent")
    run_dir = tmp_path / "run"
    ledger = SandboxLedger(run_dir)
    helper = [sys.executable, str(HELPERS / "ledger_host.py"), str(run_dir), json.dumps(argv)]
    with subprocess.Popen(helper, stdout=subprocess.PIPE) as host:
        try:
            pid = int(read_line(host, timeout=30))
            assert wait_until(lambda: len(_marked(marker)) == 2, timeout=10)
            assert ledger.sweep() == []  # its host is alive: not ours to kill
            host.kill()
            host.wait(timeout=5)
            assert len(_marked(marker)) == 2  # the sandbox outlived its host
            assert ledger.sweep() == [pid]
            assert wait_until(lambda: not _marked(marker), timeout=3), _marked(marker)
            assert list(run_dir.iterdir()) == []
        finally:
            host.kill()


def test_sweep_kills_a_recorded_child_but_never_a_recycled_pid(tmp_path: Path) -> None:
    ledger = SandboxLedger(tmp_path / "run")
    recorded, recycled = (subprocess.Popen(["sleep", "60"], start_new_session=True) for _ in range(2))
    try:
        ledger.record(recorded.pid, "test.a")
        ledger.record(recycled.pid, "test.b")
        # The record of an earlier process that had the same pid: its start time differs.
        path = tmp_path / "run" / f"{recycled.pid}.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "starttime": 1}))
        assert ledger.sweep() == [recorded.pid]
        assert recorded.wait(timeout=3) == -signal.SIGKILL
        assert recycled.poll() is None
        assert list((tmp_path / "run").iterdir()) == []
    finally:
        for process in (recorded, recycled):
            process.kill()
            process.wait()


def test_forgotten_and_unreadable_records_are_never_swept(tmp_path: Path) -> None:
    ledger = SandboxLedger(tmp_path / "run")
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        ledger.record(child.pid, "test.a")
        ledger.forget(child.pid)
        ledger.forget(child.pid)  # twice is fine
        (tmp_path / "run" / f"{child.pid}.json").write_text("{not json")
        (tmp_path / "run" / "1.json").write_text(json.dumps({"pid": 1, "starttime": "x"}))
        assert ledger.sweep() == []
        assert child.poll() is None
        assert list((tmp_path / "run").iterdir()) == []
    finally:
        child.kill()
        child.wait()


def test_record_ignores_a_pid_that_is_not_a_live_child(tmp_path: Path) -> None:
    ledger = SandboxLedger(tmp_path / "run")
    exited = subprocess.Popen(["true"])
    exited.wait()
    for pid in (1, os.getpid(), exited.pid):
        ledger.record(pid, "test.a")
    assert not (tmp_path / "run").exists()
    assert ledger.sweep() == []


# --- file descriptors the host hands on ------------------------------------------------------


def test_only_the_spawn_in_children_passes_fds_and_nothing_turns_close_fds_off() -> None:
    # docs/security.md D5: bwrap hands every inherited fd into the sandbox. The one reviewed place
    # that passes fds to a process is children/process.py's spawn, and it passes a Launch's own (its
    # seccomp filter and bwrap's arguments, both read and closed by bwrap); only sandbox/launch.py
    # makes a Launch with fds. Nothing sets close_fds,
    # or makes an fd inheritable by hand.
    passing, forbidden = [], []
    packages = ("mcp_host", "owner_facade", "capabilities")
    paths = sorted(path for package in packages for path in (SOURCES / package).rglob("*.py"))
    for path in paths:
        relative = path.relative_to(SOURCES).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), relative)):
            if not isinstance(node, ast.Call):
                continue
            called = ast.unparse(node.func)
            for keyword in node.keywords:
                if keyword.arg == "pass_fds":
                    passing.append((relative, called, ast.unparse(keyword.value)))
                elif keyword.arg == "close_fds":
                    forbidden.append((relative, f"{called}(close_fds=...)"))
            if called.endswith(("set_inheritable", "set_handle_inheritable")):
                forbidden.append((relative, called))
    assert passing == [
        ("mcp_host/children/process.py", "anyio.open_process", "launch.pass_fds"),
        ("mcp_host/sandbox/launch.py", "Launch", "fds"),
    ]
    assert forbidden == []


# --- helpers ---------------------------------------------------------------------------------


def _without_seccomp(argv: list[str]) -> list[str]:
    """`argv` without `--seccomp FD`: bwrap then loads no filter (a control, never the host's)."""
    index = argv.index("--seccomp")
    return argv[:index] + argv[index + 2 :]


def _marked(marker: str) -> set[int]:
    """Host pids of live processes whose environment holds ESCAPE_MARKER=marker."""
    needle = f"ESCAPE_MARKER={marker}".encode()
    found: set[int] = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                found.add(int(environ.parent.name))
        except OSError:  # exited meanwhile, or not ours to read
            continue
    return found


def _sigkill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
