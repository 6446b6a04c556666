"""A 2026-07-28 `tools/call` answered directly (`visitor.direct_call`) answers exactly what the
SDK's `serve_one` answers, through a real host, real children and real HTTP.

Each call is sent twice to the same session: as a client sends it (the direct path), and with
one more params key that the SDK ignores and the direct path declines (so `serve_one` answers
it); the two answers are the same JSON, status included. The `test.rawish` child writes the raw
JSON it is told to, so plain answers, answers the SDK reshapes and malformed ones all meet both
ways; the host's gates (visibility, holds, quota, `_meta` caps, the SDK's own params check) refuse
on both alike.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from tests.hosting import RunningHost, host_fixture, modern_request

pytestmark = pytest.mark.anyio

host = host_fixture(
    ["rawish", "guarded", "notes"], scope="module", call_timeout_s=2.0, principal_instance_starts_per_minute=1000
)

# What makes the SDK's way answer: a params key it ignores (extra="ignore"), which the direct
# path does not know and so declines.
_SDK_WAY = {"viaServeOne": True}

_CASES: dict[str, dict[str, Any]] = {
    "plain": {"name": "plain", "arguments": {"text": "hi \u2713"}},
    "no arguments": {"name": "plain"},
    "null arguments": {"name": "plain", "arguments": None},
    "tool error": {"name": "failing", "arguments": {}},
    "structured content": {"name": "structured", "arguments": {}},
    "output schema": {"name": "schema", "arguments": {}},
    "result _meta": {"name": "own_meta", "arguments": {}},
    "forged host keys": {"name": "forged_meta", "arguments": {}},
    "null _meta values": {"name": "null_meta", "arguments": {}},
    "image content": {"name": "image", "arguments": {}},
    "coerced isError": {"name": "coerced", "arguments": {}},
    "NaN": {"name": "nan", "arguments": {}},
    "malformed content": {"name": "malformed_content", "arguments": {}},
    "malformed block": {"name": "malformed_block", "arguments": {}},
    "malformed structured content": {"name": "malformed_structured", "arguments": {}},
    "malformed isError": {"name": "malformed_is_error", "arguments": {}},
    "child protocol error": {"name": "rpc_error", "arguments": {}},
    "child times out": {"name": "hang", "arguments": {}},
    "child asks a client that cannot answer": {"name": "elicit", "arguments": {}},
    "held for the owner": {"name": "destroy", "arguments": {"what": "all"}},
    "unknown tool": {"name": "nope", "arguments": {}},
    "not visible to the session": {"name": "guarded_hello", "arguments": {}},
    "visitor _meta over its caps": {"name": "plain", "arguments": {}, "_meta": {f"k{i}": i for i in range(40)}},
    "visitor _meta kept": {"name": "plain", "arguments": {}, "_meta": {"trace": "v-1"}},
    "arguments not an object": {"name": "plain", "arguments": "text"},
    "name not a string": {"name": 5, "arguments": {}},
    "tool search name": {"name": "find_tools", "arguments": {"query": "plain"}},
}


async def _post(
    running: RunningHost, session: dict[str, Any], params: dict[str, Any], **envelope: Any
) -> tuple[int, dict[str, Any]]:
    """POST one 2026-07-28 `tools/call` with `params` (its `_meta` merged into the envelope)."""
    meta = params.get("_meta", {})
    body, headers = modern_request("tools/call", {k: v for k, v in params.items() if k != "_meta"}, 7, **meta)
    body["params"]["_meta"].update(envelope)
    if not isinstance(params.get("name"), str):
        headers.pop("Mcp-Name", None)
    headers["Authorization"] = f"Bearer {session['token']}"
    response = await running.http.post(session["mcp_url"], content=json.dumps(body), headers=headers)
    return response.status_code, response.json()


async def _both_ways(
    running: RunningHost, session: dict[str, Any], params: dict[str, Any], **envelope: Any
) -> tuple[tuple[int, dict[str, Any]], tuple[int, dict[str, Any]]]:
    direct = await _post(running, session, params, **envelope)
    sdk = await _post(running, session, {**params, **_SDK_WAY}, **envelope)
    return direct, sdk


@pytest.mark.parametrize("case", list(_CASES))
async def test_a_direct_call_answers_what_serve_one_answers(host: RunningHost, case: str) -> None:
    session = await host.new_session()
    direct, sdk = await _both_ways(host, session, _CASES[case])
    assert direct == sdk
    assert "secret internals" not in json.dumps(direct)  # a child's protocol error stays in the log


async def test_a_quota_refusal_is_the_same_both_ways(host: RunningHost) -> None:
    code, _ = await host.access.create_code(host.owner_id, "public", {"notes": {"max_notes": 1}})
    session = await host.new_session({"code": code})
    added = await _post(host, session, {"name": "note_add", "arguments": {"text": "one"}})  # a host op, granted
    assert added[1]["result"]["isError"] is False
    direct, sdk = await _both_ways(host, session, {"name": "note_add", "arguments": {"text": "two"}})
    assert direct == sdk
    assert direct[1]["result"]["_meta"]["mcp-host/error"]["code"] == "quota_exhausted"


async def test_a_crashing_child_is_answered_the_same_both_ways(host: RunningHost) -> None:
    session = await host.new_session()
    answers = []
    for extra in ({}, _SDK_WAY):
        answers.append(await _post(host, session, {"name": "crash", "arguments": {}, **extra}))
        await _until_plain_answers(host, session)
    assert answers[0] == answers[1]
    assert answers[0][1]["result"]["isError"] is True


async def _until_plain_answers(running: RunningHost, session: dict[str, Any]) -> None:
    """Wait until the child runs again after a crash (its restart may be held back a moment)."""
    with anyio.fail_after(20):
        while True:
            _, answer = await _post(running, session, {"name": "plain", "arguments": {}})
            if not answer["result"]["isError"]:
                return
            await anyio.sleep(0.1)


async def test_a_call_whose_child_asks_is_parked_and_resumed_as_before(host: RunningHost) -> None:
    session = await host.new_session()
    asking: dict[str, Any] = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    rounds = []
    for extra in ({}, _SDK_WAY):  # one call at a time: the child asks one question at a time
        first = await _post(host, session, {"name": "elicit", "arguments": {}, **extra}, **asking)
        # The next round goes the SDK's way (a requestState), whichever way the first one went.
        retry = {
            "name": "elicit",
            "arguments": {},
            "requestState": first[1]["result"].pop("requestState"),
            "inputResponses": {"input-1": {"action": "accept", "content": {}}},
        }
        rounds.append((first, await _post(host, session, retry, **asking)))
    assert rounds[0] == rounds[1]
    assert rounds[0][0][1]["result"]["resultType"] == "input_required"
    assert rounds[0][1][1]["result"]["content"] == [{"text": "accept", "type": "text"}]


async def test_a_plain_call_reaches_the_child_as_raw_json(host: RunningHost) -> None:
    """The direct path writes the child's request itself (name first); the SDK's client writes
    its model's dump (`_meta` first): the child tells which way each call came."""
    session = await host.new_session()
    direct, sdk = await _both_ways(host, session, {"name": "keys", "arguments": {}})
    assert json.loads(direct[1]["result"]["content"][0]["text"]) == ["name", "_meta", "arguments"]
    assert json.loads(sdk[1]["result"]["content"][0]["text"]) == ["_meta", "name", "arguments"]


_HANDSHAKE_CASES = [
    "plain",
    "failing",
    "structured",
    "schema",
    "own_meta",
    "forged_meta",
    "null_meta",
    "image",
    "coerced",
    "malformed_content",
    "malformed_structured",
    "destroy",
    "nope",
    "rpc_error",
]


async def test_a_2025_call_without_progress_takes_the_raw_hop_and_answers_the_same(host: RunningHost) -> None:
    """At 2025-11-25 a call with no progress asked for reaches the child as raw JSON; one with a
    progress token goes through the SDK's client, as before: the visitor's client reads the same."""

    async def ignored(progress: float, total: float | None, message: str | None) -> None:
        return None

    async with host.client(await host.new_session(), "legacy") as client:
        raw_keys = await client.call_tool("keys", {})
        sdk_keys = await client.call_tool("keys", {}, progress_callback=ignored)
        for name in _HANDSHAKE_CASES:
            raw = await client.call_tool(name, {})
            sdk = await client.call_tool(name, {}, progress_callback=ignored)
            assert raw.model_dump() == sdk.model_dump(), name
    assert [json.loads(block.text) for block in raw_keys.content if block.type == "text"] == [
        ["name", "_meta", "arguments"]
    ]
    assert [json.loads(block.text) for block in sdk_keys.content if block.type == "text"] == [
        ["_meta", "name", "arguments"]
    ]
