"""The sandbox a child runs in: the bubblewrap argv, its resource limits, and the ledger that
sweeps sandboxes a killed host left behind.

Above: `launch` turns a manifest into a `SandboxSpec`, makes the sandbox a `SandboxCgroup` (module
`sandbox.cgroups`), opens its seccomp filter (module `seccomp`) and takes the argv from
`build_command`; `children` spawns it as a stdio MCP server (`close_fds=True`, passing only
the filter's fd, from the event-loop thread: PR_SET_PDEATHSIG follows the spawning *thread*,
docs/security.md B5) and records each sandbox in a `SandboxLedger`, which the host sweeps at start.
Below: `bwrap` (bubblewrap >= 0.8), util-linux `prlimit` and, with cgroups, `/bin/sh`,
all exec'd by the caller; `procs` for reading /proc. Nothing here starts a process or opens a
file descriptor; the ledger's sweep only kills.

bwrap gives no security by default (docs/security.md 0.4): the argv built here *is* the security
model, and tests/test_sandbox.py pins every flag. The sandbox a child sees:

    /usr (ro), /bin /sbin /lib /lib64 as on the host (symlinks into /usr on merged-/usr systems)
    /etc            only ld.so.cache and localtime; with egress also the CA certificates
                    (never /etc/passwd, /etc/ssl/private ..., nor the resolver files)
    <runtime>       each `extra_ro_binds` path, read-only at the same path (an interpreter's or
                    a command's install tree outside /usr), each `ro_binds_at` at its path
                    inside (for `command: python`: the SDK's packages, the kit), and each
                    `hidden` path under an empty read-only tmpfs (the base interpreter's own
                    site-packages). What each runtime gets is `sandbox.runtimes`' choice.
    /plugin         the plugin folder; the working directory. With `layer_dir` (module
                    `overlay`) writable through the sandbox's own overlay: writes land in a
                    tmpfs of `limits.tmp_bytes` shared with /tmp, gone with the sandbox, never
                    in the folder on disk; without, read-only
    /tmp            a private tmpfs of `limits.tmp_bytes`; HOME points here
    /proc /dev      the sandbox's own; only its own pids are visible. /dev is read-only but
                    for its device nodes and /dev/shm, a private tmpfs of `limits.shm_bytes`
    sockets         each `socket_binds` entry, read-write (the host-op socket)
    egress          with `egress_socket` (module `egress_view`): the host's egress proxy socket
                    read-write at /run/mcp-host/egress.sock, the bridge and the Node preload
                    read-only beside it, the base Python's tree read-only (its site-packages
                    hidden), the proxy variables (HTTP_PROXY ... = http://127.0.0.1:3128), and
                    the command run behind the bridge, which listens there and carries each
                    connection to the socket. The proxy decides what is reached.
    the rest        read-only: bwrap's root (/, /etc, /run, /opt ...) is an uncapped tmpfs,
                    RAM the host pays for, so it is remounted read-only once every mount
                    point is made (`--remount-ro /`, last). Only /tmp, /dev/shm and (with
                    its layer) /plugin take writes.
    env             only `spec.env` plus PATH, HOME and LANG (`BASE_ENV`)
    namespaces      all new (user, ipc, pid, net, uts, cgroup); never the host's network: the
                    sandbox's own has only loopback, and egress goes through the proxy socket;
                    no nested user namespaces (--disable-userns)
    privileges      no capabilities (bounding set empty), NO_NEW_PRIVS, new session (no
                    controlling tty: TIOCSTI), dies with the host (--die-with-parent).
                    Under a root host the sandbox's uid 0 is the host's root to file
                    permissions: whatever is bound, it can read.
    seccomp         the filter of `seccomp.program` (--seccomp FD), loaded by bwrap after its
                    own mounts, into the sandbox's init and the command (prlimit, then the
                    bridge, the child): no namespaces, mounts, keyrings, ptrace, bpf, TIOCSTI, System V
                    IPC; `Seccomp` reads 2 inside. Required: no sandboxed argv without it.
    limits          prlimit, around the bridge too: tasks, open files, CPU (hard: SIGKILL), file size, and, only when
                    the sandbox has no memory cgroup, the data segment (RLIMIT_DATA).
                    `limits.memory_bytes` is the sandbox's whole memory budget: the tmpfs caps
                    come out of it and the rest is the data limit (`Limits`)
    argv            with `args_fd`, bwrap's operations (every host path) are read from a
                    memfd (`--args FD`), so bwrap's command line, which is also the sandbox's
                    pid 1's (/proc/1/cmdline), shows only the fd, prlimit's numbers and the
                    command, which sandbox-side paths name
    cgroups         when the host has them (`sandbox_cgroup.SandboxCgroups`), joined before bwrap
                    runs, for the whole sandbox, bwrap included: `pids.max` tasks, the only
                    task cap that holds when the host runs as root (see `_prlimit_argv`), and a
                    memory limit, the sandbox's memory cap wherever the host has one: it
                    counts all the sandbox holds (the memfd pages it writes too, which no
                    rlimit sees), fits every runtime, and its OOM-kill counter names the cause.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mcp_host.errors import Unavailable

from . import egress_view, overlay
from .cgroups import SandboxCgroup
from .procs import child_pids, proc_stat, started_at

__all__ = [
    "BASE_ENV",
    "Limits",
    "SandboxLedger",
    "SandboxSpec",
    "SandboxUnavailable",
    "bwrap_path",
    "build_command",
    "bwrap_arguments",
    "require_bwrap",
]

logger = logging.getLogger(__name__)

_MiB = 1024 * 1024

# The fixed environment every child gets under its declared variables (which may override
# these). HOME is the private /tmp so tools that write ~/.cache work and see nothing of the
# host's home; C.UTF-8 is built into glibc, so no locale files are needed.
BASE_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
}

_HOSTNAME = "mcp-sandbox"
_PLUGIN_MOUNT = "/plugin"
_PRLIMIT = "/usr/bin/prlimit"
_ENV_BIN = "/usr/bin/env"
_INSTALL_HINT = "install bubblewrap and util-linux (Debian/Ubuntu: apt-get install bubblewrap util-linux)"

_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: "$" would allow a final "\n"
# Top-level entries that merged-/usr systems make symlinks into /usr; elsewhere real dirs.
_ROOT_LINKS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")
# /etc files any child needs: the dynamic linker's cache (libraries in multiarch dirs) and
# the time zone. "-try" binds: a file missing on some host must not break every child.
_ETC_ALWAYS = ("/etc/ld.so.cache", "/etc/localtime")


class SandboxUnavailable(Unavailable):
    """bubblewrap or prlimit is missing, or the seccomp filter cannot be made; children refuse
    to start rather than run unsandboxed or unfiltered."""


@dataclass(frozen=True)
class Limits:
    """Per-child resource limits: prlimit inside the sandbox, and the sizes of its tmpfs.

    memory_bytes: the sandbox's memory budget: its tmpfs caps (`tmp_bytes`, `shm_bytes`:
        tmpfs pages are RAM no rlimit sees) and the rest. Where the host has a memory cgroup
        the sandbox's group holds the whole budget (`sandbox.cgroups`) and no memory rlimit
        is set. Without one the rest is RLIMIT_DATA (`data_bytes`: private writable
        mappings, so malloc arenas and the JavaScript heap count), not RLIMIT_AS: V8 reserves
        far more address space than it uses (measured: node 20 dies at start under
        `--as=1 GiB`, starts under `--data=944 MiB`), and CPython fails an allocation past
        either with MemoryError. RLIMIT_DATA does not see thread stacks, kernel memory or
        memfd pages written, not mapped: only the cgroup counts those. System V IPC, which
        no limit counts, cannot be used at all (the seccomp filter refuses shmget, msgget
        and semget).
    max_processes: RLIMIT_NPROC (tasks, i.e. threads too); see `_prlimit_argv` for where
        the kernel enforces it.
    max_open_files: RLIMIT_NOFILE.
    cpu_seconds: RLIMIT_CPU, soft = hard, so reaching it is a SIGKILL the child cannot
        catch. It counts the child's whole life, not one call.
    max_file_bytes: RLIMIT_FSIZE (a bigger write fails with EFBIG; Python ignores SIGXFSZ).
    tmp_bytes: the size of the private /tmp tmpfs.
    shm_bytes: the size of the private /dev/shm tmpfs (POSIX shared memory, semaphores).

    Raises ValueError for a limit that is not a positive int, or tmpfs caps that leave no
    data segment.
    """

    memory_bytes: int
    max_processes: int
    max_open_files: int
    cpu_seconds: int
    max_file_bytes: int
    tmp_bytes: int = 64 * _MiB
    shm_bytes: int = 16 * _MiB

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if type(value) is not int or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")
        if self.data_bytes <= 0:
            raise ValueError(
                f"Limits.memory_bytes ({self.memory_bytes}) must exceed tmp_bytes + shm_bytes "
                f"({self.tmp_bytes + self.shm_bytes}): the tmpfs caps are part of it"
            )

    @property
    def data_bytes(self) -> int:
        """RLIMIT_DATA without a memory cgroup: the memory budget less the tmpfs caps."""
        return self.memory_bytes - self.tmp_bytes - self.shm_bytes


@dataclass(frozen=True)
class SandboxSpec:
    """What to run in one sandbox.

    plugin_dir: absolute; at /plugin, the working directory: read-only, or with `layer_dir`
        the lower layer of /plugin's overlay.
    command, args: the program inside; `command` is an absolute path or a bare name looked up
        on `BASE_ENV`'s PATH. Both always come after bwrap's `--`.
    env: the child's variables, over `BASE_ENV` (with egress, the proxy's over them).
    extra_ro_binds: absolute host paths (an interpreter's or a command's install tree),
        read-only at the same path.
    ro_binds_at: (host path, path inside), read-only (the plugin kit, the SDK's packages at
        fixed paths); a file or a directory.
    hidden: absolute paths inside, each covered by an empty read-only tmpfs (a directory of
        a bound tree the child must not read).
    socket_binds: (host path, path inside), bound read-write (the plugin's host-op socket).
    egress_socket: the host's egress proxy socket for this child (`egress_view`); None: the
        child reaches no network at all (its own namespace, loopback only, either way).
    layer_dir: an empty host directory on which `overlay.wrapper_argv` mounts this sandbox's
        writable layer, in the sandbox's own mount namespace: /plugin and /tmp are bound from
        it (one tmpfs of `limits.tmp_bytes`). None: /plugin read-only, /tmp bwrap's tmpfs.
    """

    plugin_dir: Path
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    limits: Limits
    extra_ro_binds: tuple[Path, ...] = ()
    ro_binds_at: tuple[tuple[Path, str], ...] = ()
    hidden: tuple[str, ...] = ()
    socket_binds: tuple[tuple[Path, str], ...] = ()
    layer_dir: Path | None = None
    egress_socket: Path | None = None


def bwrap_path() -> str | None:
    """The `bwrap` executable on PATH, or None."""
    return shutil.which("bwrap")


def require_bwrap() -> str:
    """The `bwrap` path; raises `SandboxUnavailable` (with install instructions) when bwrap or
    prlimit is missing."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not on PATH; {_INSTALL_HINT}")
    if not os.access(_PRLIMIT, os.X_OK):
        raise SandboxUnavailable(f"{_PRLIMIT} is missing; {_INSTALL_HINT}")
    return path


def build_command(
    spec: SandboxSpec,
    *,
    seccomp_fd: int | None = None,
    sandbox: bool = True,
    cgroup: SandboxCgroup | None = None,
    args_fd: int | None = None,
) -> list[str]:
    """The argv that runs `spec`: prlimit + command inside bwrap, with a clean environment,
    under the seccomp filter bwrap reads from `seccomp_fd`; with `cgroup`, behind the shell
    that moves itself into its groups and then becomes bwrap.

    seccomp_fd: the number of an fd holding `seccomp.program()` (`seccomp.open_filter`) that
        the caller passes to the process it spawns; required when sandboxed.
    args_fd: leave bwrap's operations out of the argv: `--args FD` stands for them, and the
        caller passes an fd of that number holding `bwrap_arguments(spec, seccomp_fd=...)`,
        each NUL-terminated. bwrap's command line is also the one of the sandbox's pid 1
        (its init is a fork of bwrap), which every process inside can read: this way it
        names no host path. Without it the operations are inline (the same sandbox).
    sandbox=False (MCP_HOST_SANDBOX=off, development only): `env -i` + the command, run by
    the caller in the plugin folder; the same clean environment, but no isolation, no limits
    and no filter (`seccomp_fd`, `cgroup` and `args_fd` are ignored).

    Raises ValueError for a value that cannot be passed safely (NUL, a bad env key, a
    relative or `..` path) and for a sandboxed argv without a seccomp fd (never a sandbox
    without its filter, docs/security.md D11) or with a bad `args_fd`, and `SandboxUnavailable`
    when bwrap or prlimit is missing.
    """
    _check_spec(spec)
    env = _child_env(spec)
    if not sandbox:
        return _dev_argv(spec, env)
    operations = _bwrap_operations(spec, env, seccomp_fd)
    if args_fd is not None:
        if type(args_fd) is not int or args_fd < 3 or args_fd == seccomp_fd:
            raise ValueError(f"args_fd must be an fd of its own, 3 or above, got {args_fd!r}")
        operations = ["--args", str(args_fd)]
    layer = spec.layer_dir
    wrappers = [
        *(cgroup.join_argv() if cgroup is not None else ()),
        *(overlay.wrapper_argv(layer, spec.plugin_dir, spec.limits.tmp_bytes) if layer is not None else ()),
    ]
    return [
        *wrappers,
        # A wrapper's shell exports PWD and OLDPWD (the layer's folder under the data directory,
        # the host's working directory) to bwrap, whose init is the sandbox's pid 1: anything
        # inside could read them in /proc/1/environ. bwrap needs no variable of its own.
        *((_ENV_BIN, "-i") if wrappers else ()),
        require_bwrap(),
        *operations,
        # Everything after this is the child's argv: no manifest value is ever read as a flag.
        "--",
        *_prlimit_argv(spec.limits, memory_cgroup=cgroup is not None and cgroup.memory is not None),
        *(egress_view.bridge_argv() if spec.egress_socket is not None else ()),
        spec.command,
        *spec.args,
    ]


def bwrap_arguments(spec: SandboxSpec, *, seccomp_fd: int) -> list[str]:
    """bwrap's operations for `spec` (what comes between bwrap and `--`): the content of the
    fd a `build_command(spec, seccomp_fd=..., args_fd=...)` argv names. Raises as
    `build_command` does."""
    _check_spec(spec)
    return _bwrap_operations(spec, _child_env(spec), seccomp_fd)


def _bwrap_operations(spec: SandboxSpec, env: Mapping[str, str], seccomp_fd: int | None) -> list[str]:
    # bool is an int: `True` would pass for fd 1. 0-2 are the child's stdio, never a filter.
    if type(seccomp_fd) is not int or seccomp_fd < 3:
        raise ValueError(f"a sandboxed argv needs the seccomp filter's fd (3 or above), got {seccomp_fd!r}")
    return [
        *_namespace_args(),
        *_privilege_args(seccomp_fd),
        "--clearenv",
        *(arg for key, value in env.items() for arg in ("--setenv", key, value)),
        *_filesystem_args(spec),
        "--chdir",
        _PLUGIN_MOUNT,
    ]


def _namespace_args() -> list[str]:
    # --unshare-all only *tries* the user namespace; ask for it outright so a host where it
    # cannot be made fails to start the child instead of running it in the host's userns.
    # --disable-userns (needs --unshare-user) makes a nested `unshare -U` fail (ENOSPC).
    # Never --share-net: a child's network is its proxy socket or nothing (`egress_view`).
    return ["--unshare-all", "--unshare-user", "--disable-userns"]


def _privilege_args(seccomp_fd: int) -> list[str]:
    # --new-session: no controlling terminal, so TIOCSTI cannot type into the host's tty.
    # --die-with-parent: PDEATHSIG SIGKILL when the host (thread) dies; the startup race
    #   (bwrap #633) is covered by the sweeps of SandboxLedger and SandboxCgroups. Measured:
    #   with it, the whole sandbox ends as soon as the command exits; without it bwrap's init
    #   waits for the last process, so a daemon the child left behind would keep it alive.
    # --cap-drop ALL empties the bounding set too; bwrap always sets NO_NEW_PRIVS.
    # --seccomp: bwrap reads the program from the fd and closes it (the child never sees
    #   it), then loads it once its own mounts are done: the outer bwrap stays unfiltered,
    #   the sandbox's init and everything it execs do not (measured in tests/test_seccomp.py).
    return [
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--seccomp",
        str(seccomp_fd),
        "--hostname",
        _HOSTNAME,
    ]


def _filesystem_args(spec: SandboxSpec) -> list[str]:
    # Order matters: later mounts land on top of earlier ones. /tmp comes before the
    # interpreter binds so an interpreter that lives under /tmp is not hidden by the tmpfs.
    limits = spec.limits
    args = ["--proc", "/proc", "--dev", "/dev", "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm"]
    layer = spec.layer_dir
    if layer is None:
        args += ["--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    else:
        args += ["--bind", str(layer / overlay.TMP_DIR), "/tmp"]
    args += ["--ro-bind", "/usr", "/usr", *_root_link_args()]
    egress = spec.egress_socket
    etc = _ETC_ALWAYS + (egress_view.CA_FILES if egress is not None else ())
    args += [arg for path in etc for arg in ("--ro-bind-try", path, path)]
    own_paths, binds_at, hidden, sockets = spec.extra_ro_binds, spec.ro_binds_at, spec.hidden, spec.socket_binds
    if egress is not None:  # the bridge's interpreter may be bound already (`command: python`)
        own_paths = tuple(dict.fromkeys((*own_paths, *egress_view.interpreter_trees())))
        hidden = tuple(dict.fromkeys((*hidden, *egress_view.interpreter_hidden())))
        files, socket = egress_view.file_binds(egress)
        binds_at, sockets = (*binds_at, *files), (*sockets, socket)
    args += [arg for path in own_paths for arg in ("--ro-bind", str(path), str(path))]
    args += [arg for host, inside in binds_at for arg in ("--ro-bind", str(host), inside)]
    # A tmpfs of one page, read-only once made: what was bound there cannot be read.
    args += [arg for path in hidden for arg in ("--size", "4096", "--tmpfs", path, "--remount-ro", path)]
    if layer is None:
        args += ["--ro-bind", str(spec.plugin_dir), _PLUGIN_MOUNT]
    else:
        args += ["--bind", str(layer / overlay.PLUGIN_DIR), _PLUGIN_MOUNT]
    args += [arg for host, inside in sockets for arg in ("--bind", str(host), inside)]
    # Last, once every mount point is made: bwrap's root and its /dev are tmpfs without a
    # size, so anything written there (/x, /etc, /run, /dev/x) would be host RAM beyond every
    # limit (measured: 900 MiB written, host Shmem +901 MiB). Read-only, not recursively, so
    # the mounts on top keep their own flags: /tmp, /dev/shm, the device nodes, the socket.
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return args


def _root_link_args() -> list[str]:
    """/bin, /lib … as the host has them: the same symlink into /usr, or a read-only bind."""
    args: list[str] = []
    for name in _ROOT_LINKS:
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _prlimit_argv(limits: Limits, *, memory_cgroup: bool) -> list[str]:
    # Why prlimit runs *inside* the sandbox, after bwrap's `--`, and not around bwrap.
    # Measured on kernel 6.18, bwrap 0.8, --nproc=24, a shell loop of `sleep 30 &` until fork
    # fails (tests/test_sandbox.py, the fork bomb tests):
    #
    # * Since Linux 5.14 RLIMIT_NPROC is counted per (user namespace, uid) and checked at each
    #   level up to the init namespace; a new user namespace takes its creator's RLIMIT_NPROC
    #   as the cap for the level above. Around bwrap, for a non-root host uid that runs 12
    #   other processes, the sandbox started 7 sleeps: everything the uid runs counts, so a
    #   normal child could fail to start. Inside, the namespace is made under the host's own
    #   limit and the cap counts the sandbox alone: 21 sleeps (+ the shells) in each of two
    #   sandboxes at once, with the same 12 other processes running.
    # * As root the kernel never enforces RLIMIT_NPROC: fork() skips the check when the real
    #   user is the global root, and a root host's sandbox is uid 0 mapped to kuid 0 (user
    #   namespace or not). Measured: 200 of 200 sleeps started. Under a root host a fork bomb
    #   is bounded only by the host's pid_max; containing it needs a pids cgroup per sandbox
    #   (`SandboxCgroup`, when the machine has one) or a host that runs as a non-root user (C8).
    # * RLIMIT_CPU with soft = hard: at the hard limit the kernel sends SIGKILL; a soft limit
    #   alone only sends SIGXCPU, which a child may catch or ignore.
    # * Inside, the limits bind the child's tree only, not bwrap's own setup.
    # * Memory: the sandbox's memory cgroup where it has one (one cap for the whole sandbox,
    #   which V8 and CPython both live with, and whose OOM-kill counter names the cause), else
    #   RLIMIT_DATA per process, never RLIMIT_AS, which V8's reservations exceed (`Limits`).
    memory = [] if memory_cgroup else [f"--data={limits.data_bytes}"]
    return [
        _PRLIMIT,
        *memory,
        f"--nproc={limits.max_processes}",
        f"--nofile={limits.max_open_files}",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds}",
        f"--fsize={limits.max_file_bytes}",
        "--",
    ]


def _dev_argv(spec: SandboxSpec, env: Mapping[str, str]) -> list[str]:
    # GNU env takes every operand with "=" before the command as an assignment, so a
    # command containing "=" would be swallowed; a real program name never has one.
    if "=" in spec.command:
        raise ValueError(f"command {spec.command!r}: '=' is not allowed with the sandbox off")
    return [_ENV_BIN, "-i", "--", *(f"{key}={value}" for key, value in env.items()), spec.command, *spec.args]


def _child_env(spec: SandboxSpec) -> dict[str, str]:
    for key, value in spec.env.items():
        if not _ENV_KEY.fullmatch(key):
            raise ValueError(f"env key {key!r} must be letters, digits and _, not starting with a digit")
        _check_text(f"env {key}", value)
    env = {**BASE_ENV, **spec.env}
    return egress_view.egress_env(env) if spec.egress_socket is not None else env


def _check_spec(spec: SandboxSpec) -> None:
    if not spec.command:
        raise ValueError("command is empty")
    _check_text("command", spec.command)
    for index, arg in enumerate(spec.args):
        _check_text(f"args[{index}]", arg)
    _check_path("plugin_dir", str(spec.plugin_dir))
    for what, path in (("layer_dir", spec.layer_dir), ("egress_socket", spec.egress_socket)):
        if path is not None:
            _check_path(what, str(path))
    for path in spec.extra_ro_binds:
        _check_path("extra_ro_binds", str(path))
        if str(path) == "/":
            raise ValueError("extra_ro_binds: binding / would expose the whole host")
    for hidden in spec.hidden:
        _check_path("hidden", hidden)
        if hidden == "/":
            raise ValueError("hidden: / would hide the whole sandbox")
    for what, binds in (("ro_binds_at", spec.ro_binds_at), ("socket_binds", spec.socket_binds)):
        for host, inside in binds:
            _check_path(f"{what} host path", str(host))
            _check_path(f"{what} inside path", inside)


def _check_text(what: str, value: str) -> None:
    if "\0" in value:
        raise ValueError(f"{what}: contains NUL")


def _check_path(what: str, value: str) -> None:
    _check_text(what, value)
    if not value.startswith("/") or ".." in value.split("/"):
        raise ValueError(f"{what} {value!r} must be absolute, without '..'")


class SandboxLedger:
    """Files under `run_dir` naming the live sandboxes, so a restarted host can kill the ones
    a killed host left behind.

    --die-with-parent cannot cover a host killed before bwrap armed it (bwrap #633,
    docs/security.md B4); `sweep` at host start is the second mechanism. A sandbox spawned but
    not yet recorded when the host died is missed here (record right after spawning), but
    not by `SandboxCgroups.sweep`, where the host has pids cgroups: its group existed first.
    Each record holds the sandbox's pid and /proc start time (a recycled pid is never
    killed) and the recording host's, so a sweep spares the sandboxes of a host that is
    still running on the same run_dir.
    """

    def __init__(self, run_dir: Path) -> None:
        self._dir = run_dir

    def record(self, pid: int, plugin_id: str) -> None:
        """Record `pid`, a child this process spawned and has not reaped; call it right after
        spawning.

        Any other pid is ignored (logged): it is not a sandbox of ours, or ours already exited
        and the pid may be someone else's now. Only an unreaped child's pid cannot be recycled
        before its start time is read.
        """
        stat = proc_stat(pid)
        host = proc_stat(os.getpid())
        if stat is None or host is None or stat.ppid != os.getpid():
            logger.info("not recording pid %d (%s): not a live child of this process", pid, plugin_id)
            return
        entry = _Record(pid, stat.starttime, plugin_id, os.getpid(), host.starttime)
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self._path(pid).with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(entry)))
        tmp.replace(self._path(pid))  # a sweep never reads half a record

    def forget(self, pid: int) -> None:
        """Drop the record of `pid` (its sandbox has exited); a missing record is fine."""
        self._path(pid).unlink(missing_ok=True)

    def sweep(self) -> list[int]:
        """Kill every recorded sandbox that is still the process recorded, unless another live
        host recorded it; drop those records and the stale ones. Returns the pids killed.

        Call it at host start, before spawning: records this process made are swept too.
        """
        killed: list[int] = []
        if not self._dir.is_dir():
            return killed
        for path in sorted(self._dir.glob("*.json")):
            entry = _Record.load(path)
            if entry is not None and entry.host_pid != os.getpid() and entry.host_alive():
                continue
            if entry is not None and entry.alive():
                _kill_sandbox(entry.pid)
                killed.append(entry.pid)
                logger.warning("killed leftover sandbox pid=%d plugin=%s", entry.pid, entry.plugin_id)
            path.unlink(missing_ok=True)
        return killed

    def _path(self, pid: int) -> Path:
        return self._dir / f"{pid}.json"


@dataclass(frozen=True)
class _Record:
    """One ledger file: a sandbox and the host that spawned it, each as (pid, start time)."""

    pid: int
    starttime: int
    plugin_id: str
    host_pid: int
    host_starttime: int

    @classmethod
    def load(cls, path: Path) -> _Record | None:
        """The record in `path`, or None (logged) if it is unreadable or malformed."""
        try:
            entry = cls(**json.loads(path.read_text()))
            ints = (entry.pid, entry.starttime, entry.host_pid, entry.host_starttime)
            if all(type(value) is int for value in ints) and type(entry.plugin_id) is str:
                return entry
        except (OSError, ValueError, TypeError):
            pass
        logger.warning("dropping unreadable sandbox record %s", path)
        return None

    def alive(self) -> bool:
        return started_at(self.pid, self.starttime)

    def host_alive(self) -> bool:
        return started_at(self.host_pid, self.host_starttime)


def _kill_sandbox(pid: int) -> None:
    """SIGKILL bwrap's children (the pid-namespace init: its death ends every process in the
    namespace, even if --die-with-parent was never armed), then bwrap and its process group."""
    for child in child_pids(pid):
        _sigkill(os.kill, child)
    stat = proc_stat(pid)
    if stat is not None and stat.pgid == pid:
        _sigkill(os.killpg, pid)
    _sigkill(os.kill, pid)


def _sigkill(kill: Callable[[int, int], None], pid: int) -> None:
    try:
        kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
