"""`scripts/demo` against a real host started here: the scripted visitor books a slot, fails to
book it twice, and the claim gate accepts the true answers and flags the false one."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tests.hosting import BUILTINS, REPO, host_settings, running_host
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

DEMO = REPO / "scripts" / "visitor_demo.py"


async def test_the_demo_books_once_is_refused_once_and_the_gate_flags_the_false_claim(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, [], builtin_dir=BUILTINS)) as running:
        with anyio.fail_after(90):
            # Found from the data directory alone, as after `scripts/run --port …`: the host's
            # address from its host.json (a free port here, never 8765), the owner token beside it.
            done = await anyio.run_process(
                [sys.executable, str(DEMO), "--data-dir", str(running.settings.data_dir)], check=False
            )
            refused = await anyio.run_process(
                [sys.executable, str(DEMO), "--url", running.url, "--owner-token", "wrong"], check=False
            )
        codes = await running.access.list_codes(running.owner_id)
        connected = await running.connections.list(running.owner_id)

    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    lines = [line.strip() for line in out.splitlines()]
    [tools] = [line for line in lines if line.startswith("tools:")]
    assert {"bookings_list", "calendar_book", "calendar_cancel", "calendar_list_slots"} <= set(tools[6:].split(", "))
    verdicts = [line for line in lines if line.startswith("host:")]
    assert verdicts == [
        "host: ok",
        'host: VIOLATION — "you\'re booked" without a successful calendar_book in this turn',
        "host: ok",
    ]
    assert any(line.startswith("agent → calendar_book") and "ok {'ok': True" in line for line in lines)
    assert any("refused slot_taken:" in line for line in lines)
    assert any(line.startswith("agent → calendar_cancel: ok") for line in lines)
    # The demo cleaned up after itself: its code is revoked, its calendar disconnected.
    assert [c.revoked_at is not None for c in codes] == [True]
    assert connected == []
    assert (refused.returncode, refused.stderr.decode()) == (
        1,
        "demo: the host refused the owner token (pass --owner-token or --data-dir)\n",
    )
