"""server-everything (session-unaware, TypeScript SDK 1.x) behind the host, two visitors at
once in each era: sampling, elicitation, roots, progress and logging go to the visitor whose
call asked and to no one else; resources, prompts and completion pass through.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Coroutine
from typing import Any, cast

import anyio
import mcp.types as types
import pytest
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import FileUrl

from tests.ecosystem.support import ERA_VERSION, ERAS, Ecosystem, python_visitor, text_of

pytestmark = pytest.mark.anyio


class Together:
    """Holds each of `count` client callbacks until all have been called: every visitor's
    call is then in flight on the host at once when the first is answered."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._arrived = 0
        self._all_here = anyio.Event()

    async def arrive(self) -> None:
        self._arrived += 1
        if self._arrived >= self._count:
            self._all_here.set()
        with anyio.fail_after(30):
            await self._all_here.wait()


async def both(a: Callable[[], Coroutine[Any, Any, None]], b: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(a)
        tg.start_soon(b)


@pytest.mark.parametrize("mode", ERAS)
async def test_each_visitors_sampling_request_goes_to_that_visitors_client(eco: Ecosystem, mode: str) -> None:
    asked: dict[str, list[str]] = {"A": [], "B": []}
    answers: dict[str, str] = {}
    together = Together(2)

    def sampler(who: str) -> Any:
        async def sample(context: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
            first = params.messages[0].content
            asked[who].append(first.text if isinstance(first, types.TextContent) else repr(first))
            await together.arrive()
            return types.CreateMessageResult(
                role="assistant", content=types.TextContent(type="text", text=f"{who} wrote this"), model=f"model-{who}"
            )

        return sample

    async def visit(who: str) -> None:
        async with python_visitor(eco, mode, sampling_callback=sampler(who)) as client:
            assert client.protocol_version == ERA_VERSION[mode]
            result = await client.call_tool("trigger-sampling-request", {"prompt": f"prompt of {who}", "maxTokens": 20})
            answers[who] = text_of(result)

    await both(lambda: visit("A"), lambda: visit("B"))

    assert asked == {
        "A": ["Resource trigger-sampling-request context: prompt of A"],
        "B": ["Resource trigger-sampling-request context: prompt of B"],
    }
    assert "model-A" in answers["A"] and "A wrote this" in answers["A"] and "model-B" not in answers["A"]
    assert "model-B" in answers["B"] and "B wrote this" in answers["B"] and "model-A" not in answers["B"]


@pytest.mark.parametrize("mode", ERAS)
async def test_each_visitors_elicitation_goes_to_that_visitors_client(eco: Ecosystem, mode: str) -> None:
    asked: dict[str, int] = {"A": 0, "B": 0}
    answers: dict[str, str] = {}
    together = Together(2)

    def answering(who: str, name: str) -> Any:
        async def answer(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked[who] += 1
            await together.arrive()
            return types.ElicitResult(action="accept", content={"name": name, "check": True})

        return answer

    async def visit(who: str, name: str) -> None:
        async with python_visitor(eco, mode, elicitation_callback=answering(who, name)) as client:
            answers[who] = text_of(await client.call_tool("trigger-elicitation-request", {}))

    await both(lambda: visit("A", "Ada Lovelace"), lambda: visit("B", "Bob Kahn"))

    assert asked == {"A": 1, "B": 1}
    assert "- Name: Ada Lovelace" in answers["A"] and "Bob Kahn" not in answers["A"]
    assert "- Name: Bob Kahn" in answers["B"] and "Ada Lovelace" not in answers["B"]
    assert "- Agreed to terms: true" in answers["A"]


@pytest.mark.parametrize("mode", ERAS)
async def test_each_visitors_roots_reach_only_that_visitors_server(eco: Ecosystem, mode: str) -> None:
    roots = {
        "A": [types.Root(uri=FileUrl("file:///visitor-a/project"), name="a-project")],
        "B": [
            types.Root(uri=FileUrl("file:///visitor-b/one"), name="b-one"),
            types.Root(uri=FileUrl("file:///visitor-b/two"), name="b-two"),
        ],
    }
    asked: dict[str, int] = {"A": 0, "B": 0}
    answers: dict[str, str] = {}

    def rooted(who: str) -> Any:
        async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
            asked[who] += 1
            return types.ListRootsResult(roots=roots[who])

        return list_roots

    async def visit(who: str) -> None:
        async with python_visitor(eco, mode, list_roots_callback=rooted(who)) as client:
            answers[who] = text_of(await client.call_tool("get-roots-list", {}))

    await both(lambda: visit("A"), lambda: visit("B"))

    assert asked["A"] >= 1 and asked["B"] >= 1  # each client was asked for its own roots
    assert "Current MCP Roots (1 total)" in answers["A"] and "URI: file:///visitor-a/project" in answers["A"]
    assert "Current MCP Roots (2 total)" in answers["B"]
    assert "URI: file:///visitor-b/one" in answers["B"] and "URI: file:///visitor-b/two" in answers["B"]
    assert "visitor-b" not in answers["A"] and "visitor-a" not in answers["B"]


@pytest.mark.parametrize("mode", ERAS)
async def test_each_visitors_progress_reaches_that_visitor(eco: Ecosystem, mode: str) -> None:
    seen: dict[str, list[tuple[float, float | None]]] = {"A": [], "B": []}

    def on_progress(who: str) -> Any:
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            seen[who].append((progress, total))

        return progress

    async def visit(who: str, steps: int) -> None:
        async with python_visitor(eco, mode) as client:
            result = await client.call_tool(
                "trigger-long-running-operation", {"duration": 0.6, "steps": steps}, progress_callback=on_progress(who)
            )
            assert f"Steps: {steps}." in text_of(result)

    await both(lambda: visit("A", 3), lambda: visit("B", 2))

    assert seen == {"A": [(1, 3), (2, 3), (3, 3)], "B": [(1, 2), (2, 2)]}


SIMULATED = "-level message"  # what every simulated log line of server-everything says


@pytest.mark.parametrize("mode", ERAS)
async def test_one_visitors_log_messages_never_reach_another_visitor_with_a_call_in_flight(
    eco: Ecosystem, mode: str
) -> None:
    logged: dict[str, list[str]] = {"A": [], "B": []}
    b_in_flight = anyio.Event()
    a_done = anyio.Event()
    opt_in = cast(types.RequestParamsMeta, {"io.modelcontextprotocol/logLevel": "debug"}) if mode == "auto" else None

    def on_log(who: str) -> Any:
        async def log(params: types.LoggingMessageNotificationParams) -> None:
            logged[who].append(str(params.data))

        return log

    async def start_logging(client: Any) -> None:
        if mode == "legacy":
            with warnings.catch_warnings():  # logging/setLevel is 2025-11-25's, deprecated at 2026-07-28
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.set_logging_level("debug")

    async def visit_a() -> None:
        async with python_visitor(eco, mode, logging_callback=on_log("A")) as client:
            await start_logging(client)
            with anyio.fail_after(30):
                await b_in_flight.wait()
            started = await client.call_tool("toggle-simulated-logging", {}, meta=opt_in)
            assert "Started simulated" in text_of(started)
            # The server logs every 5 s for A from now on; B's call stays in flight meanwhile.
            await anyio.sleep(6)
            stopped = await client.call_tool("toggle-simulated-logging", {}, meta=opt_in)
            assert "Stopped simulated" in text_of(stopped)
            a_done.set()

    async def visit_b() -> None:
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            b_in_flight.set()

        async with python_visitor(eco, mode, logging_callback=on_log("B")) as client:
            await start_logging(client)
            await client.call_tool(
                "trigger-long-running-operation",
                {"duration": 8, "steps": 8},
                progress_callback=progress,
                meta=opt_in,
            )
            with anyio.fail_after(30):
                await a_done.wait()

    await both(visit_a, visit_b)

    assert [line for line in logged["A"] if SIMULATED in line or "level-message" in line]  # A got its own
    assert [line for line in logged["B"] if SIMULATED in line or "level-message" in line] == []


@pytest.mark.parametrize("mode", ERAS)
async def test_resources_prompts_and_completion_pass_through_for_two_visitors(eco: Ecosystem, mode: str) -> None:
    seen: dict[str, dict[str, Any]] = {}

    async def visit(who: str, resource_id: int, city: str, department: str) -> None:
        async with python_visitor(eco, mode) as client:
            resources = [str(r.uri) for r in (await client.list_resources()).resources]
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            text = await client.read_resource(f"demo://resource/dynamic/text/{resource_id}")
            instructions = await client.read_resource("demo://resource/static/document/instructions.md")
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            prompt = await client.get_prompt("args-prompt", {"city": city})
            departments = await client.complete(
                types.PromptReference(type="ref/prompt", name="completable-prompt"),
                {"name": "department", "value": department[:3]},
            )
            members = await client.complete(
                types.PromptReference(type="ref/prompt", name="completable-prompt"),
                {"name": "name", "value": ""},
                context_arguments={"department": department},
            )
            seen[who] = {
                "resources": resources,
                "templates": templates,
                "text": text.contents[0],
                "instructions": instructions.contents[0],
                "prompts": prompts,
                "prompt": prompt.messages[0].content,
                "departments": departments.completion.values,
                "members": members.completion.values,
            }

    await both(lambda: visit("A", 7, "Oslo", "Engineering"), lambda: visit("B", 9, "Lima", "Sales"))

    for who, resource_id, city, department, members in [
        ("A", 7, "Oslo", "Engineering", ["Alice", "Bob", "Charlie"]),
        ("B", 9, "Lima", "Sales", ["David", "Eve", "Frank"]),
    ]:
        got = seen[who]
        assert "demo://resource/static/document/instructions.md" in got["resources"]
        assert {"demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/blob/{resourceId}"} <= set(
            got["templates"]
        )
        assert isinstance(got["text"], types.TextResourceContents)
        assert got["text"].text.startswith(f"Resource {resource_id}: This is a plaintext resource")
        assert isinstance(got["instructions"], types.TextResourceContents) and got["instructions"].text.strip()
        assert {"simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"} <= set(got["prompts"])
        assert isinstance(got["prompt"], types.TextContent) and got["prompt"].text == f"What's weather in {city}?"
        assert got["departments"] == [department]
        assert got["members"] == members
