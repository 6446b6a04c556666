"""`store.search` in memory: websearch-style matching and a simple, honest ranking.

Above: the in-memory stores — the kit's standalone emulation (`mcp_host_kit.local_store`) and
the host's in-memory twin (`mcp_host.store.memory_store`) — which check the arguments and pick
the documents the filter allows. Below: nothing but `re`. The host's own search is
PostgreSQL's (`mcp_host.store.search`); this is its stand-in.

Close to the host where a plugin author would notice, not a copy of PostgreSQL: words are
runs of letters, digits and `_`, lower-cased and never stemmed (the host's `simple`
configuration); a query is websearch syntax — words (all must appear), `"a phrase"`, `or`
between alternatives, `-word` to exclude (a word anywhere in the doc's strings excludes it,
as under the host). The rank is a weighted count of the query's words in the searched
strings (1.0, 0.4, 0.2, 0.1 by field order, like ts_rank's A-D weights) — comparable within
one search, not with the host's numbers. The snippet is up to 30 words around the first
match, matched words in `**` (as the host's `ts_headline` marks them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["search_match"]

_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r'"([^"]*)"?|(\S+)')
_WEIGHTS = (1.0, 0.4, 0.2, 0.1)
_SNIPPET_WORDS = 30

Term = tuple[bool, list[str]]  # (negated, the words of a word or phrase)


def _words(text: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(text)]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _clauses(query: str) -> list[list[Term]]:
    """`query` as OR-ed clauses of AND-ed terms."""
    clauses: list[list[Term]] = [[]]
    for match in _TOKEN.finditer(query):
        phrase, word = match.group(1), match.group(2)
        if phrase is None and word.lower() == "or":
            if clauses[-1]:
                clauses.append([])
            continue
        negated = phrase is None and word.startswith("-")
        words = _words(phrase if phrase is not None else word)
        if words:
            clauses[-1].append((negated, words))
    return [clause for clause in clauses if clause]


def _has(words: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(words[i : i + n] == phrase for i in range(len(words) - n + 1))


def _snippet(texts: list[str], wanted: set[str]) -> str:
    words = " … ".join(texts).split()
    hits = [i for i, word in enumerate(words) if set(_words(word)) & wanted]
    start = max(0, (hits[0] if hits else 0) - _SNIPPET_WORDS // 3)
    shown = words[start : start + _SNIPPET_WORDS]
    return " ".join(f"**{w}**" if set(_words(w)) & wanted else w for w in shown)


def search_match(doc: dict[str, Any], query: str, fields: Sequence[str]) -> tuple[float, str] | None:
    """(rank, snippet) when `doc` matches `query` in its strings (or those under `fields`),
    else None."""
    if fields:
        groups = [(_WEIGHTS[min(i, 3)], _strings(doc.get(field))) for i, field in enumerate(fields)]
    else:
        groups = [(_WEIGHTS[0], _strings(doc))]
    anywhere = _words(" ".join(_strings(doc)))
    searched = [word for _, texts in groups for text in texts for word in _words(text)]
    clauses = _clauses(query)
    if not any(all(_has(anywhere if neg else searched, words) != neg for neg, words in c) for c in clauses):
        return None
    wanted = {word for clause in clauses for neg, words in clause if not neg for word in words}
    rank = sum(weight * sum(_words(text).count(w) for text in texts for w in wanted) for weight, texts in groups)
    return rank, _snippet([text for _, texts in groups for text in texts], wanted)
