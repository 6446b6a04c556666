"""Ranked full-text search over a plugin's documents: the argument checks, the SQL, and the
in-memory twin's matcher.

Above: `plugin_store` (`PluginStore.search`, `memory_store.InMemoryPluginStore.search`, and the schema's
`text_vector` column), and through it the host op `store.search`. Below: PostgreSQL's text
search (`websearch_to_tsquery`, `ts_rank`, `ts_headline`) in the `simple` configuration —
words are lower-cased, never stemmed and no stop words are dropped, so every language is
treated alike.

What is searched: every string value of the doc at any depth. Each record keeps that text's
vector in the stored column `text_vector` (GIN-indexed as `records_text`), so matching and
ranking read it instead of parsing documents again. With `fields` (1-8 top-level keys, most
important first) the best `RERANK_FACTOR` × limit documents by that rank (at most
`MAX_RERANK`) are ranked again on the strings under those keys only, weighted A, B, C, D in
that order (the fifth and later weigh D), and those whose fields do not match are left out;
so a search with fields parses at most that many documents, and a document whose match in
its fields ranks below that many others on its whole text is not found. A negated word
(`-word`) excludes a document holding the word anywhere in its strings. The query is
websearch syntax: words (all must appear), `"a phrase"`, `or`, `-word`; it never fails to
parse, and a query with no word in it matches nothing. Measured (bench/search.py, 2000
documents of 400 words, a loaded 2-core machine): 1-40 ms per search over every string,
3-50 ms with two fields; most of it grows with the number of matching documents.

Only the query text, the field names and the filter reach the database, always as bind
parameters; the SQL around them is built from this module's constants and a field count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp_host.errors import InvalidArguments

__all__ = [
    "ALL_TEXT",
    "MAX_RERANK",
    "RERANK_FACTOR",
    "SearchLimits",
    "check_fields",
    "check_search_limit",
    "check_search_query",
    "search_sql",
    "text_match",
]

_MAX_FIELDS = 8
_WEIGHTS = "ABCD"
_FIELD = re.compile(r"\A[^\x00-\x1f\x7f\ud800-\udfff]{1,64}\Z")
_NUL_OR_SURROGATE = re.compile("[\x00\ud800-\udfff]")
# Every string value of the doc, at any depth: what `text_vector` stores.
ALL_TEXT = """jsonb_to_tsvector('simple'::regconfig, doc, '["string"]'::jsonb)"""
RERANK_FACTOR = 5
MAX_RERANK = 200
_QUERY = "websearch_to_tsquery('simple'::regconfig, $3)"
_HEADLINE = 'MaxFragments=2, MaxWords=30, MinWords=10, FragmentDelimiter=" … ", StartSel=**, StopSel=**'


@dataclass(frozen=True)
class SearchLimits:
    """What one search may ask for."""

    max_query_chars: int = 1000
    max_limit: int = 100
    default_limit: int = 20


def check_search_query(limits: SearchLimits, query: object) -> str:
    """`query` if it is a string of 1..max_query_chars characters with a non-space in it and
    no U+0000 or lone surrogate (which PostgreSQL cannot take); raises `InvalidArguments`."""
    if not isinstance(query, str) or not 0 < len(query) <= limits.max_query_chars:
        raise InvalidArguments(f"query must be a string of 1-{limits.max_query_chars} characters")
    if not query.strip():
        raise InvalidArguments("query must contain a word")
    if _NUL_OR_SURROGATE.search(query):
        raise InvalidArguments("query contains U+0000 or a lone surrogate")
    return query


def check_fields(fields: object) -> tuple[str, ...]:
    """`fields` as a tuple (empty for None): 1-8 distinct keys of 1-64 characters without
    control characters; raises `InvalidArguments`."""
    if fields is None:
        return ()
    if not isinstance(fields, list | tuple) or not 0 < len(fields) <= _MAX_FIELDS:
        raise InvalidArguments(f"fields must be a list of 1-{_MAX_FIELDS} keys of the doc")
    for field in fields:
        if not isinstance(field, str) or _FIELD.fullmatch(field) is None:
            raise InvalidArguments("fields: each key must be 1-64 characters without control characters")
    if len(set(fields)) != len(fields):
        raise InvalidArguments("fields: each key may be named once")
    return tuple(fields)


def check_search_limit(limits: SearchLimits, value: object) -> int:
    """`value` (default_limit for None) if it is an integer 1..max_limit; raises `InvalidArguments`."""
    if value is None:
        return limits.default_limit
    if type(value) is not int or not 1 <= value <= limits.max_limit:
        raise InvalidArguments(f"limit must be an integer from 1 to {limits.max_limit}")
    return value


def search_sql(records: str, field_count: int) -> str:
    """The search statement over table `records` (a quoted, checked name) for `field_count`
    fields. Parameters: $1 owner, $2 collection, $3 query, $4 filter, $5 limit, $6… fields.

    The ranked hits are chosen first; only they get a headline (ts_headline parses the text
    again, so it is paid per hit, not per match).
    """
    scope = f"owner_id = $1 AND collection = $2 AND doc @> $4 AND text_vector @@ {_QUERY}"
    if field_count == 0:
        text = "(SELECT string_agg(v #>> '{}', ' … ') FROM jsonb_each(doc) AS e(k, v) WHERE jsonb_typeof(v) = 'string')"
        hits = f"""SELECT id, doc, created_at, ts_rank(text_vector, {_QUERY}) AS rank
            FROM {records} WHERE {scope}
            ORDER BY rank DESC, created_at, id LIMIT $5"""
    else:
        params = [f"${6 + i}::text" for i in range(field_count)]
        vector = " || ".join(
            f"setweight(jsonb_to_tsvector('simple'::regconfig, coalesce(doc -> {p}, '{{}}'::jsonb), "
            f"""'["string"]'::jsonb), '{_WEIGHTS[min(i, 3)]}')"""
            for i, p in enumerate(params)
        )
        strings = (f"CASE WHEN jsonb_typeof(doc -> {p}) = 'string' THEN doc ->> {p} END" for p in params)
        text = f"concat_ws(' … ', {', '.join(strings)})"
        # OFFSET 0 keeps the subquery from being flattened, so each candidate's field vector is
        # computed once for both the match and the rank.
        hits = f"""SELECT id, doc, created_at, ts_rank(vector, {_QUERY}) AS rank FROM (
                SELECT id, doc, created_at, {vector} AS vector FROM (
                    SELECT id, doc, created_at FROM {records} WHERE {scope}
                    ORDER BY ts_rank(text_vector, {_QUERY}) DESC, created_at, id
                    LIMIT least($5 * {RERANK_FACTOR}, {MAX_RERANK})
                ) AS best OFFSET 0
            ) AS candidates
            WHERE vector @@ {_QUERY}
            ORDER BY rank DESC, created_at, id LIMIT $5"""
    return f"""
    WITH hits AS ({hits})
    SELECT id, doc, created_at, rank,
        ts_headline('simple'::regconfig, coalesce({text}, ''), {_QUERY}, '{_HEADLINE}') AS snippet
    FROM hits ORDER BY rank DESC, created_at, id
    """


# -- in memory: websearch syntax over lower-cased words, ranked by weighted term counts -------

_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r'"([^"]*)"?|(\S+)')


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _clauses(query: str) -> list[list[tuple[bool, list[str]]]]:
    """`query` as OR-ed clauses of AND-ed (negated, phrase words) terms, as websearch reads it."""
    clauses: list[list[tuple[bool, list[str]]]] = [[]]
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


def text_match(doc: dict[str, Any], query: str, fields: Sequence[str]) -> tuple[float, str] | None:
    """(rank, snippet) when `doc` matches `query`, else None — the in-memory twin's honest
    approximation: rank is the weighted count of the query's words in the searched strings
    (1.0, 0.4, 0.2, 0.1 by field order), the snippet the first searched string."""
    groups = (
        [(1.0, _strings(doc))]
        if not fields
        else [((1.0, 0.4, 0.2, 0.1)[min(i, 3)], _strings(doc.get(f))) for i, f in enumerate(fields)]
    )
    everything = _words(" ".join(_strings(doc)))
    searched = [w for _, strings in groups for w in _words(" ".join(strings))]
    matched = False
    for clause in _clauses(query):
        if all(_has(everything if neg else searched, words) != neg for neg, words in clause):
            matched = True
    if not matched:
        return None
    wanted = {w for clause in _clauses(query) for neg, words in clause if not neg for w in words}
    rank = sum(weight * sum(_words(s).count(w) for s in strings for w in wanted) for weight, strings in groups)
    first = next((s for _, strings in groups for s in strings), "")
    return rank, first[:200]
