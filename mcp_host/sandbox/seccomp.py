"""The seccomp filter every sandboxed child runs under (docs/security.md D6): a classic-BPF program
we assemble ourselves, handed to bubblewrap as `--seccomp FD`.

Above: `launch` opens the filter (`open_filter`) for each sandboxed launch and puts the fd in
the argv (`sandbox.build_command(seccomp_fd=...)`) and in `Launch.pass_fds`; `children` passes
it to bwrap alone and closes the host's copy right after the spawn. Below: the kernel, which
runs the program on every system call the child makes. bwrap loads it once its own mounts
are done, into the sandbox's init and the command, so bwrap's setup is unaffected and
everything after, prlimit included, is filtered. Filters are inherited and cannot be removed
(NO_NEW_PRIVS is set).

The policy is Flatpak's (flatpak-run.c `setup_seccomp`), a deny list, plus System V IPC:

* the architecture is checked first: x86_64 (without the x32 ABI) and aarch64, each with its
  own syscall numbers; any other (i386 via `int 0x80`, x32, arm32) kills the process;
* `clone3` fails with ENOSYS (seccomp cannot read its flags, so libc falls back to `clone`);
* `clone` with a namespace flag, and the calls in `_EPERM`, fail with EPERM;
* so do `shmget`, `msgget` and `semget` (`_SYSV_IPC`): a System V object outlives the process
  that made it, until its IPC namespace (the sandbox) ends, and is RAM no limit of ours counts
  (shm segments are not in RLIMIT_AS once detached; queues and semaphores are kernel memory).
  Without them nothing can be created in the sandbox's new IPC namespace, so the calls that
  use an object (shmat, msgsnd, semop ...) have nothing to act on;
* the new mount API (`_ENOSYS`) fails with ENOSYS, as in Flatpak;
* `ioctl` TIOCSTI (typing into a terminal, CVE-2017-5226) and TIOCLINUX (the same on a
  virtual console, CVE-2023-28100) fail with EPERM, comparing only the low 32 bits of the
  request, which is all the kernel reads (CVE-2019-10063: high bits set must still match);
* `personality` may only keep the default (PER_LINUX) or query; ADDR_NO_RANDOMIZE and the
  like fail with EPERM;
* everything else is allowed.

Only the system call number and arch decide except for clone, ioctl and personality, so the
kernel's seccomp cache (Linux >= 5.11) allows every other call without running the program.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import struct
from collections.abc import Mapping

from .bwrap import SandboxUnavailable

__all__ = ["SUPPORTED_MACHINES", "SYSCALL_NUMBERS", "open_filter", "program"]

# linux/audit.h
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
# Syscall numbers at or above this bit on AUDIT_ARCH_X86_64 are the x32 ABI.
_X32_SYSCALL_BIT = 0x40000000

# linux/seccomp.h: return values (the action is in the high 16 bits, errno in the low ones).
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
# Both supported arches are little-endian: an argument's low 32 bits come first.
_OFF_NR = 0
_OFF_ARCH = 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index


# linux/filter.h: the opcodes this program uses, and only these.
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = seccomp_data[k:k+4]
JMP_JA = 0x05  # BPF_JMP | BPF_JA: skip k instructions
JMP_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: A == k ? jt : jf
JMP_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K: A >= k ? jt : jf
JMP_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K: A & k ? jt : jf
RET_K = 0x06  # BPF_RET | BPF_K: return k

# sched.h: every flag that makes a new namespace through clone(). CLONE_NEWTIME (0x80) is
# not among them: in clone()'s flags that bit is part of the exit signal, and unshare and
# clone3, the only ways to ask for it, are denied outright.
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_CLONE_NAMESPACES = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)

# asm-generic/ioctls.h (x86_64 and aarch64 share them)
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
# personality(2): PER_LINUX, and 0xffffffff, which only reads the current persona.
_PERSONALITIES_ALLOWED = (0x0, 0xFFFFFFFF)

# Denied with EPERM, as Flatpak does, plus the calls only root could use anyway (module and
# kexec loading, swap, reboot, process_vm_*, bpf, userfaultfd, file handles): a second wall
# behind the empty capability set.
_EPERM = (
    "syslog",
    "uselib",
    "acct",
    "modify_ldt",
    "quotactl",
    "quotactl_fd",
    "add_key",
    "keyctl",
    "request_key",
    "move_pages",
    "mbind",
    "get_mempolicy",
    "set_mempolicy",
    "migrate_pages",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "perf_event_open",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "open_by_handle_at",
    "name_to_handle_at",
)
# Denied with EPERM too, not by Flatpak: creating System V IPC objects. Each outlives its
# process until the sandbox's IPC namespace ends, and none counts against the sandbox's
# memory budget. Measured in a 512 MiB sandbox, host RAM held until the sandbox ended: 800
# MiB of detached shm segments (Shmem), 400 MiB of queued messages and 400 MiB of semaphore
# arrays (unreclaimable slab; ~500 MiB and ~64 GiB are the namespace's default ceilings for
# those two). POSIX shared memory and semaphores (/dev/shm, capped) are what Python's
# multiprocessing, Node and glibc use; nothing a plugin needs is lost.
_SYSV_IPC = ("shmget", "msgget", "semget")
# Denied with ENOSYS: clone3 (libc then falls back to clone, which is checked) and the new
# mount API, which could change the sandbox's view of the file system like mount(2).
_ENOSYS = ("clone3", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr")

# The syscall numbers of every call named above, from the kernel's uapi headers
# (asm/unistd_64.h; asm-generic/unistd.h for aarch64). tests/test_seccomp.py checks them
# against the headers where they are installed. A name missing from an arch's table does
# not exist there (uselib, modify_ldt on aarch64).
# Since Linux 5.1 new syscalls share one number on every architecture (from 424 on).
_UNIFIED: Mapping[str, int] = {
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "mount_setattr": 442,
    "quotactl_fd": 443,
}
_X86_64: Mapping[str, int] = {
    "ioctl": 16,
    "shmget": 29,
    "clone": 56,
    "semget": 64,
    "msgget": 68,
    "ptrace": 101,
    "syslog": 103,
    "uselib": 134,
    "personality": 135,
    "modify_ldt": 154,
    "pivot_root": 155,
    "chroot": 161,
    "acct": 163,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "mbind": 237,
    "set_mempolicy": 238,
    "get_mempolicy": 239,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "migrate_pages": 256,
    "unshare": 272,
    "move_pages": 279,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    **_UNIFIED,
}
_AARCH64: Mapping[str, int] = {
    "ioctl": 29,
    "umount2": 39,
    "mount": 40,
    "pivot_root": 41,
    "chroot": 51,
    "quotactl": 60,
    "acct": 89,
    "personality": 92,
    "unshare": 97,
    "kexec_load": 104,
    "init_module": 105,
    "delete_module": 106,
    "syslog": 116,
    "ptrace": 117,
    "reboot": 142,
    "msgget": 186,
    "semget": 190,
    "shmget": 194,
    "add_key": 217,
    "request_key": 218,
    "keyctl": 219,
    "clone": 220,
    "swapon": 224,
    "swapoff": 225,
    "mbind": 235,
    "get_mempolicy": 236,
    "set_mempolicy": 237,
    "migrate_pages": 238,
    "move_pages": 239,
    "perf_event_open": 241,
    "name_to_handle_at": 264,
    "open_by_handle_at": 265,
    "setns": 268,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "finit_module": 273,
    "bpf": 280,
    "userfaultfd": 282,
    "kexec_file_load": 294,
    **_UNIFIED,
}

# By `os.uname().machine`: the hosts the program covers (their children are the host's own
# interpreter, so the same arch). Elsewhere `open_filter` refuses: a sandbox whose every
# system call is killed would only fail later, and less clearly.
SYSCALL_NUMBERS: Mapping[str, Mapping[str, int]] = {"x86_64": _X86_64, "aarch64": _AARCH64}
SUPPORTED_MACHINES = tuple(SYSCALL_NUMBERS)

_Insn = tuple[int, int, int, int]  # (code, jt, jf, k), as struct sock_filter


@functools.cache
def program() -> bytes:
    """The filter: an array of `struct sock_filter` (8 bytes each, little-endian) for
    SECCOMP_SET_MODE_FILTER, the same bytes on every host."""
    x86_64 = [(LD_W_ABS, 0, 0, _OFF_NR), (JMP_JGE_K, 0, 1, _X32_SYSCALL_BIT), (RET_K, 0, 0, RET_KILL_PROCESS)]
    x86_64 += _rules(_X86_64)
    aarch64 = [(LD_W_ABS, 0, 0, _OFF_NR), *_rules(_AARCH64)]
    insns: list[_Insn] = [
        (LD_W_ABS, 0, 0, _OFF_ARCH),
        (JMP_JEQ_K, 0, 1, AUDIT_ARCH_X86_64),
        (JMP_JA, 0, 0, 3),  # to x86_64
        (JMP_JEQ_K, 0, 1, AUDIT_ARCH_AARCH64),
        (JMP_JA, 0, 0, 1 + len(x86_64)),  # to aarch64
        (RET_K, 0, 0, RET_KILL_PROCESS),  # any other arch, e.g. i386 through int 0x80
        *x86_64,
        *aarch64,
    ]
    return b"".join(struct.pack("<HBBI", *insn) for insn in insns)


def _rules(numbers: Mapping[str, int]) -> list[_Insn]:
    """One arch's rules, A holding the syscall number; ends in RET_ALLOW. Each rule is a
    block that returns once its number matched, so A never needs reloading."""
    insns: list[_Insn] = []
    # The number first (it must not depend on arguments: the kernel's cache can then allow
    # every other call outright), then the argument, which only clone, ioctl and personality read.
    insns += [
        (JMP_JEQ_K, 0, 4, numbers["clone"]),
        (LD_W_ABS, 0, 0, _arg_low(0)),
        (JMP_JSET_K, 0, 1, _CLONE_NAMESPACES),
        (RET_K, 0, 0, RET_ERRNO | errno.EPERM),
        (RET_K, 0, 0, RET_ALLOW),
    ]
    insns += [
        (JMP_JEQ_K, 0, 5, numbers["ioctl"]),
        (LD_W_ABS, 0, 0, _arg_low(1)),
        (JMP_JEQ_K, 2, 0, TIOCSTI),
        (JMP_JEQ_K, 1, 0, TIOCLINUX),
        (RET_K, 0, 0, RET_ALLOW),
        (RET_K, 0, 0, RET_ERRNO | errno.EPERM),
    ]
    insns += [
        (JMP_JEQ_K, 0, 5, numbers["personality"]),
        (LD_W_ABS, 0, 0, _arg_low(0)),
        (JMP_JEQ_K, 2, 0, _PERSONALITIES_ALLOWED[0]),
        (JMP_JEQ_K, 1, 0, _PERSONALITIES_ALLOWED[1]),
        (RET_K, 0, 0, RET_ERRNO | errno.EPERM),
        (RET_K, 0, 0, RET_ALLOW),
    ]
    for names, error in ((_EPERM + _SYSV_IPC, errno.EPERM), (_ENOSYS, errno.ENOSYS)):
        for name in names:
            if name in numbers:
                insns += [(JMP_JEQ_K, 0, 1, numbers[name]), (RET_K, 0, 0, RET_ERRNO | error)]
    insns.append((RET_K, 0, 0, RET_ALLOW))
    return insns


def open_filter(machine: str | None = None) -> int:
    """A new fd holding `program()` for bwrap's `--seccomp`: a sealed memfd, read offset 0,
    close-on-exec (pass it with `pass_fds`, which makes the child's copy inheritable). The
    caller owns it and must close it. bwrap reads it once, so each spawn needs its own.

    machine: the host's `os.uname().machine` (the default); a parameter for tests.
    Raises `SandboxUnavailable` when the machine is not in `SUPPORTED_MACHINES` or the fd
    cannot be made: the child must not start without its filter (docs/security.md D11).
    """
    machine = os.uname().machine if machine is None else machine
    if machine not in SUPPORTED_MACHINES or struct.calcsize("P") != 8:
        raise SandboxUnavailable(
            f"no seccomp filter for this host's architecture ({machine}); children need one of "
            f"{', '.join(SUPPORTED_MACHINES)} with a 64-bit Python"
        )
    data = program()
    try:
        fd = os.memfd_create("mcp-host-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as exc:
        raise SandboxUnavailable(f"could not make the seccomp filter's memfd: {exc.strerror or exc}") from exc
    try:
        if os.write(fd, data) != len(data):  # a memfd takes it whole; a torn filter must not pass
            raise SandboxUnavailable("could not write the whole seccomp filter")
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.lseek(fd, 0, os.SEEK_SET)  # bwrap reads from the current offset to the end
    except BaseException:
        os.close(fd)
        raise
    return fd
