"""MCP Apps rendered in Chromium by an app host built from the extension's own SDK, connected to a
visitor session of a real host (issue 30's proof).

The host page (tests/apps/app_host_page.py, tests/apps/js/app_host.mjs) is the ext-apps SDK's
host side (`AppBridge` over `PostMessageTransport`, @modelcontextprotocol/ext-apps 2.0.4) with
the TypeScript SDK client, bundled by scripts/install-apps. It lists the session's tools, reads
the `ui://` app a tool names, makes the model's call of that tool, renders the app in
`<iframe sandbox="allow-scripts">` and forwards the app's own `tools/call`s through its client,
so the host gates them as any visitor call. A browser cannot reach the visitor endpoint from
another origin (it has no CORS, on purpose) and real app hosts keep the session's token in
their backend: the test serves the page from a small Starlette app on loopback that relays the
page's same-origin `/mcp` to the visitor session, adding the session's bearer token on the
server side.

Apps: the ext-apps `system-monitor` example (polls its app-only tool), the test plugin's board
(calls its app-only `move_piece`; held while pending review, not approved or changed since) and
calendar.book's slot picker booking into a real calendar (Radicale on loopback).

Screenshots of each rendered app go to `$MCP_HOST_ARTIFACTS/apps/` (default .artifacts/apps/).
Skipped, with the reason, without Chromium, bubblewrap, Node or scripts/install-apps.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mcp.types import CallToolResult

from tests.app.test_host_metrics import scrape
from tests.apps.app_host_page import (
    app_calls,
    app_host_page,
    app_text_once,
    blocked_in_app,
    in_app,
    missing_app_host,
    open_app,
    screenshot,
)
from tests.apps.support import FIXTURE, JS, SYSTEM_MONITOR, missing_example
from tests.capabilities.test_calendar_book import _connect, _events, _monday, _visitor
from tests.hosting import BUILTINS, RunningHost, host_settings, refusal, running_host
from tests.owner_console.browser import Browser, needs_chromium
from tests.owner_facade.test_door import call, owner_client
from tests.peers import Radicale, running_radicale
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap, needs_chromium]

SANDBOX_HOSTNAME = "mcp-sandbox"  # what bwrap names the host of every sandboxed child
MONITOR = "eco.system_monitor"
BOARD = "test.apps"
UNKNOWN_MOVE = "no tool named 'move_piece' is available in this session"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    reason = missing_app_host()
    if reason is not None:
        pytest.skip(reason)
    with Browser.window() as window:
        yield window


@pytest.fixture
async def blank(browser: Browser) -> AsyncIterator[Browser]:
    """The browser, left on a blank page after the test (no stream of the page stays open)."""
    try:
        yield browser
    finally:
        await browser.get("about:blank")


def board_plugin(tmp_path: Path) -> Path:
    """The `apps` test plugin, copied, serving the board app that calls `move_piece`."""
    folder = tmp_path / "apps"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "board.html"))
    shutil.copy(JS / "board_app.html", folder / "board.html")
    return folder


async def visitor_calls(running: RunningHost, capability: str, tool: str, outcome: str = "ok") -> float:
    """How many calls of `tool` the host's visitor door answered with `outcome` (its metrics)."""
    samples = await scrape(running, running.owner_token())
    labels = {"door": "visitor", "capability": capability, "tool": tool, "outcome": outcome}
    return samples.get(("mcp_host_tool_call_duration_seconds_count", frozenset(labels.items())), 0.0)


async def approve(running: RunningHost, tool: str) -> None:
    """The owner reviews what is pending (the plugin's tools, seen at its start) and approves the
    board plugin's `tool` as it is live now."""
    async with owner_client(running) as door:
        await call(door, "tools_pending")
        failed, answer = await call(door, "tool_approve", capability=BOARD, tool=tool)
    assert not failed, answer


async def test_the_ext_apps_example_renders_and_its_app_calls_its_tool_through_the_host(
    tmp_path: Path, database_url: str, blank: Browser
) -> None:
    reason = missing_example()
    if reason is not None:
        pytest.skip(reason)
    settings = host_settings(tmp_path, database_url, [str(SYSTEM_MONITOR)])
    async with running_host(settings) as running:
        session = await running.new_session()
        async with app_host_page(session) as page:
            record = await open_app(blank, page, "get-system-info")
            hostname = await app_text_once(blank, "#info-hostname", bool)
            polled = await app_calls(blank, 2)  # it polls by itself, every few seconds
            memory = await app_text_once(blank, "#memory-percent", lambda t: t.endswith("%"))
            shot = await screenshot(blank, "system-monitor")
            counted = await visitor_calls(running, MONITOR, "poll-system-stats")
        instances = running.session_instances(MONITOR)

    assert record["state"] == "rendered", record
    assert record["uri"] == "ui://system-monitor/mcp-app.html"
    assert record["appInfo"] == {"name": "System Monitor", "version": "1.0.0"}
    assert "connect-src 'none'" in record["csp"]  # it declares no network, and draws without any
    assert hostname == SANDBOX_HOSTNAME  # the model's call ran in the host's sandboxed child
    assert [c["name"] for c in polled] == ["poll-system-stats"] * len(polled)
    assert all("error" not in c and not c["result"].get("isError") for c in polled), polled
    stats = polled[-1]["result"]["structuredContent"]
    assert set(stats) >= {"cpu", "memory", "uptime"}
    assert memory == f"{round(stats['memory']['usedPercent'])}%", (memory, stats["memory"])
    assert counted >= len(polled)  # the host's visitor door answered each, through its gates
    assert [i.session_id for i in instances] == [session["session_id"]]  # the child serving this session
    assert shot.stat().st_size > 10_000


async def test_the_board_app_calls_its_app_only_tool_through_the_host(
    tmp_path: Path, database_url: str, blank: Browser
) -> None:
    settings = host_settings(tmp_path, database_url, [str(board_plugin(tmp_path))])
    async with running_host(settings) as running:
        session = await running.new_session()
        async with app_host_page(session) as page:
            record = await open_app(blank, page, "show_board")
            shown = await app_text_once(blank, "#shown", lambda t: "model" in t)
            await in_app(blank, "#move", click=True)
            moved = await app_text_once(blank, "#moved", lambda t: t != "moving")
            calls = await app_calls(blank, 1)
            declared = await blocked_in_app(blank, "https://api.example.com/moves")
            undeclared = await blocked_in_app(blank, "https://evil.example/steal")
            await screenshot(blank, "board")
            counted = await visitor_calls(running, BOARD, "move_piece")

    assert record["state"] == "rendered" and record["uri"] == "ui://board/app.html", record
    assert record["appInfo"] == {"name": "board", "version": "1"}
    assert shown == "the model's call: the board is shown"
    assert moved == "moved to e4"
    assert [(c["name"], c["arguments"], c["result"]["content"]) for c in calls] == [
        ("move_piece", {"square": "e4"}, [{"type": "text", "text": "moved to e4"}])
    ]
    assert counted == 1
    # The page runs the app under its declared csp: its connectDomains only.
    assert "connect-src https://api.example.com;" in record["csp"] and record["csp"].startswith("default-src 'none'")
    assert (declared, undeclared) == ("", "connect-src")


async def test_a_tool_the_app_calls_is_held_until_the_owner_approves_it(
    tmp_path: Path, database_url: str, blank: Browser
) -> None:
    settings = host_settings(tmp_path, database_url, [str(board_plugin(tmp_path))], pin_tools=True)
    async with running_host(settings) as running:
        await approve(running, "show_board")  # the app, not move_piece
        session = await running.new_session()
        async with app_host_page(session) as page:
            record = await open_app(blank, page, "show_board")
            await in_app(blank, "#move", click=True)
            held = await app_text_once(blank, "#moved", lambda t: t != "moving")
            await screenshot(blank, "board-held")
            refused = await visitor_calls(running, "", "", "unknown")
            await approve(running, "move_piece")
            await in_app(blank, "#move", click=True)
            approved = await app_text_once(blank, "#moved", lambda t: t != "moving")
            await screenshot(blank, "board-approved")
            calls = await app_calls(blank, 2)

    assert record["state"] == "rendered", record
    assert held == f"refused: unknown: {UNKNOWN_MOVE}"  # the app shows the host's refusal
    assert refused == 1  # the host refused it ("not allowed" looks like "not there")
    assert approved == "moved to e4"
    assert [c["name"] for c in calls] == ["move_piece", "move_piece"]
    assert refusal(CallToolResult.model_validate(calls[0]["result"])) == {"code": "unknown", "message": UNKNOWN_MOVE}
    assert calls[1]["result"]["content"] == [{"type": "text", "text": "moved to e4"}]


async def test_a_tool_the_app_calls_that_changed_after_approval_is_held(
    tmp_path: Path, database_url: str, blank: Browser
) -> None:
    folder = board_plugin(tmp_path)
    settings = host_settings(tmp_path, database_url, [str(folder)], pin_tools=True)
    async with running_host(settings) as running:
        await approve(running, "show_board")
        await approve(running, "move_piece")
        session = await running.new_session()
        async with app_host_page(session) as page:
            await open_app(blank, page, "show_board")
            await in_app(blank, "#move", click=True)
            first = await app_text_once(blank, "#moved", lambda t: t != "moving")
            server = folder / "server.py"
            server.write_text(server.read_text().replace("Move a chess piece", "Move any piece anywhere"))
            running.stop_children(BOARD)  # its next start serves the changed definition
            await in_app(blank, "#move", click=True)
            changed = await app_text_once(blank, "#moved", lambda t: t not in ("moving", first))
            await screenshot(blank, "board-changed")
            async with owner_client(running) as door:
                _, review = await call(door, "tools_pending")

    assert first == "moved to e4"
    assert changed == f"refused: unknown: {UNKNOWN_MOVE}"
    (pending,) = [p for p in review["pending"] if p["tool"] == "move_piece"]
    assert pending["approved"]["description"] == "Move a chess piece on the board to a square."
    assert pending["live"]["description"] == "Move any piece anywhere on the board to a square."


@pytest.fixture(scope="module")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Radicale]:
    with running_radicale(tmp_path_factory.mktemp("radicale")) as server:
        yield server


async def test_the_booking_app_books_the_slot_the_visitor_picks_into_the_owners_calendar(
    tmp_path: Path, database_url: str, blank: Browser, radicale: Radicale
) -> None:
    # Pins on: builtins are approved with their apps when the host first sees them.
    settings = host_settings(
        tmp_path, database_url, [], builtin_dir=BUILTINS, child_start_timeout_s=60.0, pin_tools=True
    )
    async with running_host(settings) as running:
        calendar = await _connect(running, radicale)
        session = await _visitor(running)
        async with app_host_page(session) as page:
            record = await open_app(blank, page, "calendar_list_slots", {"date_from": _monday().isoformat(), "days": 1})
            start = await in_app(blank, "button.slot", click=True, attribute="data-start")
            await in_app(blank, "#name", fill="Grace Hopper")
            await in_app(blank, "#email", fill="grace@example.org")
            await in_app(blank, "#topic", fill="Compilers")
            await in_app(blank, "#book", click=True)
            status = await app_text_once(blank, "#status", lambda t: "Booked" in t)
            await screenshot(blank, "booking")
            calls = await app_calls(blank, 1)
        events = _events(radicale, calendar)

    assert record["state"] == "rendered" and record["uri"] == "ui://calendar.book/slot-picker.html", record
    assert "connect-src 'none'" in record["csp"]  # it books with no network of its own
    booker = {"start": start, "name": "Grace Hopper", "email": "grace@example.org", "topic": "Compilers"}
    assert [(c["name"], c["arguments"]) for c in calls] == [("calendar_book", booker)]  # the slots: the model's
    assert calls[0]["result"]["structuredContent"]["booking"]["start"] == start
    assert start in status
    in_utc = datetime.fromisoformat(start).astimezone(UTC).isoformat()
    assert events == [("Meeting with Grace Hopper: Compilers", in_utc)]
