"""The owner's rules without a host: checked when set (position and reason), first match wins,
a rule that cannot be evaluated fails, `now` in the owner's timezone, and the README's examples
over the variables a real call gives them (tests/policy/test_rules_host.py runs them in a host)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import mcp.types as types
import pytest

from mcp_host.access.sessions import RoleSnapshot, Session, Subject, Visitor
from mcp_host.errors import InvalidArguments
from mcp_host.policy.rules import MAX_RULES, RuleFailed, check_rules, evaluate, owner_call, the_time, visitor_call

# The README's examples ("The owner's rules"), word for word.
HOLD_PUBLIC_MAIL = "session.mode == 'public' && capability == 'mail.send' && tool == 'send_email'"
OFFICE_HOURS = "now.hour < 8 || now.hour >= 20"
TWENTY_AN_HOUR = "session.mode == 'code' && recent.hour[capability] >= 20"
MENTIONS_A_URL = "text(arguments).matches('https?://')"


def _session(mode: str = "public", subject: Subject | None = None) -> Session:
    return Session(
        id="0" * 32,
        owner_id="o_1",
        mode=mode,  # type: ignore[arg-type]
        subject=subject,
        visitor=Visitor(name="Ada", email="ada@example.org"),
        role=RoleSnapshot(id="public", capabilities=(), config={}),
        created_at=datetime.now(UTC),
    )


def _data(
    *,
    mode: str = "public",
    capability: str = "mail.send",
    tool: str = "send_email",
    arguments: dict[str, Any] | None = None,
    hour: int = 12,
    recent: int = 0,
) -> dict[str, Any]:
    subject = Subject(kind="code", id="c_1") if mode == "code" else None
    facts = visitor_call(_session(mode, subject), capability, types.Tool(name=tool, input_schema={}), arguments)
    return {
        "capability": facts.capability,
        "tool": facts.tool,
        "annotations": facts.annotations,
        "arguments": facts.arguments,
        "session": facts.session,
        "grant": None,
        "now": the_time("UTC", datetime(2026, 3, 2, hour, 30, tzinfo=UTC)),
        "recent": {"minute": {capability: 0}, "hour": {capability: recent}},
    }


def _effect(when: str, data: dict[str, Any]) -> str | None:
    _, compiled = check_rules([{"when": when, "effect": "hold"}])
    return evaluate(compiled, data).effect


def test_the_readme_examples_match_what_they_say() -> None:
    assert _effect(HOLD_PUBLIC_MAIL, _data()) == "hold"
    assert _effect(HOLD_PUBLIC_MAIL, _data(mode="code")) is None
    assert _effect(HOLD_PUBLIC_MAIL, _data(tool="other")) is None
    assert [_effect(OFFICE_HOURS, _data(hour=h)) for h in (7, 8, 19, 20, 23)] == ["hold", None, None, "hold", "hold"]
    assert _effect(TWENTY_AN_HOUR, _data(mode="code", recent=19)) is None
    assert _effect(TWENTY_AN_HOUR, _data(mode="code", recent=20)) == "hold"
    assert _effect(TWENTY_AN_HOUR, _data(mode="public", recent=50)) is None
    assert _effect(MENTIONS_A_URL, _data(arguments={"body": {"lines": ["see https://example.org"]}})) == "hold"
    assert _effect(MENTIONS_A_URL, _data(arguments={"body": "no link here"})) is None


def test_the_first_matching_rule_decides() -> None:
    rules = [
        {"when": "tool == 'a'", "effect": "refuse"},
        {"when": "true", "effect": "allow"},
        {"when": "true", "effect": "hold"},
    ]
    _, compiled = check_rules(rules)
    assert evaluate(compiled, _data(tool="a")).position == 1
    verdict = evaluate(compiled, _data(tool="b"))
    assert (verdict.effect, verdict.position) == ("allow", 2)
    _, none = check_rules([{"when": "false", "effect": "refuse"}])
    assert evaluate(none, _data()).effect is None


def test_a_rule_that_cannot_be_evaluated_fails_with_its_position() -> None:
    _, compiled = check_rules(
        [{"when": "tool == 'x'", "effect": "allow"}, {"when": "arguments.count > 3", "effect": "allow"}]
    )
    with pytest.raises(RuleFailed) as failed:
        evaluate(compiled, _data(arguments={"other": 1}))
    assert failed.value.position == 2
    assert "count" in failed.value.why
    _, dyn = check_rules([{"when": "arguments.flag", "effect": "allow"}])  # gives a string here, not a bool
    with pytest.raises(RuleFailed, match="not a bool"):
        evaluate(dyn, _data(arguments={"flag": "yes"}))


def test_evaluation_is_bounded() -> None:
    """A condition whose work grows with the arguments stops at the runtime's iteration budget."""
    _, compiled = check_rules([{"when": "arguments.l.all(a, arguments.l.exists(b, b == a))", "effect": "allow"}])
    with pytest.raises(RuleFailed, match="budget"):
        evaluate(compiled, _data(arguments={"l": list(range(3000))}))


@pytest.mark.parametrize(
    ("when", "reason"),
    [
        ("nope == 1", "rule 2 ('second'): at 1:1: undeclared reference to 'nope'"),
        ("capability ==", "rule 2 ('second'): at 1:14: Syntax error"),
        ("capability", "rule 2 ('second'): the condition gives string, not a bool"),
        ("capability == 1", "rule 2 ('second'): at 1:12: found no matching overload for '_==_'"),
    ],
)
def test_an_invalid_rule_is_refused_naming_its_position(when: str, reason: str) -> None:
    with pytest.raises(InvalidArguments) as refused:
        check_rules([{"when": "true", "effect": "allow"}, {"name": "second", "when": when, "effect": "refuse"}])
    assert refused.value.message.startswith(reason), refused.value.message


def test_a_malformed_rule_or_too_many_are_refused() -> None:
    with pytest.raises(InvalidArguments, match=r"^rule 1: effect: Input should be 'allow', 'refuse' or 'hold'"):
        check_rules([{"when": "true", "effect": "block"}])
    with pytest.raises(InvalidArguments, match=f"at most {MAX_RULES} rules"):
        check_rules([{"when": "true", "effect": "allow"}] * (MAX_RULES + 1))


def test_now_is_in_the_owners_timezone_else_utc() -> None:
    at = datetime(2026, 7, 1, 22, 5, tzinfo=UTC)
    assert the_time("Asia/Tokyo", at) | {"unix": 0} == {
        "hour": 7,
        "minute": 5,
        "weekday": 4,
        "date": "2026-07-02",
        "time": "07:05",
        "timezone": "Asia/Tokyo",
        "unix": 0,
    }
    assert the_time(None, at)["hour"] == 22
    assert the_time("Not/AZone", at)["timezone"] == "UTC"


def test_what_a_call_shows_the_rules() -> None:
    tool = types.Tool(name="wipe", input_schema={}, annotations=types.ToolAnnotations(destructive_hint=True))
    subject = Subject(kind="code", id="c_7")
    facts = visitor_call(_session("code", subject), "test.vault", tool, {"target": "x"})
    assert facts.session == {
        "kind": "visitor",
        "id": "0" * 32,
        "mode": "code",
        "subject": "c_7",
        "subject_kind": "code",
        "role": "public",
        "visitor": {"name": "Ada", "email": "ada@example.org"},
    }
    assert (facts.annotations, facts.destructive, facts.subject) == ({"destructiveHint": True}, True, "code:c_7")
    owner = owner_call("o_1", "test.owned", "owned.purge", None)
    assert (owner.session["kind"], owner.subject, owner.hold_session, owner.destructive) == (
        "owner",
        "owner",
        "owner",
        False,
    )
