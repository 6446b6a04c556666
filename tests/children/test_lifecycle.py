"""Children under fault, through a real host: crash, hang, flood, failure to start, idle stop."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_host.children.lifecycle import ChildState
from mcp_host.settings import Settings
from tests.hosting import host_settings, running_host, wait_until

pytestmark = pytest.mark.anyio


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_child_killed_during_a_call_is_unavailable_then_works_again(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        async with host.client(session, "legacy") as client:
            first_pid = (await client.call_tool("whoami", {})).structured_content
            assert first_pid is not None
            result = await client.call_tool("die", {})
            assert result.is_error is True
            assert result.structured_content is not None
            assert result.structured_content["code"] == "unavailable"
            again = await client.call_tool("echo", {"text": "back"})
            assert again.structured_content == {"text": "back"}
        assert len(host.spawned) == 2
        await wait_until(lambda: not _alive(host.spawned[0]))


async def test_child_killed_from_outside_mid_call_is_unavailable(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            await client.call_tool("echo", {"text": "warm"})
            outcome: dict[str, object] = {}
            in_the_child = anyio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                in_the_child.set()  # the child reports progress once its call has begun

            async def slow_call() -> None:
                outcome["result"] = await client.call_tool("sleep", {"seconds": 30}, progress_callback=on_progress)

            async with anyio.create_task_group() as tg:
                tg.start_soon(slow_call)
                with anyio.fail_after(10):
                    await in_the_child.wait()
                started = time.monotonic()
                os.kill(host.spawned[0], 9)
            assert time.monotonic() - started < 2.0  # the caller hears within the B2 bound
            result = outcome["result"]
            assert getattr(result, "structured_content", None)["code"] == "unavailable"  # type: ignore[index]
            assert (await client.call_tool("echo", {"text": "x"})).structured_content == {"text": "x"}


async def test_hung_call_times_out_and_session_stays_usable(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"], call_timeout_s=1.0)
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            await client.list_tools()  # the SDK client lists once before a first call: not part of the timing
            started = time.monotonic()
            result = await client.call_tool("sleep", {"seconds": 30})
            elapsed = time.monotonic() - started
            assert result.is_error is True
            assert result.structured_content == {"code": "timeout", "message": "the call did not finish within 1 s"}
            assert 0.95 <= elapsed < 1.6  # the deadline, plus one HTTP round trip on a noisy 2-core VM
            assert (await client.call_tool("echo", {"text": "x"})).structured_content == {"text": "x"}


async def test_repeated_timeouts_recycle_the_child(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"], call_timeout_s=0.5, child_timeouts_before_recycle=2)
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            for _ in range(2):
                result = await client.call_tool("sleep", {"seconds": 30})
                assert result.structured_content is not None
                assert result.structured_content["code"] == "timeout"
            await wait_until(lambda: not _alive(host.spawned[0]))
            assert (await client.call_tool("echo", {"text": "x"})).structured_content == {"text": "x"}
            assert len(host.spawned) == 2


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_child_flooding_stdout_without_newline_is_killed_with_bounded_cost(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    cap = 4 << 20
    settings = host_settings(tmp_path, database_url, ["flood", "echo"], child_max_line_bytes=cap)
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            assert {t.name for t in (await client.list_tools()).tools} >= {"flood", "echo"}
            rss_before = _rss_bytes()
            cpu_before = resource.getrusage(resource.RUSAGE_SELF)
            result = await client.call_tool("flood", {})
            cpu_after = resource.getrusage(resource.RUSAGE_SELF)
            assert result.is_error is True
            assert result.structured_content is not None
            assert result.structured_content["code"] == "unavailable"
            # the host read at most the cap (plus buffers), and spent little CPU doing it
            assert _rss_bytes() - rss_before < cap + (16 << 20)
            cpu_used = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
            assert cpu_used < 1.0
            # other capabilities keep serving
            assert (await client.call_tool("echo", {"text": "x"})).structured_content == {"text": "x"}
        assert "test.flood wrote a line over 4194304 bytes; closing it" in caplog.messages
        assert any(m.startswith("test.flood: wrote an over-long line") for m in caplog.messages)


async def test_child_that_cannot_start_is_left_out_with_its_cause(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["wont_start", "echo"])) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["echo", "whoami", "sleep", "die"]
        entry = {e.id: e for e in host.catalogue()}["test.wont_start"]
        assert entry.status == "failing"
        assert entry.cause is not None
        assert "exit code 7" in entry.cause
        assert "missing configuration" in entry.cause


async def test_crash_loop_backs_off_and_marks_child_failing(tmp_path: Path, database_url: str) -> None:
    # A backoff no loaded machine outlasts between two lists (the default 0.25 s can lapse
    # before the third, which would then spawn a third process).
    settings = host_settings(
        tmp_path, database_url, ["wont_start"], child_crash_loop_threshold=2, child_restart_backoff_base_s=30.0
    )
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            for _ in range(4):
                await client.list_tools()
        child = host.child("test.wont_start")
        assert child is not None
        assert child.health().state == ChildState.FAILING
        # the second failure set a backoff, so four lists did not spawn four processes
        assert len(host.spawned) == 2


async def test_a_tool_that_kills_its_child_backs_off_then_marks_it_failing(tmp_path: Path, database_url: str) -> None:
    # Each restarted child answers initialize and tools/list before it dies on the call: that
    # must not end the run of failures, or the backoff and `failing` never come.
    settings = host_settings(
        tmp_path,
        database_url,
        ["echo"],
        child_crash_loop_threshold=3,
        child_restart_backoff_base_s=1.0,
        child_restart_backoff_max_s=4.0,
    )
    async with running_host(settings) as host:
        spawned = host.spawned
        session = await host.new_session()
        async with host.client(session) as client:

            async def die() -> dict[str, Any]:
                result = await client.call_tool("die", {})
                assert result.is_error is True and result.structured_content is not None
                return dict(result.structured_content)

            assert (await die())["code"] == "unavailable"
            child = host.child("test.echo")
            assert child is not None
            await wait_until(lambda: child.health().failures == 1)
            assert child.health().retry_in_s == 0  # the first restart is immediate
            assert (await die())["code"] == "unavailable"
            await wait_until(lambda: child.health().failures == 2)
            health = child.health()
            assert (health.state, len(spawned)) == (ChildState.STOPPED, 2)
            assert 0.5 < health.retry_in_s <= 1.0

            # Within the backoff: refused at once, with when to retry, and nothing spawned.
            started = time.monotonic()
            refused = await die()
            assert time.monotonic() - started < 0.5
            assert refused["code"] == "unavailable"
            assert refused["message"].startswith("the capability is restarting after a failure; retry in ")
            assert len(spawned) == 2

            await wait_until(lambda: child.health().retry_in_s == 0, within_s=3)
            assert (await die())["code"] == "unavailable"
            await wait_until(lambda: child.health().failures == 3)
            health = child.health()
            assert (health.state, len(spawned)) == (ChildState.FAILING, 3)
            assert 1.0 < health.retry_in_s <= 2.0  # doubled
            refused = await die()
            assert refused["message"].startswith("the capability keeps failing; retry in ")
            assert len(spawned) == 3
        entry = {e.id: e for e in host.catalogue()}["test.echo"]
        assert entry.status == "failing"
        assert entry.cause is not None and entry.cause.startswith("exited; ")


async def test_only_an_answered_call_ends_a_run_of_failures(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"], child_restart_backoff_base_s=0.01)
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            await client.call_tool("die", {})
            child = host.child("test.echo")
            assert child is not None
            await wait_until(lambda: child.health().failures == 1)
            await client.list_tools()  # restarts it: it answers initialize and tools/list
            assert child.health().state == ChildState.RUNNING
            assert child.health().failures == 1
            await client.call_tool("die", {})
            await wait_until(lambda: child.health().failures == 2)
            assert (await client.call_tool("echo", {"text": "x"})).structured_content == {"text": "x"}
            assert (child.health().failures, child.health().cause) == (0, None)


def test_crash_loop_defaults_are_pinned() -> None:
    settings = Settings()
    assert {
        "threshold": settings.children.crash_loop_threshold,
        "base_s": settings.children.restart_backoff_base_s,
        "max_s": settings.children.restart_backoff_max_s,
        "stable_after_s": settings.children.stable_after_s,
    } == {"threshold": 5, "base_s": 0.25, "max_s": 30.0, "stable_after_s": 30.0}


async def test_idle_child_is_stopped_and_started_again_on_next_use(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["echo"], child_idle_timeout_s=0.3)
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            await client.call_tool("echo", {"text": "x"})
            child = host.child("test.echo")
            assert child is not None
            await wait_until(lambda: not child.running)
            await wait_until(lambda: child.health().pid is None)  # reaped
            assert child.health().state == ChildState.STOPPED
            assert child.health().cause is None
            assert (await client.call_tool("echo", {"text": "y"})).structured_content == {"text": "y"}
            assert len(host.spawned) == 2


async def test_children_stop_with_the_host(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo", "shifty"])) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            await client.list_tools()
        pids = list(host.spawned)
        assert len(pids) == 2
    for pid in pids:
        assert not _alive(pid)


async def test_children_inherit_no_descriptor_of_the_host(tmp_path: Path, database_url: str) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("canary")
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)  # the worst case: a descriptor the host forgot to protect
    try:
        async with running_host(host_settings(tmp_path, database_url, ["escape"])) as host:
            session = await host.new_session()
            async with host.client(session) as client:
                result = await client.call_tool("list_fds", {})
        assert result.structured_content is not None
        fds = result.structured_content.get("result", result.structured_content)
        assert sorted(fds) == ["0", "1", "2"]
        assert all("host-secret" not in target for target in fds.values())
    finally:
        os.close(fd)


async def test_past_the_child_cap_capabilities_are_left_out_and_the_host_keeps_serving(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["echo", "shifty"], max_children=1)
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["echo", "whoami", "sleep", "die"]
            assert (await client.call_tool("echo", {"text": "x"})).structured_content == {"text": "x"}
        entries = {e.id: e for e in host.catalogue()}
        assert entries["test.shifty"].cause == "left out of tool lists: the host runs as many capabilities as it may"
