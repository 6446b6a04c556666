"""A 2025-11-25 client whose replica dies carries on through another (issue 16, item 2).

Neither the Python nor the TypeScript SDK client opens a new session on the 404 the protocol
prescribes for an `Mcp-Session-Id` its replica does not know, so the host answers one they
recover from: the replica a client's next request reaches adopts its session (opens one of its
own from the recorded initialize and renames the id both ways, `edge.protocol_sessions`). Here
the replica holding each client's session is SIGKILLed between calls, and the same client keeps
calling through HAProxy with no error reaching the caller.
"""

from __future__ import annotations

import pytest

from tests.cluster.support import TS_SDK, Cluster, home_of, needs_haproxy, structured, ts_visitor
from tests.processes import needs_bwrap

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.cluster,
    pytest.mark.xdist_group("cluster"),
    pytest.mark.timeout(300),
    needs_haproxy,
    needs_bwrap,
]

LEGACY = "legacy"


async def test_the_python_sdk_client_carries_on_after_its_replica_died(whole: Cluster) -> None:
    session = await whole.new_session()
    home = await home_of(whole, session)
    seen: list[str] = []
    async with whole.client(session, LEGACY, seen) as client:
        assert structured(await client.call_tool("count", {}))["count"] == 1
        assert structured(await client.call_tool("count", {}))["count"] == 2
        await whole.kill(home)
        # The same client, the same Mcp-Session-Id: another replica adopted it (a new
        # per-session instance there counts from 1).
        assert structured(await client.call_tool("count", {}))["count"] == 1
        assert structured(await client.call_tool("echo", {"text": "on"}))["text"] == "on"
        assert structured(await client.call_tool("count", {}))["count"] == 2
    assert seen[0] == home and seen[-1] != home


@pytest.mark.skipif(not TS_SDK.is_dir(), reason="the TypeScript SDK is not installed (scripts/install-ecosystem)")
async def test_the_typescript_sdk_client_carries_on_after_its_replica_died(whole: Cluster) -> None:
    session = await whole.new_session()
    home = await home_of(whole, session)
    visitor = await ts_visitor(session)
    try:
        first = await visitor.send({"call": "count"})
        await whole.kill(home)
        after = [await visitor.send({"call": "count"}) for _ in range(3)]
        echoed = await visitor.send({"call": "echo", "arguments": {"text": "on"}})
    finally:
        await visitor.close()
    assert first["result"]["structuredContent"]["count"] == 1, first
    assert [a.get("result", a)["structuredContent"]["count"] for a in after] == [1, 2, 3], after
    assert echoed["result"]["structuredContent"]["text"] == "on", echoed
    # The client never saw another id: the adopting replica renames its own to the client's.
    assert {a["sessionId"] for a in [*after, echoed]} == {first["sessionId"]}
