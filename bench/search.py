"""`store.search` over ~2000 documents: the median time of one search, by kind of query.

What it measures: `PluginStore.search` (the SQL of `plugin_search`, through the host's pool) on
one owner's collection of `--docs` documents shaped like `corpus.retrieval`'s passages (a
short title and a text of ~`--words` words drawn from a Zipf-like vocabulary, so some words
are in most documents and most words in few). Each query runs `--runs` times; the median and
p90 per query — searching every string, and with `fields: [title, text]` — with how many
documents matched, go to stdout and bench-results/search.json.
The GIN index `records_text` is on, as every plugin schema has it; `--no-index` drops it for
a comparison. An embedded PostgreSQL of its own unless `--database-url` names a server.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from pydantic import SecretStr

from mcp_host.settings import Settings
from mcp_host.store.database import open_database
from mcp_host.store.embedded_postgres import embedded_postgres
from mcp_host.store.plugin_store import PluginStore, PluginStores

RESULTS = Path(__file__).resolve().parent.parent / "bench-results" / "search.json"
VOCABULARY = [f"w{n}" for n in range(20_000)]
WEIGHTS = [1 / (rank + 1) for rank in range(len(VOCABULARY))]  # Zipf: w0 is everywhere
QUERIES = {
    "rare word": "w15000",
    "mid word": "w300",
    "common word": "w3",
    "two words": "w40 w41",
    "phrase": '"w0 w1"',
    "alternatives": "w500 or w600 or w700",
    "no match": "nothing",
}


def _document(rng: random.Random, words: int) -> dict[str, Any]:
    text = " ".join(rng.choices(VOCABULARY, WEIGHTS, k=words))
    return {"corpus": "public", "title": " ".join(rng.choices(VOCABULARY, WEIGHTS, k=6)), "text": text}


async def _measure(store: PluginStore, query: str, runs: int, fields: list[str] | None) -> dict[str, Any]:
    times, found = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        hits = await store.search("bench", "passages", query, fields=fields, limit=8)
        times.append((time.perf_counter() - start) * 1000)
        found = len(hits)
    times.sort()
    return {"median_ms": round(statistics.median(times), 2), "p90_ms": round(times[int(runs * 0.9)], 2), "hits": found}


async def _run(dsn: str, args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    settings = Settings(database_url=SecretStr(dsn), data_dir=data_dir)
    async with open_database(settings) as database:
        store = await PluginStores(database.pool).ensure("capability", "bench.search")
        rng = random.Random(7)
        rows = [("bench", "passages", _document(rng, args.words)) for _ in range(args.docs)]
        await database.pool.executemany(
            f'INSERT INTO "{store.schema}".records (owner_id, collection, doc) VALUES ($1, $2, $3)', rows
        )
        if args.no_index:
            await database.pool.execute(f'DROP INDEX "{store.schema}".records_text')
        await database.pool.execute(f'VACUUM ANALYZE "{store.schema}".records')
        matched = {
            name: await database.pool.fetchval(
                f"SELECT count(*) FROM \"{store.schema}\".records WHERE jsonb_to_tsvector('simple'::regconfig, doc,"
                f" '[\"string\"]'::jsonb) @@ websearch_to_tsquery('simple'::regconfig, $1)",
                query,
            )
            for name, query in QUERIES.items()
        }
        report: dict[str, Any] = {"docs": args.docs, "words_per_doc": args.words, "index": not args.no_index}
        for label, fields in (("all_strings", None), ("fields_title_text", ["title", "text"])):
            results = {name: await _measure(store, query, args.runs, fields) for name, query in QUERIES.items()}
            for name, result in results.items():
                result["matching_docs"] = matched[name]
            report[label] = results
        return report


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--words", type=int, default=400)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--no-index", action="store_true")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcp-host-bench-search-") as tmp:
        if args.database_url:
            report = await _run(args.database_url, args, Path(tmp))
        else:
            async with embedded_postgres(Path(tmp) / "pg") as dsn:
                report = await _run(dsn, args, Path(tmp))
    print(json.dumps(report, indent=2))  # noqa: T201 - a bench prints its report
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    anyio.run(main)
