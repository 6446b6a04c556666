"""Pass-through: what a child sends its caller mid-call reaches the visitor's client and back.

Real host, real sandboxed `relay` child, real SDK clients over streamable HTTP, both eras:
elicitation, sampling and roots (server→client requests on 2025-11-25, input rounds on
2026-07-28), routing between concurrent visitors, progress, logging, cancellation, list
changes, content kinds, serverInfo, prompts and resources.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any, cast

import anyio
import mcp.types as types
import pytest
from mcp import MCPError
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning
from pydantic import FileUrl

from tests.hosting import host_settings, running_host

pytestmark = pytest.mark.anyio

ERAS = ["legacy", "auto"]  # auto negotiates 2026-07-28 with this host


def _settings(tmp_path: Path, database_url: str) -> Any:
    return host_settings(tmp_path, database_url, ["relay"])


def _answering(reply: str, asked: list[str]) -> Any:
    async def answer(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"reply": reply})

    return answer


async def _sampler(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    first = params.messages[0].content
    prompt = first.text if isinstance(first, types.TextContent) else ""
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=f"wrote: {prompt}"), model="test-model"
    )


@pytest.mark.parametrize("mode", ERAS)
async def test_elicitation_reaches_the_visitor_and_back(tmp_path: Path, database_url: str, mode: str) -> None:
    asked: list[str] = []
    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, mode, elicitation_callback=_answering("Tuesday", asked)) as client:
            named = await client.call_tool("ask", {"question": "Which day?"})
            plain = await client.call_tool("ask_plain", {"question": "Which hour?"})
    assert named.structured_content == {"asked": True, "action": "accept", "reply": "Tuesday"}
    assert plain.structured_content == {"action": "accept", "reply": "Tuesday"}
    assert asked == ["Which day?", "Which hour?"]


@pytest.mark.parametrize("mode", ERAS)
async def test_sampling_and_roots_reach_the_visitor_and_back(tmp_path: Path, database_url: str, mode: str) -> None:
    async def roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl("file:///visitor/work"), name="work")])

    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, mode, sampling_callback=_sampler, list_roots_callback=roots) as client:
            sampled = await client.call_tool("sample", {"prompt": "a haiku"})
            rooted = await client.call_tool("roots", {})
    assert sampled.structured_content == {"text": "wrote: a haiku", "model": "test-model"}
    assert rooted.structured_content == {"roots": ["file:///visitor/work"]}


async def test_a_plugin_cannot_flood_the_visitors_client(tmp_path: Path, database_url: str) -> None:
    sampled: list[str] = []

    async def sampler(context: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        sampled.append("asked")
        return await _sampler(context, params)

    async with running_host(host_settings(tmp_path, database_url, ["relay"], input_budget=4)) as host:
        session = await host.new_session()
        async with host.client(session, "legacy", sampling_callback=sampler) as client:
            result = await client.call_tool("sample_many", {"times": 10})
    assert result.structured_content == {"written": 4, "refusal": "a call may ask its visitor at most 4 times"}
    assert len(sampled) == 4


@pytest.mark.parametrize("mode", ERAS)
async def test_a_client_without_the_capability_gets_the_child_a_clear_error(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            named = await client.call_tool("ask", {"question": "Which day?"})
            sampled = await client.call_tool("sample", {"prompt": "a haiku"})
            # The relay still answers its other tools: nothing is stuck.
            done = await client.call_tool("progress", {"steps": 1})
    assert named.structured_content == {"asked": False}  # the kit told the tool it cannot ask
    assert sampled.structured_content == {
        "refused": "the visitor's client does not support sampling",
        "code": types.INVALID_REQUEST,
    }
    assert done.is_error is not True


async def test_concurrent_visitors_each_get_their_own_question(tmp_path: Path, database_url: str) -> None:
    asked_a: list[str] = []
    asked_b: list[str] = []
    results: dict[str, Any] = {}
    all_asked = _Gathering(6)
    async with running_host(_settings(tmp_path, database_url)) as host:
        a, b = await host.new_session(), await host.new_session()
        async with (
            host.client(a, "legacy", elicitation_callback=all_asked.hold(_answering("from A", asked_a))) as client_a,
            host.client(b, "legacy", elicitation_callback=all_asked.hold(_answering("from B", asked_b))) as client_b,
        ):

            async def run(key: str, client: Any, tool: str, **more: Any) -> None:
                results[key] = await client.call_tool(tool, {"question": f"question {key}", **more})

            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(run, f"a{i}", client_a, "ask")
                    tg.start_soon(run, f"b{i}", client_b, "ask")
            # Unnamed requests: the relay names no call for these, and (no host op) runs one
            # instance per session, so each goes to its own session's visitor
            # (test_visitors_apart.py forces the two to overlap).
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(run, "plain_a", client_a, "ask_plain"))
                tg.start_soon(functools.partial(run, "plain_b", client_b, "ask_plain"))
    for i in range(3):
        assert results[f"a{i}"].structured_content["reply"] == "from A"
        assert results[f"b{i}"].structured_content["reply"] == "from B"
    assert sorted(asked_a) == ["question a0", "question a1", "question a2", "question plain_a"]
    assert sorted(asked_b) == ["question b0", "question b1", "question b2", "question plain_b"]
    assert results["plain_a"].structured_content == {"action": "accept", "reply": "from A"}
    assert results["plain_b"].structured_content == {"action": "accept", "reply": "from B"}


class _Gathering:
    """Holds every question until `count` have been asked: all the calls of both sessions are
    then in flight together when the first is answered."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._asked = 0
        self._all_here = anyio.Event()

    def hold(self, callback: Any) -> Any:
        async def held(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
            self._asked += 1
            if self._asked >= self._count:
                self._all_here.set()
            with anyio.fail_after(20):
                await self._all_here.wait()
            result: types.ElicitResult = await callback(context, params)
            return result

        return held


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_reaches_the_visitor(tmp_path: Path, database_url: str, mode: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            result = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
    assert result.is_error is not True
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_log_messages_reach_the_visitor_at_its_level(tmp_path: Path, database_url: str) -> None:
    logged: list[tuple[str, Any]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append((params.level, params.data))

    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, "legacy", logging_callback=on_log) as client:
            with warnings.catch_warnings():  # logging/setLevel is 2025-11-25's, deprecated at 2026-07-28
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.set_logging_level("info")
            await client.call_tool("shout", {"text": "hello"})
    assert ("warning", "hello") in logged
    assert not [entry for entry in logged if entry[0] == "debug"]


async def test_log_messages_reach_a_2026_visitor_that_opted_in_on_the_call(tmp_path: Path, database_url: str) -> None:
    logged: list[tuple[str, Any]] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append((params.level, params.data))

    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, "auto", logging_callback=on_log) as client:
            assert client.protocol_version == "2026-07-28"
            await client.call_tool("shout", {"text": "silent"})  # no opt-in: nothing is sent
            await client.call_tool(
                "shout",
                {"text": "hello"},
                meta=cast(types.RequestParamsMeta, {"io.modelcontextprotocol/logLevel": "info"}),
            )
    assert logged == [("warning", "hello")]


@pytest.mark.parametrize("mode", ERAS)
async def test_cancelling_a_call_cancels_it_in_the_child(tmp_path: Path, database_url: str, mode: str) -> None:
    in_the_child = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        in_the_child.set()  # `wait` reports progress once its call has begun

    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            async with anyio.create_task_group() as tg:

                async def waiting() -> None:
                    await client.call_tool("wait", {"tag": "w1"}, progress_callback=on_progress)

                tg.start_soon(waiting)
                with anyio.fail_after(20):
                    await in_the_child.wait()
                tg.cancel_scope.cancel()
            with anyio.fail_after(10):
                while True:  # no event tells when the child has run its cancellation: ask it
                    result = await client.call_tool("cancelled", {})
                    if "w1" in str(result.structured_content):
                        break
                    await anyio.sleep(0.1)


async def test_a_tool_list_change_is_told_to_the_visitor(tmp_path: Path, database_url: str) -> None:
    heard = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.set()

    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, "legacy", message_handler=on_message) as client:
            await client.list_tools()
            await client.call_tool("grow", {"name": "grown_one"})
            with anyio.fail_after(10):
                await heard.wait()
            names = [t.name for t in (await client.list_tools()).tools]
    assert "grown_one" in names


async def test_a_tool_list_change_reaches_a_2026_listener(tmp_path: Path, database_url: str) -> None:
    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, "auto") as client:
            assert client.protocol_version == "2026-07-28"
            async with client.listen(tools_list_changed=True) as subscription:
                await client.call_tool("grow", {"name": "grown_two"})
                with anyio.fail_after(10):
                    async for event in subscription:
                        assert type(event).__name__ == "ToolsListChanged"
                        break
            names = [t.name for t in (await client.list_tools()).tools]
    assert "grown_two" in names


async def test_a_resource_update_reaches_a_subscribed_visitor(tmp_path: Path, database_url: str) -> None:
    updated: list[str] = []
    heard = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            heard.set()

    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, "legacy", message_handler=on_message) as client:
            await client.call_tool("touch", {})  # not subscribed yet: nothing is told
            with warnings.catch_warnings():  # resources/subscribe is 2025-11-25's
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.subscribe_resource("relay://note")
            await client.call_tool("touch", {})
            with anyio.fail_after(10):
                await heard.wait()
    assert updated == ["relay://note"]


async def test_a_resource_update_reaches_a_2026_listener(tmp_path: Path, database_url: str) -> None:
    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, "auto") as client:
            async with client.listen(resource_subscriptions=["relay://note"]) as subscription:
                await client.call_tool("touch", {})
                with anyio.fail_after(10):
                    async for event in subscription:
                        assert getattr(event, "uri", None) == "relay://note"
                        break


@pytest.mark.parametrize("mode", ERAS)
async def test_content_kinds_pass_unchanged_and_the_host_answers_as_itself(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            result = await client.call_tool("rich", {})
            server_info = client.server_info
    kinds = [c.type for c in result.content]
    assert kinds == ["text", "image", "audio", "resource", "resource_link"]
    image = result.content[1]
    assert isinstance(image, types.ImageContent) and image.data == "aW1n" and image.mime_type == "image/png"
    assert server_info is not None and server_info.name == "mcp-host"
    stamp = (result.meta or {}).get("io.modelcontextprotocol/serverInfo")
    assert stamp is None or stamp.get("name") == "mcp-host"


@pytest.mark.parametrize("mode", ERAS)
async def test_prompts_and_resources_of_visible_children(tmp_path: Path, database_url: str, mode: str) -> None:
    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, mode) as client:
            prompts = [p.name for p in (await client.list_prompts()).prompts]
            prompt = await client.get_prompt("relay_greeting", {"name": "Ada"})
            resources = [str(r.uri) for r in (await client.list_resources()).resources]
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            note = await client.read_resource("relay://note")
            item = await client.read_resource("relay://items/7")
            with pytest.raises(MCPError):
                await client.read_resource("relay://nowhere")
            with pytest.raises(MCPError):
                await client.get_prompt("no_such_prompt", {})
    assert prompts == ["relay_greeting"]
    first = prompt.messages[0].content
    assert isinstance(first, types.TextContent) and first.text == "Hello, Ada!"
    assert resources == ["relay://note"]
    assert templates == ["relay://items/{item}"]
    assert isinstance(note.contents[0], types.TextResourceContents) and note.contents[0].text == "a note"
    assert isinstance(item.contents[0], types.TextResourceContents) and item.contents[0].text == "item 7"


async def test_a_session_that_cannot_see_a_child_gets_none_of_its_prompts_or_resources(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        async with host.client(session, "legacy") as client:
            assert (await client.list_prompts()).prompts == []
            assert (await client.list_resources()).resources == []
            with pytest.raises(MCPError):
                await client.read_resource("relay://note")


async def test_prompts_and_resources_follow_the_same_gate_as_tools(tmp_path: Path, database_url: str) -> None:
    """List and get agree (docs/security.md E2): once the session's code is revoked, its prompts and
    resources go with its tools, and reading by a known URI or name is refused too."""
    async with running_host(_settings(tmp_path, database_url)) as host:
        access, owner = host.access, host.owner_id
        await access.put_role(owner, "plain", [])
        code, _ = await access.create_code(owner, "plain")
        session = await host.new_session({"code": code})
        async with host.client(session, "legacy") as client:
            before = [p.name for p in (await client.list_prompts()).prompts]
            assert (await client.read_resource("relay://note")).contents
            await access.revoke_code(owner, code)
            prompts = (await client.list_prompts()).prompts
            resources = (await client.list_resources()).resources
            with pytest.raises(MCPError):
                await client.read_resource("relay://note")
            with pytest.raises(MCPError):
                await client.get_prompt("relay_greeting", {"name": "Ada"})
    assert before == ["relay_greeting"]
    assert prompts == [] and resources == []


@pytest.mark.parametrize("mode", ERAS)
async def test_a_visitors_answer_cannot_speak_for_the_host_to_the_child(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    forged = {"mcp-host/session": {"owner_id": "x"}, "mcp\u2010host/grant": "g", "MCP-Host/call": "c", "note": "kept"}

    async def roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=FileUrl("file:///visitor/work"))], _meta=forged)

    async with running_host(_settings(tmp_path, database_url)) as host:
        session = await host.new_session()
        async with host.client(session, mode, list_roots_callback=roots) as client:
            seen = await client.call_tool("roots_meta", {})
    assert seen.structured_content == {"keys": ["note"]}
