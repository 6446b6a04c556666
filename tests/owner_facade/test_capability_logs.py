"""A plugin author sees why their tool failed: the exception reaches the host log (type,
message, last frames; escaped, bounded, whatever the stderr rate limit dropped around it) and
the owner's `capability_logs`, with the last exit cause — never the visitor beyond what it got.
Real host, real sandboxed child (the `boom` plugin, an SDK MCPServer), real owner MCP client.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.hosting import host_settings, refusal, running_host, wait_until
from tests.owner_facade.test_door import call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]


def _logged(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [m for m in caplog.messages if m.startswith(start)]


async def test_a_tools_exception_reaches_the_host_log_and_capability_logs_but_not_the_visitor(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_host")
    async with running_host(host_settings(tmp_path, database_url, ["boom"])) as running:
        session = await running.new_session()
        async with running.client(session) as visitor:
            boom = await visitor.call_tool("boom", {"noise": 25})
            await wait_until(lambda: bool(_logged(caplog, "test.boom: exception in the child: RuntimeError")))
            crash = await visitor.call_tool("crash", {})
        await wait_until(lambda: any("exit code 3" in m for m in caplog.messages))
        await wait_until(lambda: bool(_logged(caplog, "test.boom: exception in the child: RuntimeError: crash-7")))
        async with owner_client(running) as owner:
            failed, logs = await call(owner, "capability_logs", capability="test.boom", lines=200)
            _, latest = await call(owner, "capability_logs", capability="test.boom")
            unknown = await call(owner, "capability_logs", capability="test.nope")

    # The visitor learns what it learnt before: the SDK's opaque error, and `unavailable`.
    assert boom.is_error and [getattr(c, "text", None) for c in boom.content] == ["Error executing tool boom"]
    assert crash.is_error and (refusal(crash) or {})["code"] == "unavailable"

    # The host log: the exception's type, message and last frames, though the 25 noise lines
    # and the traceback's own lines were over the stderr rate limit, and the count of those.
    (raised,) = _logged(caplog, "test.boom: exception in the child: RuntimeError: boom-42 (at ")
    frames = raised.removesuffix(")").split(" (at ")[1].split(" < ")
    assert frames[0].endswith("server.py:21 in fail") and frames[1].endswith("server.py:30 in boom")
    assert any(m.endswith(" stderr lines not logged (rate limit)") for m in _logged(caplog, "test.boom: "))
    assert "test.boom: tool 'boom' answered an error: Error executing tool boom" in caplog.messages
    (crashed,) = _logged(caplog, "test.boom: exception in the child: RuntimeError: crash-7 ")
    assert crashed.startswith("test.boom: exception in the child: RuntimeError: crash-7 \\x1b[2J (at ")
    assert all("\x1b" not in m for m in caplog.messages)

    # The owner's agent: the same lines, escaped, and why the last process ended.
    assert not failed
    # Two processes: boom is per-session (no kit), so the owner-context instance listed its
    # tools and the session's own instance ran the calls; they share one log.
    assert (logs["capability"], logs["starts"]) == ("test.boom", 2)
    assert logs["last_exit"].startswith("exited; exit code 3; last stderr: ")
    texts = {
        kind: [line["text"] for line in logs["lines"] if line["kind"] == kind] for kind in ("exception", "tool_error")
    }
    assert [text.split(" (at ")[0] for text in texts["exception"]] == [
        "RuntimeError: boom-42",
        "UnexpectedToolError: Error executing tool boom",
        "RuntimeError: crash-7 \\x1b[2J",
    ]
    assert texts["tool_error"] == ["tool 'boom' answered an error: Error executing tool boom"]
    assert logs["lines"][0]["text"] == "noise 0"
    assert "\x1b" not in json.dumps(logs)
    assert latest["lines"] == logs["lines"][-50:]  # 50 by default
    assert unknown == (
        True,
        {"code": "invalid_arguments", "message": "capability: no plugin named 'test.nope' is loaded"},
    )
