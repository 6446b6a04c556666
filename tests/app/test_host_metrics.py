"""`GET /metrics` on a real host: the operator's token or the owner's, the named series present
and moving after visitor calls, a refusal, a quota refusal, host ops and a child's crash."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.hosting import RunningHost, host_settings, running_host, wait_until
from tests.policy.test_quota import code_session, new_code
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

TOKEN = "metrics-token-for-the-test"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


async def scrape(running: RunningHost, token: str = TOKEN) -> Samples:
    response = await running.http.get(f"{running.url}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        _key(s.name, **s.labels): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def _moved(before: Mapping[tuple[str, frozenset[tuple[str, str]]], float], after: Samples) -> Samples:
    """How much each counter sample grew between two scrapes (new ones from zero)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value != before.get(key, 0.0)}


async def test_metrics_need_the_metrics_or_owner_token_never_a_visitors(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"], metrics_token=TOKEN)) as running:
        session = await running.new_session()
        url = f"{running.url}/metrics"
        assert (await running.http.get(url)).status_code == 401
        for wrong in ("nope", session["token"], TOKEN + "x"):
            response = await running.http.get(url, headers={"Authorization": f"Bearer {wrong}"})
            assert response.status_code == 401
            assert "mcp_host" not in response.text
        owner_token = running.owner_token()
        await scrape(running, owner_token)
        await scrape(running, TOKEN)


async def test_metrics_count_calls_refusals_host_ops_and_a_childs_crash(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo", "notes"], metrics_token=TOKEN)
    async with running_host(settings) as running:
        before = await scrape(running)
        code, _ = await new_code(running, max_notes=1)
        session = await code_session(running, code)
        async with running.client(session) as client:
            assert not (await client.call_tool("echo", {"text": "hi"})).is_error
            assert (await client.call_tool("no_such_tool", {})).is_error
            assert not (await client.call_tool("note_add", {"text": "one"})).is_error
            assert (await client.call_tool("note_add", {"text": "two"})).is_error  # quota 1 used up
            open_now = await scrape(running)
        async with running.client(session, "legacy") as client:
            assert (await client.call_tool("die", {})).is_error  # the child is killed mid-call
            assert not (await client.call_tool("echo", {"text": "back"})).is_error
        await wait_until(lambda: len(running.spawned) == 3, within_s=10)  # echo twice, notes once
        after = await scrape(running)

    calls = "mcp_host_tool_call_duration_seconds_count"
    moved = _moved(before, after)
    assert moved[_key(calls, door="visitor", capability="test.echo", tool="echo", outcome="ok")] == 2
    assert moved[_key(calls, door="visitor", capability="", tool="", outcome="unknown")] == 1
    assert moved[_key(calls, door="visitor", capability="notes", tool="note_add", outcome="ok")] == 1
    assert moved[_key(calls, door="visitor", capability="notes", tool="note_add", outcome="quota_exhausted")] == 1
    assert moved[_key(calls, door="visitor", capability="test.echo", tool="die", outcome="unavailable")] == 1
    assert moved[_key("mcp_host_quota_refusals_total", capability="notes", stage="call")] == 1
    assert moved[_key("mcp_host_backchannel_ops_total", op="store.insert", outcome="ok")] == 1
    assert moved[_key("mcp_host_child_starts_total", plugin="test.echo")] == 2
    assert moved[_key("mcp_host_child_starts_total", plugin="notes")] == 1
    assert moved[_key("mcp_host_child_crashes_total", plugin="test.echo")] == 1
    assert moved[_key("mcp_host_child_restarts_total", plugin="test.echo")] == 1
    assert _key("mcp_host_child_crashes_total", plugin="notes") not in after
    echoed = {"door": "visitor", "capability": "test.echo", "tool": "echo", "outcome": "ok"}
    assert after[_key("mcp_host_tool_call_duration_seconds_bucket", **echoed, le="+Inf")] == 2

    # The gauges read when scraped.
    assert after[_key("mcp_host_children_running", plugin="test.echo")] == 1
    assert after[_key("mcp_host_children_running", plugin="notes")] == 1
    assert open_now[_key("mcp_host_protocol_sessions_open", door="visitor")] == 0  # 2026-07-28: none
    assert after[_key("mcp_host_protocol_sessions_open", door="owner")] == 0
    assert after[_key("mcp_host_visitor_sessions_open")] == 1
    assert after[_key("mcp_host_holds_pending")] == 0
    assert after[_key("mcp_host_input_rounds_parked")] == 0
    in_use, idle = (after[_key("mcp_host_db_pool_connections", state=s)] for s in ("in_use", "idle"))
    assert in_use + idle >= 1
    assert after[_key("mcp_host_db_pool_max")] >= in_use + idle
    assert _key("mcp_host_tools_pending") not in after  # pinning is off in these tests


async def test_tools_pending_is_counted_when_pinning_is_on(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"], metrics_token=TOKEN, pin_tools=True)
    async with running_host(settings) as running:
        session = await running.new_session()
        async with running.client(session, "legacy") as client:
            assert (await client.list_tools()).tools == []  # the owner has approved nothing yet
            samples = await scrape(running)
            assert samples[_key("mcp_host_protocol_sessions_open", door="visitor")] == 1
    assert samples[_key("mcp_host_tools_pending")] == 4
