"""Turns and receipts: what a visitor said, what the agent answered, and which tool calls of
the turn really completed (docs/design.md "turn"; docs/security.md E12 claim gate).

Above: `visitor.door` (records a receipt after each forwarded call returned), `visitor.http`
(`TurnsEndpoint`: opens turns, takes answers and judges them) and `backchannel.ops`
(`conversation.read`). Below: asyncpg (`mcp_host.turns`, `mcp_host.receipts`, migration 008).

A session's turns are numbered 1, 2, …; a receipt goes into the session's latest turn (none
open yet: nothing is recorded). `judge` flags an answer that uses a gated phrase of a
capability when the turn has no successful receipt of that gate's tool from that capability:
a receipt of an earlier turn, of a failed call, or of another capability does not count.

`PostgresTurns` keeps receipts off the call's path: `record` only queues one, and one writer
per host (`run`, started and stopped with the host) writes whatever accumulated in `LINGER_S`
after the first as one INSERT over `unnest`, each receipt into its session's latest turn at
that moment (so a session's calls one after another cost one statement per batch, not each). So that this is the
turn that was latest when the call completed, `open_turn`, `receipts`, `answer` and
`transcript` first wait until that session's queued receipts on this replica are written (the
claim gate stays exact). `stop` writes what is left. A batch the database does not take (an
outage) is dropped with one log line, as a failed write was; one refused for another reason is
written receipt by receipt, so one bad row (a session ended meanwhile) costs only itself. At
`MAX_PENDING` queued receipts, `record` waits for a write (back-pressure, nothing dropped).
Without a running writer (tests, a stopped host), `record` writes at once.

What one session may store is capped (`TurnCaps`, issue 26 defect 5): a turn's message and
answer together at most `turn_bytes` (`TurnTooLarge`), a session at most `turns` turns and
`session_bytes` of messages and answers (`TurnsUsedUp`); a refused turn or answer stores
nothing. The checks run under the session's lock, so concurrent opens cannot pass them
together. A turn keeps at most `receipts` receipts, and past that only the first of each kind
(capability, tool, success): the claim gate, which asks whether one successful receipt of a tool
exists, judges alike, while a session calling in a loop writes no more rows. How long turns
and receipts are kept: `store.retention`.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import mcp.types as types

from mcp_host.errors import InvalidArguments, QuotaExhausted, UnknownTool, is_connection_failure
from mcp_host.plugins import ClaimGate

if TYPE_CHECKING:
    from mcp_host.store import PgPool

__all__ = [
    "MAX_PENDING",
    "MemoryTurns",
    "PostgresTurns",
    "Receipt",
    "Turn",
    "TurnCaps",
    "TurnStore",
    "TurnTooLarge",
    "TurnsUsedUp",
    "UnknownTurn",
    "Violation",
    "answer_ok",
    "judge",
    "normalise",
    "receipt_ok",
]

logger = logging.getLogger(__name__)

# Opening a turn takes this per-session lock: concurrent opens get consecutive numbers.
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('mcp_host.turns:' || $1, 0))"

# Each receipt into its session's latest turn (none: not recorded), in the order recorded,
# while the turn holds fewer than $5 (those of this batch before it counted), and past that
# only the first of its kind in the turn.
_RECORD = """
WITH p AS (
    SELECT p.session_id, t.n, p.capability, p.tool, p.ok, p.i,
        row_number() OVER (PARTITION BY p.session_id ORDER BY p.i) AS k,
        row_number() OVER (PARTITION BY p.session_id, p.capability, p.tool, p.ok ORDER BY p.i) AS kind_k
    FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[])
        WITH ORDINALITY AS p (session_id, capability, tool, ok, i)
    CROSS JOIN LATERAL (SELECT max(n) AS n FROM mcp_host.turns WHERE turns.session_id = p.session_id) AS t
    WHERE t.n IS NOT NULL
), turn AS (
    SELECT DISTINCT session_id, n FROM p
), had AS (
    SELECT turn.session_id, turn.n, count(r.id) AS had
    FROM turn LEFT JOIN mcp_host.receipts r ON r.session_id = turn.session_id AND r.n = turn.n
    GROUP BY turn.session_id, turn.n
), kinds AS (
    SELECT DISTINCT r.session_id, r.n, r.capability, r.tool, r.ok
    FROM turn JOIN mcp_host.receipts r ON r.session_id = turn.session_id AND r.n = turn.n
)
INSERT INTO mcp_host.receipts (session_id, n, capability, tool, ok)
SELECT p.session_id, p.n, p.capability, p.tool, p.ok
FROM p JOIN had ON had.session_id = p.session_id AND had.n = p.n
WHERE had.had + p.k <= $5
   OR (p.kind_k = 1 AND NOT EXISTS (
        SELECT 1 FROM kinds WHERE kinds.session_id = p.session_id AND kinds.n = p.n
            AND kinds.capability = p.capability AND kinds.tool = p.tool AND kinds.ok = p.ok))
ORDER BY p.i
"""

# What the session's turns hold now: how many, the last number, and their bytes.
_HELD = """
SELECT count(*) AS turns, coalesce(max(n), 0) AS last,
    coalesce(sum(octet_length(message) + coalesce(octet_length(answer), 0)), 0) AS bytes
FROM mcp_host.turns WHERE session_id = $1
"""

MAX_PENDING = 10_000
"""Queued receipts at which `record` waits for a write."""
LINGER_S = 0.05
"""How long the writer lets receipts accumulate after the first before it writes them."""
_WRITE_TIMEOUT_S = 10.0


class UnknownTurn(UnknownTool):
    """The session has no turn with that number."""


class TurnTooLarge(InvalidArguments):
    """A turn's message and answer together would be over `TurnCaps.turn_bytes`; nothing was stored."""


class TurnsUsedUp(QuotaExhausted):
    """The session holds as many turns, or as many bytes of them, as one may; nothing was stored."""


@dataclass(frozen=True)
class TurnCaps:
    """What one session may store (settings: `PrincipalSettings`)."""

    turn_bytes: int = 64 * 1024
    """A turn's message and answer together, in UTF-8 bytes."""
    turns: int = 1000
    """Turns one session may hold."""
    session_bytes: int = 4 * 1024 * 1024
    """The messages and answers of all a session's turns together."""
    receipts: int = 1000
    """Receipts one turn keeps before it keeps only the first of each kind."""

    def check_message(self, message: str) -> int:
        """The message's size; raises TurnTooLarge over `turn_bytes`."""
        size = _size(message)
        if size > self.turn_bytes:
            raise TurnTooLarge(f"the message is {size} bytes; a turn holds at most {self.turn_bytes}")
        return size

    def check_answer(self, message_bytes: int, text: str) -> int:
        """The answer's size; raises TurnTooLarge when it and its turn's message pass `turn_bytes`."""
        size = _size(text)
        if message_bytes + size > self.turn_bytes:
            raise TurnTooLarge(
                f"the answer is {size} bytes and its message {message_bytes};"
                f" a turn holds at most {self.turn_bytes} bytes of both"
            )
        return size

    def check_session(self, turns: int, held_bytes: int, adding: int, *, opening: bool) -> None:
        """Raises TurnsUsedUp when the session cannot take `adding` bytes more (and, `opening`,
        one turn more) while it holds `turns` turns of `held_bytes`."""
        if opening and turns >= self.turns:
            raise TurnsUsedUp(f"this session holds {turns} turns, the most one may; open a new session")
        if held_bytes + adding > self.session_bytes:
            raise TurnsUsedUp(
                f"this session's turns hold {held_bytes} bytes and may hold at most {self.session_bytes};"
                " open a new session"
            )


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


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
    return answer_ok(result.is_error, result.structured_content)


def answer_ok(is_error: bool, structured: object) -> bool:
    """`receipt_ok` of a result read as raw JSON: its `isError` and `structuredContent`."""
    return not is_error and not (isinstance(structured, dict) and structured.get("ok") is False)


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
        """Open the session's next turn; its number (1 for the first). Raises TurnTooLarge
        (the message alone is over the cap) or TurnsUsedUp (the session holds all it may)."""
        ...

    async def record(self, session_id: str, capability: str, tool: str, ok: bool) -> None:
        """A receipt into the session's latest turn; nothing when it has none."""
        ...

    async def receipts(self, session_id: str, n: int) -> list[Receipt]:
        """The receipts of turn `n`, oldest first. Raises UnknownTurn."""
        ...

    async def answer(self, session_id: str, n: int, text: str) -> None:
        """Store the answer of turn `n` (a later answer replaces it). Raises UnknownTurn,
        TurnTooLarge (with its message, over the cap) or TurnsUsedUp (the session's bytes)."""
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

    def __init__(self, caps: TurnCaps | None = None) -> None:
        self._caps = caps or TurnCaps()
        self._turns: dict[str, list[_MemoryTurn]] = {}

    def _held(self, session_id: str) -> int:
        return sum(_size(t.message) + _size(t.answer or "") for t in self._turns.get(session_id, []))

    async def open_turn(self, session_id: str, message: str) -> int:
        size = self._caps.check_message(message)
        turns = self._turns.setdefault(session_id, [])
        self._caps.check_session(len(turns), self._held(session_id), size, opening=True)
        turns.append(_MemoryTurn(message))
        return len(turns)

    async def record(self, session_id: str, capability: str, tool: str, ok: bool) -> None:
        turns = self._turns.get(session_id)
        if turns:
            kept = turns[-1].receipts
            receipt = Receipt(capability, tool, ok)
            if len(kept) < self._caps.receipts or receipt not in kept:
                kept.append(receipt)

    def _turn(self, session_id: str, n: int) -> _MemoryTurn:
        turns = self._turns.get(session_id, [])
        if not 1 <= n <= len(turns):
            raise UnknownTurn(f"session has no turn {n}")
        return turns[n - 1]

    async def receipts(self, session_id: str, n: int) -> list[Receipt]:
        return list(self._turn(session_id, n).receipts)

    async def answer(self, session_id: str, n: int, text: str) -> None:
        turn = self._turn(session_id, n)
        size = self._caps.check_answer(_size(turn.message), text)
        others = self._held(session_id) - _size(turn.answer or "")
        self._caps.check_session(0, others, size, opening=False)
        turn.answer = text

    async def transcript(self, session_id: str) -> list[Turn]:
        return [
            Turn(i, t.message, t.answer, tuple(t.receipts)) for i, t in enumerate(self._turns.get(session_id, []), 1)
        ]


@dataclass(frozen=True)
class _Queued:
    session_id: str
    capability: str
    tool: str
    ok: bool


class PostgresTurns:
    """Turns and receipts in PostgreSQL; receipts queued and written in batches (module doc)."""

    def __init__(
        self,
        pool: PgPool,
        *,
        caps: TurnCaps | None = None,
        max_pending: int = MAX_PENDING,
        linger_s: float = LINGER_S,
    ) -> None:
        self._pool = pool
        self._caps = caps or TurnCaps()
        self._max_pending = max_pending
        self._linger_s = linger_s
        self._queue: list[_Queued] = []
        self._queued: Counter[str] = Counter()
        """Receipts per session in `_queue`."""
        self._writing: frozenset[str] = frozenset()
        """The sessions of the batch being written."""
        self._lock = anyio.Lock()  # one batch at a time, in the order taken
        self._wake = anyio.Event()
        self._running = False
        self._scope = anyio.CancelScope()

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Write queued receipts until `stop`: whatever accumulated in `linger_s` after the
        first (or while the last batch was written) goes as one batch. For `TaskGroup.start`."""
        with self._scope:
            self._running = True
            task_status.started()
            try:
                while True:
                    await self._wake.wait()
                    await anyio.sleep(self._linger_s)
                    self._wake = anyio.Event()
                    await self._write()
            finally:
                self._running = False

    async def stop(self) -> None:
        """No more batches: the receipts still queued are written now, and later ones at once."""
        self._running = False
        self._scope.cancel()
        with anyio.CancelScope(shield=True):  # bounded: each batch by `_WRITE_TIMEOUT_S`
            await self._write()

    async def open_turn(self, session_id: str, message: str) -> int:
        size = self._caps.check_message(message)
        await self._flush(session_id)  # a call completed before this turn belongs to the last one
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(_LOCK, session_id)
            held = await conn.fetchrow(_HELD, session_id)
            assert held is not None  # an aggregate: one row
            self._caps.check_session(held["turns"], held["bytes"], size, opening=True)
            n = await conn.fetchval(
                "INSERT INTO mcp_host.turns (session_id, n, message) VALUES ($1, $2, $3) RETURNING n",
                session_id,
                held["last"] + 1,
                message,
            )
        return int(n)

    async def record(self, session_id: str, capability: str, tool: str, ok: bool) -> None:
        """Queue the receipt for the writer; written at once when none runs, and waited for
        when `max_pending` are queued."""
        self._queue.append(_Queued(session_id, capability, tool, ok))
        self._queued[session_id] += 1
        if not self._running or len(self._queue) >= self._max_pending:
            await self._write()
        else:
            self._wake.set()

    async def _flush(self, session_id: str) -> None:
        """Return once the session's receipts queued on this replica so far are written (or dropped)."""
        if self._queued[session_id] or session_id in self._writing:
            await self._write()

    async def _write(self) -> None:
        """Write every queued receipt as one batch (after the batch being written, if any)."""
        async with self._lock:
            if not self._queue:
                return
            batch, self._queue = self._queue, []
            self._queued.clear()
            self._writing = frozenset(q.session_id for q in batch)
            try:
                # A cancelled writer or caller must not lose a batch it took.
                with anyio.CancelScope(shield=True), anyio.move_on_after(_WRITE_TIMEOUT_S) as late:
                    await self._insert(batch)
                if late.cancelled_caught:
                    logger.warning("%d receipts were not recorded: the database did not answer in time", len(batch))
            finally:
                self._writing = frozenset()

    async def _insert(self, batch: Sequence[_Queued]) -> None:
        try:
            await self._pool.execute(_RECORD, *_columns(batch), self._caps.receipts)
            return
        except Exception as exc:
            if is_connection_failure(exc) or self._pool.is_closing():
                # The database watch says the outage once; these receipts are lost with it.
                logger.debug("%d receipts were not recorded (the database is unreachable)", len(batch))
                return
        lost = 0
        for one in batch:  # one receipt the database refuses costs only itself
            try:
                await self._pool.execute(_RECORD, *_columns([one]), self._caps.receipts)
            except Exception:
                lost += 1
        if lost:
            logger.warning("%d of %d receipts were not recorded: the database refused them", lost, len(batch))

    async def receipts(self, session_id: str, n: int) -> list[Receipt]:
        await self._flush(session_id)
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
        await self._flush(session_id)
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(_LOCK, session_id)  # the session's bytes cannot change meanwhile
            turn = await conn.fetchrow(
                "SELECT octet_length(message) AS message, coalesce(octet_length(answer), 0) AS answer"
                " FROM mcp_host.turns WHERE session_id = $1 AND n = $2",
                session_id,
                n,
            )
            if turn is None:
                raise UnknownTurn(f"session has no turn {n}")
            size = self._caps.check_answer(turn["message"], text)
            held = await conn.fetchrow(_HELD, session_id)
            assert held is not None  # an aggregate: one row
            self._caps.check_session(0, held["bytes"] - turn["answer"], size, opening=False)
            await conn.execute(
                "UPDATE mcp_host.turns SET answer = $3, answered_at = now() WHERE session_id = $1 AND n = $2",
                session_id,
                n,
                text,
            )

    async def transcript(self, session_id: str) -> list[Turn]:
        await self._flush(session_id)
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


def _columns(batch: Sequence[_Queued]) -> tuple[list[str], list[str], list[str], list[bool]]:
    return (
        [q.session_id for q in batch],
        [q.capability for q in batch],
        [q.tool for q in batch],
        [q.ok for q in batch],
    )
