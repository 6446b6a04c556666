"""Seeded hostile bytes against one gate: valid HTTP and SOCKS5 heads mutated (bytes flipped,
cut, repeated, control characters and non-ASCII inserted, numbers made huge: `hostile_heads`,
which `tests/fuzzing.py`'s `egress` endpoint sends to a running host's gate). The proxy passes
when every case is answered (or closed) within its bound, every HTTP answer is one of the
proxy's statuses with a one-line body, nothing is logged with a traceback, and the gate still
opens a normal tunnel afterwards."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import anyio
import pytest

from mcp_host.egress import EgressCaps, EgressProxy, HostsFileResolver, SystemResolver
from mcp_host.plugins import EgressPolicy
from tests.egress.hostile_heads import exchange, mutated, templates, well_formed
from tests.egress.loopback import echo_server, open_tunnel, short_folder, write_hosts

pytestmark = pytest.mark.anyio

SEED = 20261207
CASES = 400


@pytest.mark.timeout(300)
async def test_hostile_bytes_leave_the_gate_answering_and_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "mcp_host.egress")
    rng = random.Random(SEED)
    caps = EgressCaps(connections=64, bytes_per_minute=50_000_000, idle_s=5.0)
    odd: list[tuple[bytes, bytes]] = []
    with short_folder() as folder:
        resolver = HostsFileResolver(write_hosts(tmp_path), SystemResolver())
        async with echo_server() as peer, EgressProxy(folder, resolver, head_timeout_s=2.0) as running:
            policy = EgressPolicy.of([f"site.example.test:{peer.port}"], allow_private=["site.example.test"])
            gate = await running.open("web", None, policy, caps)
            requests = templates(peer.port)

            async def one(case: bytes) -> None:
                with anyio.fail_after(20):
                    answer = await exchange(gate.path, case)
                if not well_formed(answer):
                    odd.append((case[:200], answer[:300]))

            for _ in range(CASES // 20):
                async with anyio.create_task_group() as batch:
                    for _case in range(20):
                        batch.start_soon(one, mutated(rng.choice(requests), rng))
            stream = await open_tunnel(gate.path, peer.port)
            async with stream:
                await stream.send(b"after the fuzz")
                with anyio.fail_after(5):
                    assert await stream.receive() == b"after the fuzz"
    assert odd == []
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
