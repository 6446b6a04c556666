"""The owner's rules: an ordered list of CEL conditions, each with an effect — allow, refuse or
hold — checked for every visitor call and owner-context call before it reaches a child
(docs/design.md "Rules", "The call path as a pipeline").

Above: `visitor.door` and `owner.calls` (each asks `RuleGate.admit` once the call's tool is
known), the owner door (`rules_get`, `rules_set`). Below: `store.RuleStore` (the rules and the
counts of recent calls), `holds` (a `hold` is the existing hold: the owner decides, the approval
is bound to the call and used once), `audit` (a rule that fails to evaluate is written there,
with its position), and the CEL runtime `cel_expr_python` (the CEL team's C++ implementation:
type-checked at compile time, an iteration budget bounding every evaluation, no side effects;
README "Dependencies and why").

Checked when set: every `when` must compile against the variables below and give a bool; a
rule that does not is refused, naming its position (1-based) and the compiler's reason. A
rule set is compiled once per version and replica; each call asks the store for the version
(with the owner's timezone): from memory while the store hears the rules' change notices
(`listen`, started with the host), read otherwise. A set is seen by the next call on this
replica, and on the others once its notice arrives. An owner with no rules pays neither CEL nor
the clock: today's default decides.

The variables a condition reads: `capability` and `tool` (strings), `annotations` (the tool's
live MCP annotations, `destructiveHint` …; empty for an owner tool), `arguments` (the call's),
`session` (`kind`: visitor | owner | node, `mode`: public | code | api_key | owner, `subject`:
the code's or key's id, null for a public session, `subject_kind`, `role`, `id`, `visitor`:
`{name, email}` as the visitor gave them), `grant` (null; for a node's call its node grant
`{id, note, capabilities}`), `now` (in the owner's timezone, UTC when unset: `hour`, `minute`,
`weekday` 1 = Monday … 7, `date` YYYY-MM-DD, `time` HH:MM, `timezone`, `unix` seconds) and `recent` (`recent.minute` and
`recent.hour`: this subject's admitted calls by capability; the call's own capability is always
a key). One function: `text(arguments)`, the value as canonical JSON (to search nested values).

First match wins: `allow` lets the call go on (a destructive tool too); `refuse` answers
`denied` with the rule's reason; `hold` parks it for the owner. No match: today's default, a
visitor's (or node's) call to a destructive tool is held, anything else goes on. A rule that fails to
evaluate (a missing key, a wrong type, the budget spent) refuses the call: fail closed, logged
and audited (`rule_error`, with the rule's position); the caller learns only that it is refused.

Counts: when a rule reads `recent`, the count, the evaluation and the record of an admitted call
happen under the subject's lock (`RuleStore.counting`), so "at most 20 an hour" holds exactly
across replicas. A subject is the access code or API key, a public session itself, or the
owner. Calls are recorded only while some rule reads `recent`.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import anyio
import mcp.types as types
from cel_expr_python import cel
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_host.errors import Denied, InternalError, InvalidArguments

from .audit import summarize
from .holds import needs_hold

if TYPE_CHECKING:
    from mcp_host.access import Session
    from mcp_host.store import RuleStore

    from .audit import AuditLog
    from .holds import HoldBook

__all__ = [
    "MAX_RULES",
    "CallFacts",
    "Rule",
    "RuleFailed",
    "RuleGate",
    "Verdict",
    "check_rules",
    "evaluate",
    "owner_call",
    "the_time",
    "visitor_call",
]

logger = logging.getLogger(__name__)

Effect = Literal["allow", "refuse", "hold"]
CallKind = Literal["visitor", "owner", "node"]
MAX_RULES = 100
_MAX_WHEN = 2000
_DIAGNOSTIC = re.compile(r"ERROR: <input>:(\d+:\d+): ([^\n]*)")
_CONTAINER = " (in container '')"
_READS_COUNTS = re.compile(r"\brecent\b")
_REFUSED = "the owner's rules refuse this call"


class Rule(BaseModel):
    """One rule as the owner writes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(default=None, min_length=1, max_length=64)
    when: str = Field(min_length=1, max_length=_MAX_WHEN)
    effect: Effect
    reason: str | None = Field(default=None, min_length=1, max_length=200)


def _text(value: Any) -> str:
    """`text(x)`: `x` as canonical JSON (sorted keys, no whitespace), so a condition can search
    the nested values of the arguments."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


@functools.cache
def _env() -> Any:
    t = cel.Type
    fields = t.Map(t.STRING, t.DYN)
    return cel.NewEnv(
        variables={
            "capability": t.STRING,
            "tool": t.STRING,
            "annotations": fields,
            "arguments": fields,
            "session": fields,
            "grant": t.DYN,
            "now": fields,
            "recent": t.Map(t.STRING, t.Map(t.STRING, t.INT)),
        },
        functions=[
            cel.FunctionDecl(
                "text",
                [
                    cel.Overload("text_map", t.STRING, [fields], impl=_text),
                    cel.Overload("text_list", t.STRING, [t.List(t.DYN)], impl=_text),
                ],
            )
        ],
    )


@dataclass(frozen=True)
class _Compiled:
    position: int
    rule: Rule
    expression: Any


@dataclass(frozen=True)
class _RuleSet:
    version: int
    rules: tuple[_Compiled, ...]
    counts: bool
    broken: bool = False


def _reason(exc: Exception) -> str:
    """The compiler's diagnostics about the owner's expression (where, what), not its raw text."""
    found = [f"at {where}: {what.replace(_CONTAINER, '')[:200]}" for where, what in _DIAGNOSTIC.findall(str(exc))]
    return "; ".join(found[:3]) or "the expression does not compile"


def _named(position: int, rule: Rule | Mapping[str, Any]) -> str:
    name = rule.name if isinstance(rule, Rule) else rule.get("name")
    return f"rule {position}" + (f" ({str(name)[:64]!r})" if name else "")


def check_rules(rules: Sequence[Rule | Mapping[str, Any]]) -> tuple[list[Rule], tuple[_Compiled, ...]]:
    """The rules, validated and compiled; raises `InvalidArguments` naming the first invalid
    rule's position (1-based) and why."""
    if len(rules) > MAX_RULES:
        raise InvalidArguments(f"at most {MAX_RULES} rules; {len(rules)} given")
    checked: list[Rule] = []
    compiled: list[_Compiled] = []
    for position, given in enumerate(rules, start=1):
        try:
            rule = given if isinstance(given, Rule) else Rule.model_validate(given)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'rule'}: {e['msg']}" for e in exc.errors()[:3])
            raise InvalidArguments(f"{_named(position, given)}: {problems}") from None
        try:
            expression = _env().compile(rule.when)
        except RuntimeError as exc:
            raise InvalidArguments(f"{_named(position, rule)}: {_reason(exc)}") from None
        gives = expression.return_type()
        if gives != cel.Type.BOOL and gives != cel.Type.DYN:
            raise InvalidArguments(f"{_named(position, rule)}: the condition gives {gives.name().lower()}, not a bool")
        checked.append(rule)
        compiled.append(_Compiled(position, rule, expression))
    return checked, tuple(compiled)


def _ruleset(version: int, rules: Sequence[Rule | Mapping[str, Any]]) -> _RuleSet:
    try:
        _, compiled = check_rules(rules)
    except InvalidArguments as exc:  # stored rules that no longer compile: every call refused
        logger.error("the owner's rules (version %d) do not compile; every call is refused: %s", version, exc)
        return _RuleSet(version, (), counts=False, broken=True)
    return _RuleSet(version, compiled, counts=any(_READS_COUNTS.search(c.rule.when) for c in compiled))


@dataclass(frozen=True)
class CallFacts:
    """What a call's rules see, and who it is for."""

    owner_id: str
    kind: CallKind
    capability: str
    tool: str
    annotations: dict[str, Any]
    arguments: dict[str, Any]
    session: dict[str, Any]
    hold_session: str
    """The session a hold is bound to (`owner` for an owner-context call)."""
    subject: str
    """Whose recent calls are counted: `code:<id>`, `api_key:<id>`, `session:<id>` or `owner`."""
    destructive: bool = False
    """A visitor's call that today's default holds (`holds.needs_hold`)."""
    grant: dict[str, Any] | None = None


def visitor_call(session: Session, capability: str, tool: types.Tool, arguments: Mapping[str, Any] | None) -> CallFacts:
    subject = session.subject
    hints = tool.annotations.model_dump(by_alias=True, exclude_none=True, mode="json") if tool.annotations else {}
    visitor = session.visitor
    return CallFacts(
        owner_id=session.owner_id,
        kind="visitor",
        capability=capability,
        tool=tool.name,
        annotations=hints,
        arguments=dict(arguments or {}),
        session={
            "kind": "visitor",
            "id": session.id,
            "mode": session.mode,
            "subject": None if subject is None else subject.id,
            "subject_kind": None if subject is None else subject.kind,
            "role": session.role.id,
            "visitor": {
                "name": None if visitor is None else visitor.name,
                "email": None if visitor is None else visitor.email,
            },
        },
        hold_session=session.id,
        subject=f"session:{session.id}" if subject is None else f"{subject.kind}:{subject.id}",
        destructive=needs_hold(tool),
    )


def owner_call(owner_id: str, capability: str, tool: str, arguments: Mapping[str, Any] | None) -> CallFacts:
    """An owner-context call (`capability_invoke`): never held by default."""
    return CallFacts(
        owner_id=owner_id,
        kind="owner",
        capability=capability,
        tool=tool,
        annotations={},
        arguments=dict(arguments or {}),
        session={
            "kind": "owner",
            "id": None,
            "mode": "owner",
            "subject": owner_id,
            "subject_kind": "owner",
            "role": "owner",
            "visitor": {"name": None, "email": None},
        },
        hold_session="owner",
        subject="owner",
    )


def the_time(timezone: str | None, at: datetime | None = None) -> dict[str, Any]:
    """`now` as the rules see it: in the owner's timezone (UTC when unset or unknown here)."""
    try:
        zone = ZoneInfo(timezone) if timezone else UTC
    except (ZoneInfoNotFoundError, ValueError):
        zone = UTC
    local = (at or datetime.now(UTC)).astimezone(zone)
    return {
        "hour": local.hour,
        "minute": local.minute,
        "weekday": local.isoweekday(),
        "date": local.date().isoformat(),
        "time": local.strftime("%H:%M"),
        "timezone": str(zone),
        "unix": int(local.timestamp()),
    }


class RuleFailed(InternalError):
    """A rule could not be evaluated; `position` is 1-based. Never shown to a caller: the gate
    refuses the call (fail closed) and logs `why`."""

    def __init__(self, position: int, why: str) -> None:
        super().__init__(why)
        self.position = position
        self.why = why


@dataclass(frozen=True)
class Verdict:
    """The first rule that matched, or none (`effect` None: today's default)."""

    effect: Effect | None = None
    position: int | None = None
    rule: Rule | None = None


def evaluate(rules: Sequence[_Compiled], data: Mapping[str, Any]) -> Verdict:
    """The first rule of `rules` whose condition is true over `data`; raises `RuleFailed` for
    the first one that cannot be evaluated (before it, none matched)."""
    if not rules:
        return Verdict()
    try:
        activation = _env().Activation(dict(data))
    except Exception:  # a value CEL cannot hold: no rule can be evaluated
        raise RuleFailed(rules[0].position, "the call's values cannot be given to the rules") from None
    for compiled in rules:
        try:
            value = compiled.expression.eval(activation)
            kind = value.type()
            result = value.value()
        except Exception as exc:  # the runtime's own refusal (the iteration budget, a bad value)
            raise RuleFailed(compiled.position, _runtime_reason(exc)) from None
        if kind == cel.Type.BOOL:
            if result is True:
                return Verdict(compiled.rule.effect, compiled.position, compiled.rule)
            continue
        if kind == cel.Type.ERROR:
            raise RuleFailed(compiled.position, str(result)[:200])
        raise RuleFailed(compiled.position, f"the condition gave {kind.name().lower()}, not a bool")
    return Verdict()


def _runtime_reason(exc: Exception) -> str:
    text = str(exc)
    for known in ("Iteration budget exceeded", "Non-CEL value type"):
        if known in text:
            return known.lower()
    return "the runtime could not evaluate the condition"


class RuleGate:
    """The owner's rules in a call's path: one method, `admit`, after the tool is known and
    before the child is called. Also what `rules_get` and `rules_set` use."""

    def __init__(
        self, store: RuleStore, holds: HoldBook | None, audit: AuditLog | None, *, hold_destructive: bool = True
    ) -> None:
        """`holds`: where a held call waits (None: a `hold` refuses); `hold_destructive`: today's
        default for a visitor's call to a destructive tool when no rule matches."""
        self._store = store
        self._holds = holds
        self._audit = audit
        self._hold_destructive = hold_destructive
        self._sets: dict[str, _RuleSet] = {}

    async def listen(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Hear the rules' change notices until `stop_listening` (`store.RuleStore.listen`): the
        rule-set version and timezone are read per call only while this is not listening."""
        await self._store.listen(task_status=task_status)

    def stop_listening(self) -> None:
        self._store.stop()

    async def get(self, owner_id: str) -> tuple[int, list[Rule]]:
        """The owner's rules as set, and their version (0: never set)."""
        version, rules = await self._store.load(owner_id)
        return version, [Rule.model_validate(r) for r in rules]

    async def set(self, owner_id: str, rules: Sequence[Rule | Mapping[str, Any]]) -> int:
        """Check, store and use `rules` (replacing the owner's); the new version. Raises
        `InvalidArguments` naming the first invalid rule's position and why; nothing changes."""
        checked, _ = check_rules(rules)
        stored = [r.model_dump(exclude_none=True) for r in checked]
        version = await self._store.put(owner_id, stored)
        self._sets[owner_id] = _ruleset(version, checked)
        return version

    async def _current(self, owner_id: str, version: int) -> _RuleSet:
        known = self._sets.get(owner_id)
        if known is not None and known.version == version:
            return known
        if version == 0:
            ruleset = _RuleSet(0, (), counts=False)
        else:
            stored_version, stored = await self._store.load(owner_id)
            ruleset = _ruleset(stored_version, stored)
        self._sets[owner_id] = ruleset
        return ruleset

    async def admit(self, facts: CallFacts) -> None:
        """Let the call go on, or raise: `Denied` (a `refuse` rule, a rule that failed, rules
        that do not compile), `Held`/`Denied` from the holds (a `hold` rule, or today's default)."""
        state = await self._store.state(facts.owner_id)
        ruleset = await self._current(facts.owner_id, state.version)
        if ruleset.broken:
            raise Denied(_REFUSED)
        if not ruleset.rules and not ruleset.counts:  # no rules: today's default, no CEL, no clock
            if self._default_holds(facts):
                await self._hold(facts)
            return
        data: dict[str, Any] = {
            "capability": facts.capability,
            "tool": facts.tool,
            "annotations": facts.annotations,
            "arguments": facts.arguments,
            "session": facts.session,
            "grant": facts.grant,
            "now": the_time(state.timezone),
        }
        if not ruleset.counts:
            data["recent"] = {"minute": {facts.capability: 0}, "hour": {facts.capability: 0}}
            if await self._decide(ruleset, facts, data):
                await self._hold(facts)
            return
        async with self._store.counting(facts.owner_id, facts.subject) as counter:
            counts = await counter.counts()
            data["recent"] = {w: {facts.capability: 0, **by} for w, by in counts.items()}
            held = await self._decide(ruleset, facts, data)
            if not held:
                await counter.add(facts.capability)
                return
        await self._hold(facts)  # raises until the owner's approval is used, then counts as a call
        async with self._store.counting(facts.owner_id, facts.subject) as counter:
            await counter.add(facts.capability)

    async def _decide(self, ruleset: _RuleSet, facts: CallFacts, data: dict[str, Any]) -> bool:
        """Whether the call is held; raises `Denied` for a refusal or a rule that failed."""
        try:
            verdict = evaluate(ruleset.rules, data)
        except RuleFailed as failed:
            await self._failed(facts, failed)
            raise Denied(_REFUSED) from None
        if verdict.effect == "refuse":
            assert verdict.rule is not None
            logger.info(
                "%s call %s/%s refused by rule %s", facts.kind, facts.capability, facts.tool[:80], verdict.position
            )
            raise Denied(verdict.rule.reason or _REFUSED)
        if verdict.effect is not None:
            if verdict.effect == "hold":
                logger.info(
                    "%s call %s/%s held by rule %s", facts.kind, facts.capability, facts.tool[:80], verdict.position
                )
            return verdict.effect == "hold"
        return self._default_holds(facts)

    def _default_holds(self, facts: CallFacts) -> bool:
        """Today's default, when no rule matched: a visitor's (or node's) call to a destructive tool is held."""
        return facts.kind in ("visitor", "node") and facts.destructive and self._hold_destructive

    async def _hold(self, facts: CallFacts) -> None:
        if self._holds is None:
            raise Denied("this call needs the owner's approval, and this host holds no calls")
        used = await self._holds.admit(
            facts.owner_id, facts.hold_session, facts.capability, facts.tool, facts.arguments
        )
        logger.info(
            "%s call %s/%s runs on the owner's approval (hold %s)", facts.kind, facts.capability, facts.tool[:80], used
        )

    async def _failed(self, facts: CallFacts, failed: RuleFailed) -> None:
        """Log and audit a rule that could not be evaluated (the call is refused either way)."""
        logger.warning(
            "rule %d failed to evaluate for a %s call to %s/%s; refused: %s",
            failed.position,
            facts.kind,
            facts.capability,
            facts.tool[:80],
            failed.why,
        )
        if self._audit is None:
            return
        row = {
            "position": failed.position,
            "why": failed.why,
            "capability": facts.capability,
            "tool": facts.tool,
            "session": facts.session.get("id") or facts.kind,
        }
        try:
            await self._audit.record(facts.owner_id, "rule_error", summarize(row), "refused")
        except Exception:  # the call is refused whether or not the row is written
            logger.warning("the audit row of a failed rule could not be written", exc_info=True)
