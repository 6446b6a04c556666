"""The seccomp filter (docs/security.md D6, D11, D13): its BPF program, and what it does to a child.

The program is decoded and run by a small classic-BPF interpreter below, on every syscall
number of both arches, so the policy is pinned without a kernel of each arch. Then real
bubblewrap on the real kernel, through the host's own spawn path (`launch_for`, `ChildPool`,
the memfd passed with `pass_fds`): the escape plugin's `try_syscalls` tool makes each call
in the style of Flatpak's test-seccomp.sh, with the same sandbox minus `--seccomp` as the
control that shows the probe could have succeeded.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot

from mcp_host.children import Child
from mcp_host.children.pool import ChildPool
from mcp_host.errors import Unavailable
from mcp_host.plugins.loading import Plugin, load_plugins
from mcp_host.sandbox.bwrap import SandboxUnavailable
from mcp_host.sandbox.launch import Launch, host_pids_cgroups, launch_for
from mcp_host.sandbox.procs import child_pids
from mcp_host.sandbox.seccomp import (
    AUDIT_ARCH_AARCH64,
    AUDIT_ARCH_X86_64,
    JMP_JA,
    JMP_JEQ_K,
    JMP_JGE_K,
    JMP_JSET_K,
    LD_W_ABS,
    RET_ALLOW,
    RET_ERRNO,
    RET_K,
    RET_KILL_PROCESS,
    SUPPORTED_MACHINES,
    SYSCALL_NUMBERS,
    open_filter,
    program,
)
from mcp_host.settings import Settings
from tests.hosting import PLUGINS, host_settings, running_host
from tests.processes import CHILD_LIMITS, needs_bwrap

ARCHES = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_ARM = 0x40000028
AUDIT_ARCH_RISCV64 = 0xC00000F3
AUDIT_ARCH_PPC64LE = 0xC0000015
X32_SYSCALL_BIT = 0x40000000
TIOCSTI, TIOCLINUX, TCGETS, FIONREAD = 0x5412, 0x541C, 0x5401, 0x541B
# What glibc's pthread_create passes to clone (CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|
# SETTLS|PARENT_SETTID|CHILD_CLEARTID), and fork's (SIGCHLD | CHILD_SETTID | CHILD_CLEARTID).
CLONE_THREAD_FLAGS = 0x003D0F00
CLONE_FORK_FLAGS = 0x01200011
CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}

# The probe table: what each call answers inside the sandbox with the filter, and without it
# (the control). Benign calls keep their own errors; the denied ones get EPERM or ENOSYS where
# they would otherwise have failed for another reason or succeeded.
PROBES = {
    "ioctl_tiocsti": ("EPERM", "EBADF"),
    "ioctl_tiocsti_high_bits": ("EPERM", "EBADF"),
    "ioctl_tioclinux": ("EPERM", "EBADF"),
    "clone3": ("ENOSYS", "EFAULT"),
    "clone_newuser": ("EPERM", "ENOSPC"),  # ENOSPC: --disable-userns, the second wall
    "unshare_newuser": ("EPERM", "ENOSPC"),
    "setns": ("EPERM", "EBADF"),
    "chroot": ("EPERM", "EFAULT"),
    "mount": ("EPERM", "EFAULT"),
    "open_tree": ("ENOSYS", "EFAULT"),
    "keyctl": ("EPERM", "ENOTSUP"),
    "ptrace": ("EPERM", "ESRCH"),
    "bpf": ("EPERM", "EINVAL"),
    "perf_event_open": ("EPERM", "EFAULT"),
    "userfaultfd": ("EPERM", "EINVAL"),
    "personality_no_aslr": ("EPERM", "ok"),
    "shmget": ("EPERM", "ENOENT"),  # System V IPC: nothing can be made (ENOENT: no such key)
    "msgget": ("EPERM", "ENOENT"),
    "semget": ("EPERM", "ENOENT"),
    # benign: the same answer either way
    "ioctl_tiocnotty": ("EBADF", "EBADF"),
    "ioctl_tiocnotty_devnull": ("ENOTTY", "ENOTTY"),
    "clone_fork": ("ok", "ok"),
    "personality_query": ("ok", "ok"),
    "chmod": ("EFAULT", "EFAULT"),
    "listen": ("EBADF", "EBADF"),
    "prctl": ("EFAULT", "EFAULT"),
}
# Other ABIs on x86_64: the filter kills the process (SIGSYS) whatever the kernel would answer.
OTHER_ABIS = ("x32_getpid", "i386_getpid")


@pytest.fixture
def escape() -> Plugin:
    report = load_plugins(None, [PLUGINS / "escape"])
    assert not report.errors
    return report.plugins[0]


# --- a classic-BPF interpreter, for the opcodes a seccomp filter may use ----------------------


Insn = tuple[int, int, int, int]


def decode(data: bytes) -> list[Insn]:
    assert len(data) % 8 == 0
    return [struct.unpack_from("<HBBI", data, offset) for offset in range(0, len(data), 8)]


def evaluate(insns: list[Insn], arch: int, nr: int, args: tuple[int, ...] = (0,) * 6) -> tuple[str, set[int]]:
    """What the filter returns for one system call, and the seccomp_data offsets it read.

    Fails on an opcode the program should not use, a jump out of it, or a loop."""
    data = struct.pack("<IIQ6Q", nr % 2**32, arch, 0, *(arg % 2**64 for arg in (*args, 0, 0, 0, 0, 0, 0)[:6]))
    pc, acc, loaded = 0, 0, set()
    for _ in range(len(insns)):  # classic BPF only jumps forward: at most one visit each
        code, jt, jf, k = insns[pc]
        if code == LD_W_ABS:
            assert k % 4 == 0 and k + 4 <= len(data)
            (acc,) = struct.unpack_from("<I", data, k)
            loaded.add(k)
            pc += 1
        elif code == JMP_JA:
            pc += 1 + k
        elif code in (JMP_JEQ_K, JMP_JGE_K, JMP_JSET_K):
            taken = {JMP_JEQ_K: acc == k, JMP_JGE_K: acc >= k, JMP_JSET_K: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)
        elif code == RET_K:
            return verdict(k), loaded
        else:
            raise AssertionError(f"opcode {code:#x} at {pc}")
    raise AssertionError("no return")


def verdict(value: int) -> str:
    if value == RET_ALLOW:
        return "allow"
    if value == RET_KILL_PROCESS:
        return "kill"
    assert value & 0xFFFF0000 == RET_ERRNO
    return errno.errorcode[value & 0xFFFF]


INSNS = decode(program())


def decide(machine: str, name: str, *args: int) -> str:
    return evaluate(INSNS, ARCHES[machine], SYSCALL_NUMBERS[machine][name], args)[0]


# --- the program --------------------------------------------------------------------------------


def test_program_is_small_valid_classic_bpf() -> None:
    assert 0 < len(INSNS) <= 4096  # BPF_MAXINSNS
    for pc, (code, jt, jf, k) in enumerate(INSNS):
        assert code in (LD_W_ABS, JMP_JA, JMP_JEQ_K, JMP_JGE_K, JMP_JSET_K, RET_K), pc
        targets = [pc + 1 + k] if code == JMP_JA else [pc + 1 + jt, pc + 1 + jf] if code != RET_K else []
        assert all(target < len(INSNS) for target in targets), pc
    assert INSNS[-1][0] == RET_K


def test_the_arch_is_checked_first_and_every_other_arch_is_killed() -> None:
    assert INSNS[:6] == [
        (LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (JMP_JEQ_K, 0, 1, AUDIT_ARCH_X86_64),
        (JMP_JA, 0, 0, 3),
        (JMP_JEQ_K, 0, 1, AUDIT_ARCH_AARCH64),
        (JMP_JA, 0, 0, INSNS[4][3]),
        (RET_K, 0, 0, RET_KILL_PROCESS),
    ]
    for arch in (AUDIT_ARCH_I386, AUDIT_ARCH_ARM, AUDIT_ARCH_RISCV64, AUDIT_ARCH_PPC64LE, 0, 0xFFFFFFFF):
        for nr in (0, 1, 56, 220, 435):  # read, write, clone, ...: nothing runs under another arch
            assert evaluate(INSNS, arch, nr) == ("kill", {4}), (hex(arch), nr)


def test_the_x32_abi_is_killed_on_x86_64_only() -> None:
    for nr in (0, 39, 56, 272, 512, 0x3FFFFFFF, 0xFFFFFFFF):
        assert evaluate(INSNS, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | nr)[0] == "kill", nr
    # No such bit on aarch64: such numbers are simply unknown there (the kernel says ENOSYS).
    assert evaluate(INSNS, AUDIT_ARCH_AARCH64, X32_SYSCALL_BIT | 39)[0] == "allow"


def test_policy_per_syscall_is_the_same_on_both_arches() -> None:
    x86_64 = {name: decide("x86_64", name) for name in SYSCALL_NUMBERS["x86_64"]}
    aarch64 = {name: decide("aarch64", name) for name in SYSCALL_NUMBERS["aarch64"]}
    # With zero arguments: clone without namespace flags, ioctl 0 and personality(PER_LINUX).
    assert dict(sorted(x86_64.items())) == snapshot(
        {
            "acct": "EPERM",
            "add_key": "EPERM",
            "bpf": "EPERM",
            "chroot": "EPERM",
            "clone": "allow",
            "clone3": "ENOSYS",
            "delete_module": "EPERM",
            "finit_module": "EPERM",
            "fsconfig": "ENOSYS",
            "fsmount": "ENOSYS",
            "fsopen": "ENOSYS",
            "fspick": "ENOSYS",
            "get_mempolicy": "EPERM",
            "init_module": "EPERM",
            "ioctl": "allow",
            "kexec_file_load": "EPERM",
            "kexec_load": "EPERM",
            "keyctl": "EPERM",
            "mbind": "EPERM",
            "migrate_pages": "EPERM",
            "modify_ldt": "EPERM",
            "mount": "EPERM",
            "mount_setattr": "ENOSYS",
            "move_mount": "ENOSYS",
            "move_pages": "EPERM",
            "msgget": "EPERM",
            "name_to_handle_at": "EPERM",
            "open_by_handle_at": "EPERM",
            "open_tree": "ENOSYS",
            "perf_event_open": "EPERM",
            "personality": "allow",
            "pivot_root": "EPERM",
            "process_vm_readv": "EPERM",
            "process_vm_writev": "EPERM",
            "ptrace": "EPERM",
            "quotactl": "EPERM",
            "quotactl_fd": "EPERM",
            "reboot": "EPERM",
            "request_key": "EPERM",
            "semget": "EPERM",
            "set_mempolicy": "EPERM",
            "setns": "EPERM",
            "shmget": "EPERM",
            "swapoff": "EPERM",
            "swapon": "EPERM",
            "syslog": "EPERM",
            "umount2": "EPERM",
            "unshare": "EPERM",
            "uselib": "EPERM",
            "userfaultfd": "EPERM",
        }
    )
    assert aarch64 == {name: x86_64[name] for name in aarch64}
    assert set(x86_64) - set(aarch64) == {"uselib", "modify_ldt"}  # no such calls on aarch64


def test_every_other_syscall_is_allowed_on_its_number_alone() -> None:
    # Only clone, ioctl and personality read an argument (offset 16 and up); for every other
    # number the verdict depends on the number and arch only, so the kernel's seccomp cache
    # allows those without running the program at all.
    for machine, numbers in SYSCALL_NUMBERS.items():
        listed = set(numbers.values())
        readers = {numbers["clone"], numbers["ioctl"], numbers["personality"]}
        for nr in range(600):
            result, loaded = evaluate(INSNS, ARCHES[machine], nr, (2**64 - 1,) * 6)
            assert loaded <= {0, 4} or nr in readers, (machine, nr)
            if nr not in listed:
                assert result == "allow", (machine, nr)


@pytest.mark.parametrize("machine", SUPPORTED_MACHINES)
def test_clone_with_a_namespace_flag_is_refused_and_threads_and_fork_are_not(machine: str) -> None:
    for flag_name, flag in CLONE_NAMESPACE_FLAGS.items():
        assert decide(machine, "clone", flag | CLONE_FORK_FLAGS) == "EPERM", flag_name
        assert decide(machine, "clone", flag | 0xFFFFFFFF00000000) == "EPERM", flag_name
    assert decide(machine, "clone", CLONE_THREAD_FLAGS) == "allow"
    assert decide(machine, "clone", CLONE_FORK_FLAGS) == "allow"
    # The kernel reads only the low 32 bits of clone's flags; high bits alone are no namespace.
    assert decide(machine, "clone", CLONE_FORK_FLAGS | 0x10000000_00000000) == "allow"


@pytest.mark.parametrize("machine", SUPPORTED_MACHINES)
def test_ioctl_tiocsti_and_tioclinux_are_refused_on_the_low_32_bits_of_the_request(machine: str) -> None:
    for request in (TIOCSTI, TIOCLINUX, 0xFFFFFFFF_00000000 | TIOCSTI, 1 << 32 | TIOCLINUX):
        assert decide(machine, "ioctl", 0, request) == "EPERM", hex(request)  # CVE-2019-10063
    for request in (TCGETS, FIONREAD, TIOCSTI | 1 << 16, 0):
        assert decide(machine, "ioctl", 0, request) == "allow", hex(request)
    assert decide(machine, "ioctl", TIOCSTI, TCGETS) == "allow"  # the fd is not the request


@pytest.mark.parametrize("machine", SUPPORTED_MACHINES)
def test_personality_may_only_stay_linux_or_be_read(machine: str) -> None:
    for persona in (0x0, 0xFFFFFFFF, 1 << 32):  # PER_LINUX, query, PER_LINUX to the kernel
        assert decide(machine, "personality", persona) == "allow", hex(persona)
    for persona in (0x0040000, 0x0400000, 0x0008, 0x0008 | 1 << 32):  # ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, LINUX32
        assert decide(machine, "personality", persona) == "EPERM", hex(persona)


@pytest.mark.parametrize(
    ("machine", "header", "prefix"),
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "__NR_"),
        ("aarch64", "/usr/include/asm-generic/unistd.h", "__NR_"),
    ],
)
def test_syscall_numbers_match_the_kernel_headers(machine: str, header: str, prefix: str) -> None:
    path = Path(header)
    if not path.exists():
        pytest.skip(f"{header} is not installed (Debian: linux-libc-dev)")
    defined = {
        match[1]: int(match[2]) for match in re.finditer(rf"^#define {prefix}(\w+)\s+(\d+)\s*$", path.read_text(), re.M)
    }
    assert {name: defined.get(name) for name in SYSCALL_NUMBERS[machine]} == dict(SYSCALL_NUMBERS[machine])


# --- the fd handed to bwrap -----------------------------------------------------------------------


def test_open_filter_gives_a_sealed_close_on_exec_memfd_read_from_the_start() -> None:
    fd = open_filter()
    try:
        assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:mcp-host-seccomp")
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) == seals
        assert os.read(fd, 1 << 16) == program()
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"\0" * 8, 0)
    finally:
        os.close(fd)


def test_open_filter_refuses_an_architecture_it_has_no_table_for() -> None:
    with pytest.raises(SandboxUnavailable, match=r"architecture \(riscv64\)") as caught:
        open_filter(machine="riscv64")
    assert isinstance(caught.value, Unavailable)


def test_open_filter_fails_closed_when_no_fd_can_be_made() -> None:
    script = """
import resource
from mcp_host.sandbox.bwrap import SandboxUnavailable
from mcp_host.sandbox.seccomp import open_filter
resource.setrlimit(resource.RLIMIT_NOFILE, (3, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    open_filter()
except SandboxUnavailable as exc:
    print(exc.message)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout == "could not make the seccomp filter's memfd: Too many open files\n"


def test_each_fd_of_a_launch_is_closed_once() -> None:
    fd = open_filter()
    launch = Launch(argv=["/bin/true"], cwd=None, env={}, pass_fds=(fd,))
    launch.close_passed_fds()
    reused = os.open("/dev/null", os.O_RDONLY)  # most likely the number just freed
    try:
        launch.close_passed_fds()
        os.fstat(reused)  # still open: the second call closed nothing
    finally:
        os.close(reused)


@needs_bwrap
@pytest.mark.anyio
async def test_a_sandboxed_launch_names_its_own_filter_fd_and_release_closes_it(escape: Plugin) -> None:
    launch = launch_for(escape, Settings())
    try:
        fd = launch.pass_fds[0]  # then the fd of bwrap's other arguments
        argv = launch.full_argv()
        index = argv.index("--seccomp")
        assert argv[index + 1] == str(fd) and argv.count("--seccomp") == 1
        assert os.pread(fd, 1 << 16, 0) == program()
    finally:
        await launch.release()
    assert _filter_fds() == []


def test_a_dev_mode_launch_has_no_filter(escape: Plugin) -> None:
    launch = launch_for(escape, Settings(sandbox="off"))
    assert launch.pass_fds == () and "--seccomp" not in launch.argv


@needs_bwrap
def test_a_launch_that_fails_leaves_no_filter_fd_open(escape: Plugin) -> None:
    before = _filter_fds()
    with pytest.raises(ValueError, match="plugin_dir"):
        launch_for(replace(escape, folder=Path("not/absolute")), Settings())
    assert _filter_fds() == before


# --- inside the sandbox, on the real kernel -------------------------------------------------------


@asynccontextmanager
async def started(launch: Callable[[], Launch]) -> AsyncIterator[Child]:
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        yield pool.child("test.escape", launch)


async def call(child: Child, tool: str, **arguments: Any) -> Any:
    result = await child.call_tool(tool, arguments, {}, timeout_s=30)
    assert not result.is_error, result.content
    content = result.structured_content
    assert content is not None
    return content["result"] if set(content) == {"result"} else content


def unfiltered(escape: Plugin) -> Callable[[], Launch]:
    """The escape plugin's sandbox as the host makes it, without `--seccomp FD` (a control)."""

    def launch() -> Launch:
        real = launch_for(escape, Settings(cgroup_root=Path("/nonexistent")))
        real.close_passed_fds()
        argv = real.full_argv()  # bwrap's arguments inline, not from their fd
        index = argv.index("--seccomp")
        return Launch(argv=argv[:index] + argv[index + 2 :], cwd=real.cwd, env=real.env)

    return launch


@needs_bwrap
@pytest.mark.anyio
async def test_dangerous_calls_are_refused_and_benign_ones_keep_their_errors(escape: Plugin) -> None:
    names = [*PROBES, *OTHER_ABIS]
    async with started(lambda: launch_for(escape, Settings())) as child:
        filtered = await call(child, "try_syscalls", names=names)
    async with started(unfiltered(escape)) as child:
        control = await call(child, "try_syscalls", names=names)
    assert {name: filtered[name] for name in PROBES} == {name: answers[0] for name, answers in PROBES.items()}
    assert {name: control[name] for name in PROBES} == {name: answers[1] for name, answers in PROBES.items()}
    if os.uname().machine == "x86_64":
        assert filtered["x32_getpid"] == "SIGSYS" and control["x32_getpid"] != "SIGSYS"
        # int 0x80 reaches seccomp only where the kernel runs i386 calls; elsewhere it faults.
        assert filtered["i386_getpid"] == ("SIGSYS" if control["i386_getpid"] == "ok" else control["i386_getpid"])
    else:
        assert [filtered[name] for name in OTHER_ABIS] == ["n/a", "n/a"]


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("with_cgroup", [True, False], ids=["pids-cgroup", "no-pids-cgroup"])
async def test_the_filter_is_loaded_and_its_fd_never_enters_the_sandbox(
    escape: Plugin, with_cgroup: bool, tmp_path: Path
) -> None:
    # With a pids cgroup the fd also goes through /bin/sh's exec (sandbox.py, `cgroup=`).
    if with_cgroup and host_pids_cgroups(Settings().sandbox.cgroup_root) is None:
        pytest.skip("no usable pids cgroup here (see tests/test_launch.py)")
    settings = Settings() if with_cgroup else Settings(cgroup_root=tmp_path)
    launches: list[Launch] = []

    def launch() -> Launch:
        launches.append(launch_for(escape, settings))
        return launches[-1]

    async with started(launch) as child:
        status = await call(child, "status")
        fds = await call(child, "list_fds")
        assert _filter_fds() == []  # the host's copy was closed right after the spawn
    assert (launches[0].cgroup is not None) == with_cgroup
    assert (status["Seccomp"], status["NoNewPrivs"], status["CapEff"]) == ("2", "1", "0000000000000000")
    assert sorted(fds, key=int) == ["0", "1", "2"]  # bwrap read the filter and closed it


@needs_bwrap
@pytest.mark.anyio
async def test_a_normal_child_works_end_to_end_under_the_filter(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            result = await client.call_tool("echo", {"text": "through the filter"})
            assert result.structured_content == {"text": "through the filter"}
            (bwrap,) = host.spawned
            (init,) = child_pids(bwrap)  # bwrap's init, pid 1 of the sandbox
            (server,) = child_pids(init)
            seccomp = {pid: _status(pid)["Seccomp"] for pid in (bwrap, init, server)}
        assert _filter_fds() == []
    # bwrap itself runs unfiltered (its mounts happen there); its init and the server do not.
    assert seccomp == {bwrap: "0", init: "2", server: "2"}


# --- failing closed -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_launch_whose_filter_cannot_be_made_leaves_the_child_unavailable_with_its_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def launch() -> Launch:
        open_filter(machine="riscv64")  # raises, as on a host without a table
        raise AssertionError("unreachable")

    async with started(launch) as child:
        with pytest.raises(Unavailable, match="could not be started"):
            await child.list_tools(timeout_s=5)
        assert child.health().pid is None and child.health().starts == 0
        assert child.health().cause == (
            "no seccomp filter for this host's architecture (riscv64); children need one of "
            "x86_64, aarch64 with a 64-bit Python"
        )
    assert any(record.getMessage() == "test.escape: could not prepare the launch" for record in caplog.records)


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "bwrap_says"),
    [
        (None, "Can't read seccomp data: Bad file descriptor"),  # named in the argv, not passed
        (b"abc", "Invalid seccomp data, must be multiple of 8"),
        (b"", "Unable to set up system call filtering as requested"),
        (b"\0" * 8, "Unable to set up system call filtering as requested"),  # not a valid program
    ],
    ids=["not-passed", "torn", "empty", "invalid"],
)
async def test_bwrap_refuses_to_start_a_child_without_a_valid_filter(
    escape: Plugin, content: bytes | None, bwrap_says: str
) -> None:
    launches: list[Launch] = []

    def launch() -> Launch:
        launches.append(launch_for(escape, Settings(cgroup_root=Path("/nonexistent"))))
        real = launches[-1]
        if content is None:  # the argv names the fd, but the spawn does not pass it
            return Launch(argv=real.full_argv(), cwd=real.cwd, env=real.env)
        replacement = os.memfd_create("test-filter")
        os.write(replacement, content)
        os.lseek(replacement, 0, os.SEEK_SET)
        os.dup2(replacement, real.pass_fds[0], inheritable=False)  # the same number, other bytes
        os.close(replacement)
        return real

    try:
        async with started(launch) as child:
            with pytest.raises(Unavailable):
                await child.list_tools(timeout_s=10)
            cause = child.health().cause or ""
    finally:
        for each in launches:
            each.close_passed_fds()
    assert cause.startswith("exited during start; exit code 1; last stderr: "), cause
    assert bwrap_says in cause


# --- helpers ---------------------------------------------------------------------------------------


def _filter_fds() -> list[int]:
    """This process's fds on a seccomp filter memfd."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:mcp-host-seccomp"):
                found.append(int(name))
        except OSError:  # the listing's own fd
            continue
    return sorted(found)


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}
