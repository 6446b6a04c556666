"""The embedded PostgreSQL's first start on a machine that has never run one.

Run as root, pgserver runs postgres as a system user `pgserver` that it creates on first use.
Every new machine (and every CI run on one) starts several embedded servers at once — one per
pytest worker, or `scripts/run` beside a test run — before that user exists. These tests make
such a machine: a private mount namespace whose /etc is a copy without the user, so the real
machine's user database is left alone (and the servers already running as `pgserver` with it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare (util-linux): pgserver makes a system user only when run as root",
)

# One embedded server, started at the given wall-clock time so that all start together.
_START_ONE = textwrap.dedent(
    """
    import sys, tempfile, time
    from pathlib import Path
    import anyio
    from mcp_host.store.embedded_postgres import embedded_postgres

    async def main() -> None:
        parent = Path(tempfile.mkdtemp(prefix="mcp-host-pg-"))
        while time.time() < float(sys.argv[1]):
            time.sleep(0.0005)
        async with embedded_postgres(parent / "data") as dsn:
            import asyncpg
            connection = await asyncpg.connect(dsn)
            print("answered", await connection.fetchval("SELECT 1"))
            await connection.close()

    anyio.run(main)
    """
)

# In a private mount namespace: /etc is a copy without the pgserver user and group, then
# `count` servers start at once (at `at`, seconds since the epoch); writes each one's exit
# status and output, then the user lines.
_FRESH_MACHINE = textwrap.dedent(
    """
    set -eu
    etc="$1"; count="$2"; script="$3"; out="$4"; at="$5"
    cp -a /etc/. "$etc/"
    for file in passwd shadow group gshadow; do
      [ -f "$etc/$file" ] && sed -i '/^pgserver:/d' "$etc/$file"
    done
    mount --bind "$etc" /etc
    if getent passwd pgserver >/dev/null; then echo "pgserver still exists"; exit 1; fi
    for i in $(seq "$count"); do
      ( status=0; "$PYTHON" "$script" "$at" >"$out/$i.log" 2>&1 || status=$?; echo "$status" >"$out/$i.status" ) &
    done
    wait
    grep '^pgserver:' /etc/passwd | cut -d: -f1,7 >"$out/users"
    """
)


@pytest.mark.e2e  # starts four real PostgreSQL servers of its own, which no fixture shows
def test_several_first_starts_at_once_on_a_machine_without_the_system_user(tmp_path: Path) -> None:
    count = 4  # scripts/test's pytest workers
    (tmp_path / "etc").mkdir()
    (tmp_path / "out").mkdir()
    script = tmp_path / "start_one.py"
    script.write_text(_START_ONE)
    fresh = tmp_path / "fresh_machine.sh"
    fresh.write_text(_FRESH_MACHINE)
    started = time.monotonic()
    start_at = f"{time.time() + 5:.3f}"  # after copying /etc and importing the host, at once
    subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", str(fresh)]
        + [str(tmp_path / "etc"), str(count), str(script), str(tmp_path / "out"), start_at],
        check=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable},
    )
    outcomes = {
        i: ((tmp_path / "out" / f"{i}.status").read_text().strip(), (tmp_path / "out" / f"{i}.log").read_text())
        for i in range(1, count + 1)
    }
    failed = {i: log for i, (status, log) in outcomes.items() if status != "0" or "answered 1" not in log}
    assert failed == {}, f"first starts failed (after {time.monotonic() - started:.1f} s): {failed}"
    # Made once, as pgserver itself would make it.
    assert (tmp_path / "out" / "users").read_text() == "pgserver:/bin/bash\n"
