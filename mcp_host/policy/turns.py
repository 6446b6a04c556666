"""Turns and receipts: what a visitor said, what the agent answered, and which tool calls of
the turn really completed (DESIGN.md "turn"; SECURITY.md E12 claim gate).

Above: `visitor.door` (records a receipt after each forwarded call returned), `visitor.http`
(`TurnsEndpoint`: opens turns, takes answers and judges them) and `backchannel.ops`
(`conversation.read`). Below: asyncpg (`mcp_host.turns`, `mcp_host.receipts`, migration 008).

A session's turns are numbered 1, 2, …; a receipt goes into the session's latest turn (none
open yet: nothing is recorded). `judge` flags an answer that uses a gated phrase of a
capability when the turn has no successful receipt of that gate's tool from that capability:
a receipt of an earlier turn, of a failed call, or of another capability does not count.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import mcp.types as types

from mcp_host.errors import UnknownTool
from mcp_host.plugins import ClaimGate

if TYPE_CHECKING:
    from mcp_host.store import PgPool

__all__ = [
    "MemoryTurns",
    "PostgresTurns",
    "Receipt",
    "Turn",
    "TurnStore",
    "UnknownTurn",
    "Violation",
    "judge",
    "normalise",
    "receipt_ok",
]

# Opening a turn takes this per-session lock: concurrent opens get consecutive numbers.
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('mcp_host.turns:' || $1, 0))"


class UnknownTurn(UnknownTool):
    """The session has no turn with that number."""


@dataclass(frozen=True)
class Receipt:
    """A forwarded call that completed: which capability's tool, and whether it succeeded."""

    capability: str
    tool: str
    ok: bool


@dataclass(frozen=True)
class Turn:
    n: int
    message: str
    answer: str | None
    receipts: tuple[Receipt, ...] = ()

    def wire(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "message": self.message,
            "answer": self.answer,
            "receipts": [{"capability": r.capability, "tool": r.tool, "ok": r.ok} for r in self.receipts],
        }


@dataclass(frozen=True)
class Violation:
    """An answer used `phrase` of `capability`'s claim gate without a receipt of `tool`."""

    capability: str
    tool: str
    phrase: str


def receipt_ok(result: types.CallToolResult) -> bool:
    """Whether a completed call succeeded: not `isError`, and no structured `"ok": false`."""
    if result.is_error:
        return False
    structured = result.structured_content
    return not (isinstance(structured, dict) and structured.get("ok") is False)


_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\uff07": "'"})
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """NFKC, case-folded, typographic apostrophes as `'`, whitespace runs as one space."""
    folded = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).casefold()
    return _SPACE.sub(" ", folded).strip()


# A clause ends at sentence or clause punctuation; a phrase after a negation in its own clause
# ("I could not confirm it", "I haven't done it") is not a claim. A negation after the
# phrase ("I've done it, no problem") does not excuse it.
_CLAUSES = re.compile(r"[.!?;:,\n\u2014\u2013]+")
_WORD = re.compile(r"[\w']+")
_NEGATIONS = frozenset(
    {"not", "no", "never", "cannot", "unable", "neither", "nor", "nothing", "failed", "nobody", "none"}
)


def _negated(before: str) -> bool:
    return any(w in _NEGATIONS or w.endswith("n't") for w in _WORD.findall(before))


def _contains(text: str, phrase: str) -> bool:
    """Whether `text` (normalised) asserts `phrase`: as whole words, not after a negation in its clause."""
    wanted = normalise(phrase)
    if not wanted:
        return False
    pattern = re.compile(rf"(?<!\w){re.escape(wanted)}(?!\w)")
    for clause in _CLAUSES.split(text):
        for found in pattern.finditer(clause):
            if not _negated(clause[: found.start()]):
                return True
    return False


def judge(text: str, gates: Sequence[tuple[str, ClaimGate]], receipts: Sequence[Receipt]) -> list[Violation]:
    """The claim-gate violations of answer `text`, given the receipts of its own turn.

    `gates` are (capability id, its claim gate). A gate is violated when `text` contains one of
    its phrases (as whole words, after `normalise`) and no receipt with `ok` is of the gate's
    tool of that capability. One violation per gate, naming the first phrase found.
    """
    said = normalise(text)
    violations: list[Violation] = []
    for capability, gate in gates:
        phrase = next((p for p in gate.phrases if _contains(said, p)), None)
        if phrase is None:
            continue
        if any(r.ok and r.capability == capability and r.tool == gate.tool for r in receipts):
            continue
        violations.append(Violation(capability, gate.tool, phrase))
    return violations


class TurnStore(Protocol):
    """Where turns and their receipts live. Session ids are those of `sessions`."""

    async def open_turn(self, session_id: str, message: str) -> int:
        """Open the session's next turn; its number (1 for the first)."""
        ...

    async def record(self, session_id: str, capability: str, tool: str, ok: bool) -> None:
        """A receipt into the session's latest turn; nothing when it has none."""
        ...

    async def receipts(self, session_id: str, n: int) -> list[Receipt]:
        """The receipts of turn `n`, oldest first. Raises UnknownTurn."""
        ...

    async def answer(self, session_id: str, n: int, text: str) -> None:
        """Store the answer of turn `n` (a later answer replaces it). Raises UnknownTurn."""
        ...

    async def transcript(self, session_id: str) -> list[Turn]:
        """The session's turns, first to last, with their receipts."""
        ...


@dataclass
class _MemoryTurn:
    message: str
    answer: str | None = None
    receipts: list[Receipt] = field(default_factory=list)


class MemoryTurns:
    """The in-memory twin of `PostgresTurns`, for tests."""

    def __init__(self) -> None:
        self._turns: dict[str, list[_MemoryTurn]] = {}

    async def open_turn(self, session_id: str, message: str) -> int:
        turns = self._turns.setdefault(session_id, [])
        turns.append(_MemoryTurn(message))
        return len(turns)

    async def record(self, session_id: str, capability: str, tool: str, ok: bool) -> None:
        turns = self._turns.get(session_id)
        if turns:
            turns[-1].receipts.append(Receipt(capability, tool, ok))

    def _turn(self, session_id: str, n: int) -> _MemoryTurn:
        turns = self._turns.get(session_id, [])
        if not 1 <= n <= len(turns):
            raise UnknownTurn(f"session has no turn {n}")
        return turns[n - 1]

    async def receipts(self, session_id: str, n: int) -> list[Receipt]:
        return list(self._turn(session_id, n).receipts)

    async def answer(self, session_id: str, n: int, text: str) -> None:
        self._turn(session_id, n).answer = text

    async def transcript(self, session_id: str) -> list[Turn]:
        return [
            Turn(i, t.message, t.answer, tuple(t.receipts)) for i, t in enumerate(self._turns.get(session_id, []), 1)
        ]


class PostgresTurns:
    def __init__(self, pool: PgPool) -> None:
        self._pool = pool

    async def open_turn(self, session_id: str, message: str) -> int:
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(_LOCK, session_id)
            n = await conn.fetchval(
                "INSERT INTO mcp_host.turns (session_id, n, message)"
                " SELECT $1, coalesce(max(n), 0) + 1, $2 FROM mcp_host.turns WHERE session_id = $1"
                " RETURNING n",
                session_id,
                message,
            )
        return int(n)

    async def record(self, session_id: str, capability: str, tool: str, ok: bool) -> None:
        await self._pool.execute(
            "INSERT INTO mcp_host.receipts (session_id, n, capability, tool, ok)"
            " SELECT $1, max(n), $2, $3, $4 FROM mcp_host.turns WHERE session_id = $1 HAVING max(n) IS NOT NULL",
            session_id,
            capability,
            tool,
            ok,
        )

    async def receipts(self, session_id: str, n: int) -> list[Receipt]:
        async with self._pool.acquire() as conn:
            found = await conn.fetchval(
                "SELECT true FROM mcp_host.turns WHERE session_id = $1 AND n = $2", session_id, n
            )
            if not found:
                raise UnknownTurn(f"session has no turn {n}")
            rows = await conn.fetch(
                "SELECT capability, tool, ok FROM mcp_host.receipts WHERE session_id = $1 AND n = $2 ORDER BY id",
                session_id,
                n,
            )
        return [Receipt(r["capability"], r["tool"], r["ok"]) for r in rows]

    async def answer(self, session_id: str, n: int, text: str) -> None:
        status = await self._pool.execute(
            "UPDATE mcp_host.turns SET answer = $3, answered_at = now() WHERE session_id = $1 AND n = $2",
            session_id,
            n,
            text,
        )
        if status != "UPDATE 1":
            raise UnknownTurn(f"session has no turn {n}")

    async def transcript(self, session_id: str) -> list[Turn]:
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            turns = await conn.fetch(
                "SELECT n, message, answer FROM mcp_host.turns WHERE session_id = $1 ORDER BY n", session_id
            )
            rows = await conn.fetch(
                "SELECT n, capability, tool, ok FROM mcp_host.receipts WHERE session_id = $1 ORDER BY id",
                session_id,
            )
        by_turn: dict[int, list[Receipt]] = {}
        for r in rows:
            by_turn.setdefault(r["n"], []).append(Receipt(r["capability"], r["tool"], r["ok"]))
        return [Turn(t["n"], t["message"], t["answer"], tuple(by_turn.get(t["n"], ()))) for t in turns]
