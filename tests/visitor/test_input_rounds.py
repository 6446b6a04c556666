"""Input rounds (2026-07-28) and call routing, as logic: parking, binding, single use, expiry.

The end-to-end rounds through a real host and SDK client are in test_passthrough.py; here the
forwarded call is a coroutine that asks its client, so every refusal can be driven exactly.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import anyio
import mcp.types as types
import pytest

from mcp_host.children.call_routing import CALL_KEY, CallRouter
from mcp_host.errors import InvalidArguments, Unavailable
from mcp_host.visitor.input_rounds import InputRounds
from mcp_host.wire.visitor_client import ClientLacks, InputRequest, InputResponse

pytestmark = pytest.mark.anyio

CAN_ELICIT = types.ClientCapabilities(elicitation=types.ElicitationCapability())
QUESTION = types.ElicitRequest(
    params=types.ElicitRequestFormParams(
        message="Which day?", requested_schema={"type": "object", "properties": {"day": {"type": "string"}}}
    )
)


def _params(state: str | None = None, responses: dict[str, Any] | None = None, **arguments: Any) -> Any:
    return types.CallToolRequestParams(
        name="book", arguments=arguments or {"slot": 1}, request_state=state, input_responses=responses
    )


class _Asked(Protocol):
    """A visitor's client as a forwarded call sees it: a `RoundsClient`, or one that can be asked nothing."""

    async def request(self, request: InputRequest, *, timeout_s: float) -> InputResponse: ...


async def _asking(client: _Asked) -> types.CallToolResult:
    answer = await client.request(QUESTION, timeout_s=30)
    assert isinstance(answer, types.ElicitResult)
    day = (answer.content or {}).get("day")
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"booked {day}")])


def _accept(day: str) -> dict[str, Any]:
    return {"input-1": types.ElicitResult(action="accept", content={"day": day})}


async def test_a_call_that_asks_is_parked_and_resumed_with_the_answer() -> None:
    async with anyio.create_task_group() as tg:
        rounds = InputRounds(tg, timeout_s=30)
        first = await rounds.call("s1", CAN_ELICIT, _params(), _asking)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests == {"input-1": QUESTION}
        assert first.request_state and rounds.parked_count() == 1
        done = await rounds.call("s1", CAN_ELICIT, _params(first.request_state, _accept("Tuesday")), _asking)
        assert isinstance(done, types.CallToolResult)
        assert done.content[0].text == "booked Tuesday"  # type: ignore[union-attr]
        assert rounds.parked_count() == 0


@pytest.mark.parametrize(
    "retry",
    [
        pytest.param({"session": "s2"}, id="another-session"),
        pytest.param({"arguments": {"slot": 2}}, id="other-arguments"),
        pytest.param({"state": "made-up"}, id="unknown-state"),
        pytest.param({"state": "x" * 5000}, id="huge-state"),
    ],
)
async def test_a_state_is_bound_to_its_session_tool_and_arguments(retry: dict[str, Any]) -> None:
    async with anyio.create_task_group() as tg:
        rounds = InputRounds(tg, timeout_s=30)
        first = await rounds.call("s1", CAN_ELICIT, _params(), _asking)
        assert isinstance(first, types.InputRequiredResult)
        state = retry.get("state", first.request_state)
        params = _params(state, _accept("Monday"), **retry.get("arguments", {"slot": 1}))
        with pytest.raises(InvalidArguments):
            await rounds.call(retry.get("session", "s1"), CAN_ELICIT, params, _asking)
        # The rightful visitor can still finish its call.
        done = await rounds.call("s1", CAN_ELICIT, _params(first.request_state, _accept("Friday")), _asking)
        assert isinstance(done, types.CallToolResult)


async def test_a_state_is_used_once() -> None:
    async with anyio.create_task_group() as tg:
        rounds = InputRounds(tg, timeout_s=30)
        first = await rounds.call("s1", CAN_ELICIT, _params(), _asking)
        assert isinstance(first, types.InputRequiredResult)
        await rounds.call("s1", CAN_ELICIT, _params(first.request_state, _accept("Monday")), _asking)
        with pytest.raises(InvalidArguments):
            await rounds.call("s1", CAN_ELICIT, _params(first.request_state, _accept("Monday")), _asking)


async def test_a_parked_call_expires_and_is_cancelled() -> None:
    cancelled = anyio.Event()

    async def asking_until_cancelled(client: _Asked) -> types.CallToolResult:
        try:
            return await _asking(client)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise

    async with anyio.create_task_group() as tg:
        rounds = InputRounds(tg, timeout_s=0.2)
        first = await rounds.call("s1", CAN_ELICIT, _params(), asking_until_cancelled)
        expired_by = time.monotonic() + 0.2  # no earlier than the deadline the call was parked with
        assert isinstance(first, types.InputRequiredResult)
        # Time passing is what this test is about; the loop because a timer may fire a hair early.
        with anyio.fail_after(5):
            while (left := expired_by - time.monotonic()) > 0:  # noqa: ASYNC110 - no event but the clock
                await anyio.sleep(left)
        with pytest.raises(InvalidArguments):  # the sweep on the next call drops it
            await rounds.call("s1", CAN_ELICIT, _params(first.request_state, _accept("Monday")), _asking)
        with anyio.fail_after(5):
            await cancelled.wait()
        assert rounds.parked_count() == 0


async def test_a_client_without_elicitation_gets_the_child_an_error_not_a_round() -> None:
    async def asking(client: _Asked) -> types.CallToolResult:
        with pytest.raises(ClientLacks):
            await client.request(QUESTION, timeout_s=30)
        return types.CallToolResult(content=[])

    async with anyio.create_task_group() as tg:
        result = await InputRounds(tg, timeout_s=30).call("s1", types.ClientCapabilities(), _params(), asking)
    assert isinstance(result, types.CallToolResult)


# -- call routing ---------------------------------------------------------------------------


class _Client:
    def __init__(self, session_key: str) -> None:
        self.session_key = session_key
        self.asked: list[str] = []

    async def request(self, request: InputRequest, *, timeout_s: float) -> InputResponse:
        self.asked.append(request.method)
        return types.ElicitResult(action="decline")

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.asked.append("log")


async def test_an_unnamed_request_of_a_per_session_child_goes_to_its_session() -> None:
    router = CallRouter("p", request_timeout_s=5, session_id="A")  # session A's own instance
    a = _Client("A")
    with router.serving(a), router.serving(a):
        answer = await router.elicit(None, QUESTION.params)  # type: ignore[arg-type]
    assert isinstance(answer, types.ElicitResult)
    assert a.asked == ["elicitation/create"]


async def test_an_unnamed_request_of_a_shared_child_goes_to_nobody_even_with_one_session_calling() -> None:
    router = CallRouter("p", request_timeout_s=5)
    a = _Client("A")
    with router.serving(a):
        answer = await router.elicit(None, QUESTION.params)  # type: ignore[arg-type]
        await router.log(types.LoggingMessageNotificationParams(level="info", data="x"))
    assert isinstance(answer, types.ErrorData)
    assert "mcp-host/call" in answer.message and "per_session" in answer.message
    assert a.asked == []


async def test_an_unnamed_request_with_two_sessions_calling_goes_to_nobody() -> None:
    router = CallRouter("p", request_timeout_s=5)
    a, b = _Client("A"), _Client("B")
    with router.serving(a), router.serving(b):
        answer = await router.elicit(None, QUESTION.params)  # type: ignore[arg-type]
        await router.log(types.LoggingMessageNotificationParams(level="info", data="x"))
    assert isinstance(answer, types.ErrorData)
    assert a.asked == [] and b.asked == []


async def test_a_named_request_goes_to_its_call_only() -> None:
    router = CallRouter("p", request_timeout_s=5)
    a, b = _Client("A"), _Client("B")
    with router.serving(a), router.serving(b) as call_b:
        params = QUESTION.params.model_copy(update={"meta": {CALL_KEY: call_b.id}})
        assert isinstance(await router.elicit(None, params), types.ElicitResult)  # type: ignore[arg-type]
        forged = QUESTION.params.model_copy(update={"meta": {CALL_KEY: "not-a-call"}})
        assert isinstance(await router.elicit(None, forged), types.ErrorData)  # type: ignore[arg-type]
    assert a.asked == [] and b.asked == ["elicitation/create"]
    # After the calls ended, nobody is asked.
    assert isinstance(await router.elicit(None, QUESTION.params), types.ErrorData)  # type: ignore[arg-type]


async def test_one_session_cannot_park_more_than_its_share() -> None:
    async with anyio.create_task_group() as tg:
        rounds = InputRounds(tg, timeout_s=30, max_per_session=2)
        for _ in range(2):
            assert isinstance(await rounds.call("greedy", CAN_ELICIT, _params(), _asking), types.InputRequiredResult)
        with pytest.raises(Unavailable):
            await rounds.call("greedy", CAN_ELICIT, _params(), _asking)
        # Another visitor still gets its round.
        assert isinstance(await rounds.call("other", CAN_ELICIT, _params(), _asking), types.InputRequiredResult)
        assert rounds.parked_count() == 3
        rounds.close()
        assert rounds.parked_count() == 0


async def test_a_call_may_ask_its_visitor_only_so_often() -> None:
    router = CallRouter("p", request_timeout_s=5, budget=3, session_id="A")
    a = _Client("A")
    with router.serving(a):
        answers = [await router.elicit(None, QUESTION.params) for _ in range(5)]  # type: ignore[arg-type]
    with router.serving(a):  # a new call has a budget of its own
        again = await router.elicit(None, QUESTION.params)  # type: ignore[arg-type]
    assert [type(x).__name__ for x in answers] == ["ElicitResult"] * 3 + ["ErrorData"] * 2
    assert isinstance(again, types.ElicitResult)
    assert a.asked == ["elicitation/create"] * 4


async def test_a_call_of_a_client_that_can_answer_nothing_runs_inline() -> None:
    caller = anyio.get_current_task().id
    ran_in: list[int] = []

    async def forward(client: Any) -> types.CallToolResult:
        ran_in.append(anyio.get_current_task().id)
        if len(ran_in) == 1:  # the inline client refuses at once
            with pytest.raises(ClientLacks):
                await client.request(QUESTION, timeout_s=30)
        return types.CallToolResult(content=[])

    async with anyio.create_task_group() as tg:
        rounds = InputRounds(tg, timeout_s=30)
        inline = await rounds.call("s1", types.ClientCapabilities(), _params(), forward)
        detached = await rounds.call("s1", CAN_ELICIT, _params(), forward)
    assert isinstance(inline, types.CallToolResult) and isinstance(detached, types.CallToolResult)
    assert ran_in[0] == caller  # no task, nothing to park: the hop costs ~0.6 ms over HTTP
    assert ran_in[1] != caller
