"""Helpers shared by the sandbox and pids-cgroup tests: reading a child's output, polling
for process state, and the fork loop both use to probe a process cap."""

from __future__ import annotations

import select
import subprocess
import time
from collections.abc import Callable

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
