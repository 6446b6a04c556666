"""A stand-in host for the SandboxLedger tests: it spawns a sandbox, records it, and dies.

Usage: ledger_host.py RUN_DIR ARGV_JSON. Spawns ARGV in its own session (as the host's
children module does), records it in a `SandboxLedger` on RUN_DIR, writes the pid as one
line to stdout, then blocks until it is killed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from mcp_host.sandbox.bwrap import SandboxLedger


def main(run_dir: Path, argv: list[str]) -> None:
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    SandboxLedger(run_dir).record(child.pid, "test.escape")
    sys.stdout.write(f"{child.pid}\n")
    sys.stdout.flush()
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]))
