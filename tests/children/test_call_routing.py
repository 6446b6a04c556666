"""A call's answer waits for the log messages its child sent before it: the SDK hands each
notification to a task of its own, so without the wait an answer could overtake them (and on
2025-11-25 the call's stream closes with its answer, losing them)."""

from __future__ import annotations

import anyio
import mcp.types as types
import pytest

from mcp_host.children.call_routing import CallRouter
from mcp_host.wire import InputRequest, InputResponse

pytestmark = pytest.mark.anyio


class _SlowLogClient:
    """A visitor's client whose log delivery takes until `release` is set."""

    session_key = "A"

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.seen: list[str] = []

    async def request(self, request: InputRequest, *, timeout_s: float) -> InputResponse:
        raise AssertionError("not asked")

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        await self.release.wait()
        self.seen.append(str(params.data))


async def test_the_answer_waits_until_earlier_log_messages_are_passed_on() -> None:
    router = CallRouter("p", request_timeout_s=5, session_id="A")  # a per-session child of session A
    client = _SlowLogClient()
    order: list[str] = []
    with router.serving(client) as call:
        async with anyio.create_task_group() as tg:
            # As the SDK does: each log message read before the answer gets a task of its own.
            for n in range(3):
                tg.start_soon(router.log, types.LoggingMessageNotificationParams(level="info", data=f"log {n}"))

            async def answer() -> None:
                await call.logs_passed(within_s=10)
                order.append("answer")

            tg.start_soon(answer)
            await anyio.wait_all_tasks_blocked()
            assert order == []  # the answer is held while the log messages are in delivery
            client.release.set()
    assert client.seen == ["log 0", "log 1", "log 2"] and order == ["answer"]


async def test_the_wait_is_bounded_and_free_without_log_messages() -> None:
    router = CallRouter("p", request_timeout_s=5, session_id="A")  # a per-session child of session A
    client = _SlowLogClient()
    with router.serving(client) as call:
        with anyio.fail_after(1):
            await call.logs_passed(within_s=10)  # nothing in delivery: no wait
        async with anyio.create_task_group() as tg:
            tg.start_soon(router.log, types.LoggingMessageNotificationParams(level="info", data="stuck"))
            await anyio.wait_all_tasks_blocked()
            started = anyio.current_time()
            await call.logs_passed(within_s=0.2)  # a visitor that never takes it costs the bound
            assert 0.2 <= anyio.current_time() - started < 2
            client.release.set()


@pytest.mark.parametrize(
    ("kind", "said", "level"),
    [
        ({}, "must name the call it is about", "INFO"),
        ({"owner_context": True}, "reaches no visitor from the owner's instance of a per-session plugin", "INFO"),
        ({"session_id": "A"}, "must be sent while serving a call of this session", "INFO"),
    ],
)
async def test_a_request_at_start_is_refused_saying_why_for_each_kind_of_child(
    kind: dict[str, object], said: str, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Servers ask for roots as they start (server-filesystem, server-everything): no call is in
    # flight, so nobody is asked; routine, logged at INFO, and the child learns why.
    caplog.set_level("INFO", logger="mcp_host")
    router = CallRouter("p", request_timeout_s=5, **kind)  # type: ignore[arg-type]

    answer = await router.list_roots(None)  # type: ignore[arg-type]

    assert isinstance(answer, types.ErrorData) and said in answer.message
    assert [r.levelname for r in caplog.records if "belongs to no call in flight" in r.message] == [level]


async def test_a_request_naming_no_call_while_others_are_in_flight_is_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    router = CallRouter("p", request_timeout_s=5)  # a shared child
    with router.serving(_SlowLogClient()):
        answer = await router.list_roots(None)  # type: ignore[arg-type]

    assert isinstance(answer, types.ErrorData)
    assert [r.levelname for r in caplog.records if "belongs to no call in flight" in r.message] == ["WARNING"]
