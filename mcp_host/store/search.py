"""Ranked full-text search over a plugin's documents: the SQL.

Above: `plugin_store` (`PluginStore.search` and the schema's `text_vector` column), and
through it the host op `store.search`; `checks` checks its arguments, and the in-memory
stores match with the plugin contract's `search_match` instead. Below: PostgreSQL's text
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

__all__ = ["ALL_TEXT", "MAX_RERANK", "RERANK_FACTOR", "search_sql"]

_WEIGHTS = "ABCD"
# Every string value of the doc, at any depth: what `text_vector` stores.
ALL_TEXT = """jsonb_to_tsvector('simple'::regconfig, doc, '["string"]'::jsonb)"""
RERANK_FACTOR = 5
MAX_RERANK = 200
_QUERY = "websearch_to_tsquery('simple'::regconfig, $3)"
_HEADLINE = 'MaxFragments=2, MaxWords=30, MinWords=10, FragmentDelimiter=" … ", StartSel=**, StopSel=**'


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
