"""The owner's rules through real hosts: the README's examples, a rule that errors (refused and
audited), rule order, `rules_set` refusing an invalid expression by its position, an owner-context
call held by a rule, and rules that survive a restart and are seen by a second host on the same
database."""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from owner_facade import OWNER_PATH
from tests.hosting import RunningHost, host_settings, running_host
from tests.owner_facade.test_door import call, owner_token
from tests.policy.test_rules import HOLD_PUBLIC_MAIL, MENTIONS_A_URL, OFFICE_HOURS, TWENTY_AN_HOUR
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

HELD, DENIED, INVALID_ARGUMENTS = "held", "denied", "invalid_arguments"

SHARED_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()  # MCP_HOST_SECRET_KEY of hosts sharing a database
HOLD_ID = re.compile(r"h_[0-9a-f]{16}")
REFUSED = "the owner's rules refuse this call"


@asynccontextmanager
async def _host(
    tmp_path: Path, database_url: str, name: str = "a", plugins: tuple[str, ...] = ("echo",)
) -> AsyncIterator[RunningHost]:
    """A host with only the plugins a test calls (each visitor list starts them all), slow starts
    allowed for (the suite runs on a loaded machine)."""
    settings = host_settings(
        tmp_path / name, database_url, list(plugins), secret_key=SHARED_KEY, child_start_timeout_s=30.0
    )
    async with running_host(settings) as running:
        yield running


@asynccontextmanager
async def _owner(running: RunningHost, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token or owner_token(running)}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        async with Client(streamable_http_client(f"{running.url}{OWNER_PATH}", http_client=http), cache=None) as client:
            yield client


async def _set(owner: Client, *rules: dict[str, Any]) -> dict[str, Any]:
    failed, answer = await call(owner, "rules_set", rules=list(rules))
    assert not failed, answer
    return answer


async def _code_session(running: RunningHost, owner: Client) -> dict[str, Any]:
    failed, code = await call(owner, "code_create", role="public")
    assert not failed, code
    return await running.new_session({"code": code["code"]})


async def _visit(client: Client, tool: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    result = await client.call_tool(tool, arguments)
    return bool(result.is_error), dict(result.structured_content or {})


def _held(answer: tuple[bool, dict[str, Any]]) -> str:
    failed, content = answer
    assert failed and content["code"] == HELD, content
    found = HOLD_ID.search(content["message"])
    assert found is not None
    return found.group(0)


def _zone(inside: bool) -> str:
    """An IANA zone where it is now inside 09:00–19:00 (`inside`), or inside 21:00–06:00:
    clear of the 08:00 and 20:00 edges while the test runs."""
    now = datetime.now(UTC)
    for offset in range(-12, 15):
        hour = (now + timedelta(hours=offset)).hour
        if (9 <= hour < 19) if inside else (hour >= 21 or hour < 6):
            return f"Etc/GMT{-offset:+d}" if offset else "UTC"  # Etc/GMT+N is N hours behind UTC
    raise AssertionError("no zone fits")


async def test_readme_hold_for_public_sessions(tmp_path: Path, database_url: str) -> None:
    rule = HOLD_PUBLIC_MAIL.replace("mail.send", "test.vault").replace("send_email", "peek")
    async with _host(tmp_path, database_url, plugins=("vault",)) as running, _owner(running) as owner:
        await _set(owner, {"name": "public peeks wait", "when": rule, "effect": "hold"})
        public = await running.new_session()
        coded = await _code_session(running, owner)
        async with running.client(public) as visitor, running.client(coded) as member:
            hold = _held(await _visit(visitor, "peek", target="x"))
            before = await _visit(visitor, "calls")
            failed, _ = await call(owner, "hold_decide", id=hold, approve=True)
            assert not failed
            approved = await _visit(visitor, "peek", target="x")
            again = _held(await _visit(visitor, "peek", target="x"))  # the approval is used once
            member_peek = await _visit(member, "peek", target="x")
    assert before == (False, {"wipe": 0, "peek": 0})
    assert approved == (False, {"peeked": "x"})
    assert again != hold
    assert member_peek == (False, {"peeked": "x"})


async def test_readme_refuse_outside_office_hours(tmp_path: Path, database_url: str) -> None:
    async with _host(tmp_path, database_url) as running, _owner(running) as owner:
        await _set(owner, {"when": OFFICE_HOURS, "effect": "refuse", "reason": "calls are taken 08:00-20:00"})
        session = await running.new_session()
        async with running.client(session) as visitor:
            answers = []
            for inside in (True, False):
                failed, _ = await call(owner, "owner_profile_set", timezone=_zone(inside))
                assert not failed
                answers.append(await _visit(visitor, "echo", text="hi"))
    assert answers[0] == (False, {"text": "hi"})
    assert answers[1] == (True, {"code": DENIED, "message": "calls are taken 08:00-20:00"})


async def test_readme_at_most_20_calls_an_hour_per_access_code(tmp_path: Path, database_url: str) -> None:
    """Exact under concurrency: 25 calls at once on one code, 20 go through."""
    async with _host(tmp_path, database_url) as running, _owner(running) as owner:
        await _set(owner, {"when": TWENTY_AN_HOUR, "effect": "refuse", "reason": "at most 20 calls an hour"})
        first, second = await _code_session(running, owner), await _code_session(running, owner)
        public = await running.new_session()
        answers: list[tuple[bool, dict[str, Any]]] = []
        async with running.client(first) as visitor:

            async def one(n: int) -> None:
                answers.append(await _visit(visitor, "echo", text=str(n)))

            async with anyio.create_task_group() as tg:
                for n in range(25):
                    tg.start_soon(one, n)
            later = await _visit(visitor, "echo", text="later")
        async with running.client(second) as other, running.client(public) as anyone:
            others = await _visit(other, "echo", text="mine")
            publics = [await _visit(anyone, "echo", text="p") for _ in range(3)]
    assert sum(1 for failed, _ in answers if not failed) == 20
    assert [c for failed, c in answers if failed] == [{"code": DENIED, "message": "at most 20 calls an hour"}] * 5
    assert later[0] and later[1]["code"] == DENIED
    assert others == (False, {"text": "mine"})
    assert publics == [(False, {"text": "p"})] * 3


async def test_readme_hold_any_call_whose_arguments_mention_a_url(tmp_path: Path, database_url: str) -> None:
    async with _host(tmp_path, database_url) as running, _owner(running) as owner:
        await _set(owner, {"name": "links wait", "when": MENTIONS_A_URL, "effect": "hold"})
        session = await running.new_session()
        async with running.client(session) as visitor:
            plain = await _visit(visitor, "echo", text="no link")
            hold = _held(await _visit(visitor, "echo", text="see http://example.org/x"))
            _, pending = await call(owner, "holds_list")
    assert plain == (False, {"text": "no link"})
    assert [(h["id"], h["capability"], h["tool"], h["arguments"]) for h in pending["holds"]] == [
        (hold, "test.echo", "echo", {"text": "see http://example.org/x"})
    ]


async def test_a_rule_that_errors_refuses_the_call_and_is_audited(tmp_path: Path, database_url: str) -> None:
    async with _host(tmp_path, database_url, plugins=("vault",)) as running, _owner(running) as owner:
        await _set(
            owner,
            {"when": "tool == 'calls'", "effect": "allow"},
            {"name": "big counts", "when": "arguments.count > 3", "effect": "refuse"},
        )
        session = await running.new_session()
        async with running.client(session) as visitor:
            answer = await _visit(visitor, "peek", target="x")
            calls = await _visit(visitor, "calls")
        _, trail = await call(owner, "audit_list")
    assert answer == (True, {"code": DENIED, "message": REFUSED})
    assert calls == (False, {"wipe": 0, "peek": 0})  # the child was never called
    [row] = [e for e in trail["entries"] if e["tool"] == "rule_error"]
    assert row["outcome"] == "refused"
    assert row["arguments"]["position"] == 2
    assert row["arguments"]["capability"] == "test.vault" and row["arguments"]["tool"] == "peek"
    assert "count" in row["arguments"]["why"]


async def test_the_first_matching_rule_wins_and_allow_lifts_the_default_hold(tmp_path: Path, database_url: str) -> None:
    async with _host(tmp_path, database_url, plugins=("vault",)) as running, _owner(running) as owner:
        session = await running.new_session()
        async with running.client(session) as visitor:
            default = _held(await _visit(visitor, "wipe", target="a"))  # no rules: today's default
            await _set(
                owner,
                {"when": "tool == 'wipe'", "effect": "allow"},
                {"when": "capability == 'test.vault'", "effect": "refuse", "reason": "not the vault"},
            )
            wiped = await _visit(visitor, "wipe", target="a")
            peeked = await _visit(visitor, "peek", target="a")
            await _set(
                owner,
                {"when": "capability == 'test.vault'", "effect": "refuse", "reason": "not the vault"},
                {"when": "tool == 'wipe'", "effect": "allow"},
            )
            reversed_ = await _visit(visitor, "wipe", target="a")
    assert default.startswith("h_")
    assert wiped == (False, {"wiped": "a"})
    assert peeked == (True, {"code": DENIED, "message": "not the vault"})
    assert reversed_ == (True, {"code": DENIED, "message": "not the vault"})


async def test_rules_set_refuses_an_invalid_expression_naming_its_position(tmp_path: Path, database_url: str) -> None:
    async with _host(tmp_path, database_url) as running, _owner(running) as owner:
        kept = await _set(owner, {"name": "ok", "when": "tool == 'echo'", "effect": "allow"})
        refused = await call(
            owner,
            "rules_set",
            rules=[
                {"when": "true", "effect": "allow"},
                {"when": "true", "effect": "allow"},
                {"name": "typo", "when": "sesion.mode == 'public'", "effect": "hold"},
            ],
        )
        _, after = await call(owner, "rules_get")
    assert kept == {"version": 1, "rules": [{"name": "ok", "when": "tool == 'echo'", "effect": "allow"}]}
    assert refused == (
        True,
        {"code": INVALID_ARGUMENTS, "message": "rule 3 ('typo'): at 1:7: undeclared reference to 'sesion.mode'"},
    )
    assert after == kept


async def test_an_owner_context_call_can_be_held_by_a_rule(tmp_path: Path, database_url: str) -> None:
    async with _host(tmp_path, database_url, plugins=("owned",)) as running, _owner(running) as owner:
        await _set(owner, {"when": "session.kind == 'owner' && tool == 'owned.purge'", "effect": "hold"})
        held = await call(owner, "capability_invoke", capability="test.owned", tool="owned.purge")
        hold = _held(held)
        failed, _ = await call(owner, "hold_decide", id=hold, approve=True)
        assert not failed
        ran = await owner.call_tool("capability_invoke", {"capability": "test.owned", "tool": "owned.purge"})
        again = await call(owner, "capability_invoke", capability="test.owned", tool="owned.purge")
    assert not ran.is_error, ran
    assert _held(again) != hold


async def test_rules_survive_a_restart_and_are_seen_by_a_second_host(tmp_path: Path, database_url: str) -> None:
    refuse_echo = {"when": "tool == 'echo'", "effect": "refuse", "reason": "no echo"}
    async with _host(tmp_path, database_url, "a") as first, _owner(first) as owner:
        token = owner_token(first)
        session = await first.new_session()
        async with running_twice(tmp_path, database_url) as second, _owner(second, token) as owner_b:
            async with second.client(await second.new_session()) as on_b, first.client(session) as on_a:
                before = await _visit(on_b, "echo", text="x")  # B has cached "no rules"
                await _set(owner, refuse_echo)  # set on A ...
                refused = (True, {"code": DENIED, "message": "no echo"})
                seen = await _once_noticed(on_b, refused, text="x")  # ... refused on B once told
                await _set(owner_b, {"when": "false", "effect": "refuse"})  # set on B ...
                back = await _once_noticed(on_a, (False, {"text": "y"}), text="y")  # ... seen on A
        await _set(owner, refuse_echo)
    async with _host(tmp_path, database_url, "a") as restarted, _owner(restarted) as owner:
        _, kept = await call(owner, "rules_get")
        async with restarted.client(await restarted.new_session()) as visitor:
            after = await _visit(visitor, "echo", text="z")
    assert before == (False, {"text": "x"})
    assert seen == (True, {"code": DENIED, "message": "no echo"})
    assert back == (False, {"text": "y"})
    assert kept == {"version": 3, "rules": [refuse_echo]}
    assert after == (True, {"code": DENIED, "message": "no echo"})


async def _once_noticed(
    client: Client, wanted: tuple[bool, dict[str, Any]], within_s: float = 15.0, **arguments: Any
) -> tuple[bool, dict[str, Any]]:
    """`echo` called until it answers `wanted` (or `within_s` passed): the last answer. Another
    replica's set reaches this one's cached rule state with its notice, a moment after the set."""
    deadline = anyio.current_time() + within_s
    while True:
        answer = await _visit(client, "echo", **arguments)
        if answer == wanted or anyio.current_time() > deadline:
            return answer
        await anyio.sleep(0.05)


@asynccontextmanager
async def running_twice(tmp_path: Path, database_url: str) -> AsyncIterator[RunningHost]:
    """A second host on the same database (its own data directory)."""
    async with _host(tmp_path, database_url, "b") as second:
        yield second
