"""Per-session instances: one child per (plugin, visitor session) for a session-unaware server,
one more for the owner's context, one for all for a shared plugin; bounded host-wide and per
principal (an idle one stopped to make room: the principal's own at its share, else one of the
principal holding the most; never a busy one, never another principal's for one over its
share), started at a bounded rate per principal, stopped when idle or when the session ends,
and forgotten once stopped.

The table's rules as logic over stand-ins first, then through a real host with the
`sessionless` fixture (a plain SDK server that counts calls in its process).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_host.children import Child
from mcp_host.children.instances import InstanceShares, SessionInstances
from mcp_host.children.pool import ChildPool
from mcp_host.errors import Unavailable
from mcp_host.plugins.loading import load_plugins
from mcp_host.principal import Principal
from mcp_host.sandbox.launch import Launch, launch_for
from mcp_host.settings import Settings
from tests.hosting import PLUGINS, RunningHost, host_settings, refusal, running_host, wait_until
from tests.processes import CHILD_LIMITS

pytestmark = pytest.mark.anyio

SESSIONLESS = "test.sessionless"


# -- the table, as logic -----------------------------------------------------------------------


@dataclass
class _Health:
    last_exit: str | None = None
    last_exit_at: float | None = None


@dataclass
class _Instance:
    plugin_id: str
    session_id: str | None
    last_used: float = 0.0
    busy: bool = False
    running: bool = True
    retired: bool = False
    exit: _Health | None = None

    def health(self) -> _Health:
        return self.exit or _Health()

    def retire(self) -> None:
        self.retired = True


ALICE, BOB, CAROL = Principal("address", "192.0.2.1"), Principal("code", "c1"), Principal("api_key", "k1")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _table(host: int, per_principal: int | None = None, starts_per_minute: int = 100) -> SessionInstances[_Instance]:
    shares = InstanceShares(host=host, per_principal=per_principal or host, starts_per_minute=starts_per_minute)
    return SessionInstances(shares, clock=_Clock())


def test_at_the_cap_the_least_recently_used_idle_instance_makes_room() -> None:
    table = _table(2)
    old, recent = _Instance("p", "s1", last_used=1.0), _Instance("p", "s2", last_used=2.0)
    table.add(old, ALICE)
    table.add(recent, ALICE)
    new = table.add(_Instance("q", "s3", last_used=3.0), ALICE)
    assert (old.retired, recent.retired) == (True, False)
    assert (table.get("p", "s1"), table.get("p", "s2"), table.get("q", "s3")) == (None, recent, new)
    assert len(table) == 2 and table.held_by(ALICE) == 2


def test_a_busy_instance_is_never_stopped_and_a_table_of_busy_ones_refuses() -> None:
    table = _table(2, per_principal=1)
    oldest_busy = table.add(_Instance("p", "s1", last_used=1.0, busy=True), ALICE)
    idle = table.add(_Instance("p", "s2", last_used=5.0), BOB)
    table.add(_Instance("p", "s3", busy=True), BOB)
    assert (oldest_busy.retired, idle.retired) == (False, True)
    with pytest.raises(Unavailable) as refused:
        table.add(_Instance("p", "s4"), CAROL)
    assert refused.value.message == (
        "the host runs as many per-session instances as it may (2), each serving a call; retry in 5 s"
    )
    assert table.get("p", "s4") is None and len(table) == 2


def test_a_principal_at_its_share_makes_room_with_its_own_idle_instance_never_anothers() -> None:
    table = _table(8, per_principal=2)
    bobs = table.add(_Instance("p", "b1", last_used=0.5), BOB)  # the oldest in the table
    mine = [table.add(_Instance("p", f"a{i}", last_used=float(i + 1)), ALICE) for i in range(2)]
    third = table.add(_Instance("p", "a2", last_used=9.0), ALICE)
    assert [i.retired for i in mine] == [True, False] and not bobs.retired
    assert (table.held_by(ALICE), table.held_by(BOB), len(table)) == (2, 1, 3)
    assert table.holder("p", "a2") == ALICE and table.get("p", "a2") is third


def test_a_principal_whose_share_is_busy_is_refused_and_another_is_served() -> None:
    table = _table(8, per_principal=2)
    bobs = table.add(_Instance("p", "b1"), BOB)  # idle, older than anything of Alice's
    for i in range(2):
        table.add(_Instance("p", f"a{i}", last_used=5.0, busy=True), ALICE)
    with pytest.raises(Unavailable) as refused:
        table.add(_Instance("p", "a2"), ALICE)
    assert refused.value.message == (
        "this visitor (its access code, API key or address) holds as many per-session instances as one may (2), "
        "each serving a call; retry in 5 s"
    )
    assert not bobs.retired and table.get("p", "a2") is None
    carols = table.add(_Instance("p", "c1"), CAROL)
    assert table.get("p", "c1") is carols and table.held_by(ALICE) == 2


def test_a_full_table_makes_room_with_an_idle_instance_of_the_principal_holding_the_most() -> None:
    table = _table(5, per_principal=3)
    bobs = table.add(_Instance("p", "b1", last_used=0.1), BOB)  # least recently used, but Bob holds one
    alices = [table.add(_Instance("p", f"a{i}", last_used=1.0 + i, busy=i == 0), ALICE) for i in range(3)]
    carols = table.add(_Instance("p", "c1", last_used=0.2), CAROL)
    table.add(_Instance("q", "b2", last_used=9.0), BOB)
    # Alice holds the most: her least recently used idle one goes, never her busy one.
    assert [i.retired for i in alices] == [False, True, False] and not bobs.retired and not carols.retired
    assert (table.held_by(ALICE), table.held_by(BOB), table.held_by(CAROL)) == (2, 2, 1)
    table.add(_Instance("q", "c2", last_used=9.5), CAROL)  # Alice and Bob hold two each: the older idle one
    assert bobs.retired and not alices[2].retired


def test_a_principal_starts_at_most_its_minutes_worth_then_one_as_its_bucket_refills() -> None:
    clock = _Clock()
    table: SessionInstances[_Instance] = SessionInstances(
        InstanceShares(host=32, per_principal=4, starts_per_minute=3), clock=clock
    )
    for i in range(3):
        table.add(_Instance("p", f"a{i}"), ALICE)
    table.end_session("a0")
    with pytest.raises(Unavailable) as refused:
        table.add(_Instance("p", "a3"), ALICE)
    assert refused.value.message == (
        "this visitor (its access code, API key or address) started as many per-session instances as it may "
        "in a minute (3); retry in 20 s"
    )
    assert table.held_by(ALICE) == 2
    table.add(_Instance("p", "b0"), BOB)  # another's starts are its own
    clock.now += 20.0
    table.add(_Instance("p", "a3"), ALICE)
    with pytest.raises(Unavailable):
        table.add(_Instance("p", "a4"), ALICE)


def test_a_refused_start_stops_nothing_and_spends_nothing() -> None:
    table = _table(1, starts_per_minute=1)
    busy = table.add(_Instance("p", "a0", busy=True), ALICE)
    with pytest.raises(Unavailable):
        table.add(_Instance("p", "b0"), BOB)  # the table is busy: Bob's start is not spent
    busy.busy = False
    bobs = table.add(_Instance("p", "b0"), BOB)
    assert busy.retired and table.get("p", "b0") is bobs
    with pytest.raises(Unavailable):
        table.add(_Instance("p", "a1"), ALICE)  # Alice's one start a minute is spent: Bob's is kept
    assert not bobs.retired


def test_a_cleanly_stopped_instance_is_forgotten_a_crashed_one_kept() -> None:
    table = _table(4)
    idle = table.add(_Instance("p", "s1", exit=_Health("idle", 1.0)), ALICE)
    crashed = table.add(_Instance("p", "s2", exit=_Health("exited; exit code 1", 2.0)), ALICE)
    table.ended(idle)
    table.ended(crashed)
    assert (table.get("p", "s1"), table.get("p", "s2")) == (None, crashed)
    assert idle.retired and not crashed.retired and table.held_by(ALICE) == 1
    # A replaced instance's end does not forget its successor.
    successor = table.add(_Instance("p", "s1"), ALICE)
    table.ended(idle)
    assert table.get("p", "s1") is successor and table.held_by(ALICE) == 2


def test_ending_a_session_forgets_its_instances_only() -> None:
    table = _table(4)
    mine = [table.add(_Instance("p", "s1"), ALICE), table.add(_Instance("q", "s1"), ALICE)]
    other = table.add(_Instance("p", "s2"), BOB)
    table.end_session("s1")
    assert [i.retired for i in mine] == [True, True] and not other.retired
    assert list(table.all()) == [other] and table.of("p") == [other]
    assert (table.held_by(ALICE), table.held_by(BOB)) == (0, 1)


# -- through a real host ------------------------------------------------------------------------


def _variant(tmp_path: Path, instances: str) -> Path:
    """A copy of the sessionless fixture that declares `instances`."""
    folder = tmp_path / f"sessionless_{instances}"
    shutil.copytree(PLUGINS / "sessionless", folder)
    manifest = folder / "manifest.yaml"
    manifest.write_text(manifest.read_text() + f"instances: {instances}\n")
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _counts(host: RunningHost, session: dict[str, Any], times: int) -> list[int]:
    """The counter `count` returns `times` in a row in `session` (its process's own count)."""
    async with host.client(session) as client:
        results = [(await client.call_tool("count", {})).structured_content for _ in range(times)]
    return [r["count"] for r in results if r is not None]


def _pid(host: RunningHost, session: dict[str, Any] | None) -> int:
    """The host's pid of the sessionless child of `session` (None: owner context)."""
    child = host.child(SESSIONLESS, session["session_id"] if session else None)
    assert child is not None
    pid = child.health().pid
    assert pid is not None
    return pid


async def test_each_session_has_its_own_instance_and_state_and_the_owner_another(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["sessionless"])) as host:
        a, b = await host.new_session(), await host.new_session()
        counted_a = await _counts(host, a, 2)
        counted_b = await _counts(host, b, 2)
        counted_a += await _counts(host, a, 1)
        # The owner-context instance listed the tools (no session had an instance yet).
        pids = {_pid(host, a), _pid(host, b), _pid(host, None)}
        assert len(host.spawned) == 3
    assert counted_a == [1, 2, 3] and counted_b == [1, 2]
    assert len(pids) == 3


async def test_a_shared_plugin_has_one_child_for_every_session(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, [str(_variant(tmp_path, "shared"))])  # an absolute path
    async with running_host(settings) as host:
        a, b = await host.new_session(), await host.new_session()
        counted = await _counts(host, a, 2) + await _counts(host, b, 2)
        assert host.child(SESSIONLESS, a["session_id"]) is None
        assert len(host.spawned) == 1
    assert counted == [1, 2, 3, 4]


async def test_an_idle_instance_stops_and_leaves_the_pool(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["sessionless"], child_session_idle_timeout_s=0.3)
    async with running_host(settings) as host:
        a = await host.new_session()
        assert await _counts(host, a, 1) == [1]
        pid = _pid(host, a)
        await wait_until(lambda: host.child(SESSIONLESS, a["session_id"]) is None, within_s=10)
        await wait_until(lambda: not _alive(pid))
        assert host.child(SESSIONLESS) is not None  # the owner-context instance keeps the host's idle time
        assert await _counts(host, a, 1) == [1]  # the next use starts a new one
        assert _pid(host, a) != pid


async def test_ending_a_session_stops_its_instances_at_once(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["sessionless"])) as host:
        a, b = await host.new_session(), await host.new_session()
        await _counts(host, a, 1)
        await _counts(host, b, 1)
        pid_a, pid_b = _pid(host, a), _pid(host, b)
        assert await host.sessions.end(a["session_id"])
        assert host.child(SESSIONLESS, a["session_id"]) is None
        await wait_until(lambda: not _alive(pid_a))
        assert _alive(pid_b) and host.child(SESSIONLESS, b["session_id"]) is not None


async def test_past_the_cap_an_idle_instance_makes_room_and_a_busy_one_never(tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, ["sessionless"], max_session_instances=1)
    async with running_host(settings) as host:
        a, b = await host.new_session(), await host.new_session()
        await _counts(host, a, 1)
        pid_a = _pid(host, a)
        async with host.client(a) as client_a, host.client(b) as client_b:
            async with anyio.create_task_group() as tg:
                started = anyio.Event()

                async def long_call() -> None:
                    started.set()
                    await client_a.call_tool("sleep", {"seconds": 1.5})

                tg.start_soon(long_call)
                await started.wait()
                own_a = host.child(SESSIONLESS, a["session_id"])
                assert own_a is not None
                await wait_until(lambda: own_a.busy)
                refused = await client_b.call_tool("count", {})
            assert refused.structured_content == {
                "code": "unavailable",
                "message": "this visitor (its access code, API key or address) holds as many per-session "
                "instances as one may (1), each serving a call; retry in 5 s",
            }
            assert _alive(pid_a)  # the busy instance was left alone
            served = await client_b.call_tool("count", {})  # A is idle now: its instance makes room
        assert served.structured_content is not None and served.structured_content["count"] == 1
        await wait_until(lambda: not _alive(pid_a))
        assert host.child(SESSIONLESS, a["session_id"]) is None


async def test_a_crash_loop_is_the_plugins_a_new_sessions_instance_waits_out_its_backoff(
    tmp_path: Path, database_url: str
) -> None:
    # `boom` is per-session (no host ops); its `crash` ends the process. The run of failures is
    # the plugin's: once two instances crashed, a third and a fourth session spawn nothing.
    settings = host_settings(
        tmp_path,
        database_url,
        ["boom"],
        child_crash_loop_threshold=2,
        child_restart_backoff_base_s=30.0,
        child_restart_backoff_max_s=60.0,
    )
    async with running_host(settings) as host:
        spawned = host.spawned
        answers = []
        for _ in range(4):
            session = await host.new_session()
            async with host.client(session) as client:
                answers.append(refusal(await client.call_tool("crash", {})))
            own = host.child("test.boom", session["session_id"])
            assert own is not None
            await wait_until(lambda own=own: not own.running and not own.busy)  # type: ignore[misc]
        # The owner-context instance that listed the tools, and two sessions' instances.
        assert len(spawned) == 3
        assert (
            answers[:2] == [{"code": "unavailable", "message": "the capability stopped while answering; try again"}] * 2
        )
        for refused in answers[2:]:
            assert refused is not None and refused["code"] == "unavailable"
            assert refused["message"].startswith("the capability keeps failing; retry in ")
        run = host.child_failures("test.boom")
        assert run is not None and run.count == 2 and run.retry_in_s() > 25
        owner_context = host.child("test.boom")
        assert owner_context is not None and owner_context.running  # it still serves the lists
        entry = {e.id: e for e in host.catalogue()}["test.boom"]
        assert (entry.status, entry.instances) == ("failing", 0)
        assert entry.cause is not None and "exit code 3" in entry.cause


# -- a live task keeps its instance ------------------------------------------------------------

TASKER = "test.tasker"


def _tasker_launch() -> Any:
    """The launch of the `tasker` fixture (a raw JSON-RPC tasks server); the pool makes its
    per-session instances whatever its manifest says (the factory reads that)."""
    plugin = load_plugins(None, [PLUGINS / "tasker"]).plugins[0]
    settings = Settings()

    def launch() -> Launch:
        return launch_for(plugin, settings)

    return launch


async def _task(child: Child, seconds: float) -> str:
    """Start a `research` task of `seconds` in `child`: its task id (no call stays in flight)."""
    params = {"name": "research", "arguments": {"seconds": seconds}, "task": {"ttl": 120_000}}
    created = await child.raw_request("tools/call", params, timeout_s=20)
    return str(created["task"]["taskId"])


async def _plain(child: Child) -> None:
    await child.raw_request("tools/call", {"name": "plain", "arguments": {}}, timeout_s=20)


async def test_an_instance_running_a_task_is_not_stopped_for_idleness_until_the_task_ends() -> None:
    launch = _tasker_launch()
    async with ChildPool(CHILD_LIMITS, max_children=2, session_idle_timeout_s=0.2) as pool:
        tasked = pool.child(TASKER, launch, "s1")
        task_id = await _task(tasked, 60)
        pid = tasked.health().pid
        for control in ("s2", "s3"):  # two instances used after it go idle, one after the other
            await _plain(pool.child(TASKER, launch, control))
            await wait_until(lambda control=control: pool.get(TASKER, control) is None, within_s=10)  # type: ignore[misc]
        assert pool.get(TASKER, "s1") is tasked
        assert tasked.running and tasked.busy and tasked.health().pid == pid
        cancelled = await tasked.raw_request("tasks/cancel", {"taskId": task_id}, timeout_s=20)
        assert cancelled["status"] == "cancelled"  # the host sees the task end: idle from now
        await wait_until(lambda: pool.get(TASKER, "s1") is None, within_s=10)
        assert not tasked.running


async def test_an_instance_running_a_task_is_not_stopped_to_make_room() -> None:
    launch = _tasker_launch()
    async with ChildPool(
        CHILD_LIMITS, max_children=2, session_instances=InstanceShares(host=1, per_principal=1)
    ) as pool:
        tasked = pool.child(TASKER, launch, "s1")
        task_id = await _task(tasked, 60)
        assert tasked.busy  # the task alone: no call is in flight
        with pytest.raises(Unavailable):
            pool.child(TASKER, launch, "s2")
        assert tasked.running and pool.get(TASKER, "s1") is tasked
        # Seen ending through tasks/get (or tasks/result, tasks/list): it may make room again.
        await tasked.raw_request("tasks/cancel", {"taskId": task_id}, timeout_s=20)
        finished = await tasked.raw_request("tasks/get", {"taskId": task_id}, timeout_s=20)
        assert finished["status"] == "cancelled" and not tasked.busy
        other = pool.child(TASKER, launch, "s2")
        await _plain(other)
        assert pool.get(TASKER, "s1") is None
        await wait_until(lambda: not tasked.running)
