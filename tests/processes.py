"""Helpers shared by the sandbox, pids-cgroup, launch and seccomp tests: the bwrap marker,
child limits, reading a child's output, polling for process state, and the fork loop that
probes a process cap."""

from __future__ import annotations

import select
import shutil
import subprocess
import time
from collections.abc import Callable

import pytest

from mcp_host.children.lifecycle import ChildLimits

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

# Child limits for tests that drive a ChildPool directly (no host): generous start time, short backoff.
CHILD_LIMITS = ChildLimits(
    start_timeout_s=20.0,
    idle_timeout_s=300.0,
    max_line_bytes=1024 * 1024,
    stderr_lines_per_s=20,
    stderr_line_bytes=2048,
    backoff_max_s=1.0,
    crash_loop_threshold=5,
    timeouts_before_recycle=3,
)

# Starts background sleeps until fork fails, then prints how many started. Only shell
# builtins after the loop: once the cap is reached, nothing can fork any more.
FORK_LOOP = (
    "sh -c 'n=0; while [ $n -lt 200 ]; do sleep 30 & n=$((n+1)); echo $n > /tmp/count; done';"
    " read n < /tmp/count; echo $n"
)


def read_line(process: subprocess.Popen[bytes], timeout: float) -> str:
    """One line of `process`'s stdout, failing the test when none comes within `timeout`."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no line within {timeout} s"
    return process.stdout.readline().decode()


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll `condition` (state of another process: no event can signal it); False on timeout."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
