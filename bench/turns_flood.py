"""What one public session can write into the database in a minute through the turns routes
(issue 26, defect 5: 36.5 MB in 5 s before the caps). Not part of `scripts/bench`.

Starts `mcp-host serve` (no plugins) on an embedded PostgreSQL of its own, opens one public
visitor session and, for `--seconds`, sends from `--concurrency` workers the largest turns a
request may carry (a 40,000-byte message, then a 24,000-byte answer, random hex that TOAST
hardly compresses: 64,000 bytes a turn) until the session refuses them, then the smallest
(`hi`), counting the answers by status.
Reports the rows stored and how much the sessions, turns and receipts tables (rows, TOAST and
indexes) and the whole database grew. `--uncapped` raises the per-session caps as far as
the settings allow (the body cap, 64 KiB, stays), as the host was before them.

    .venv/bin/python bench/turns_flood.py [--seconds 60] [--concurrency 8] [--uncapped]
"""

from __future__ import annotations

import argparse
import json
import secrets
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx2
from servers import bare_host

from mcp_host.store.embedded_postgres import embedded_postgres

UNCAPPED = {
    "MCP_HOST_SESSION_MAX_TURNS": str(10**9),
    "MCP_HOST_PRINCIPAL_TURNS_PER_MINUTE": str(10**9),
    "MCP_HOST_SESSION_MAX_TURN_BYTES": str(10**15),
    "MCP_HOST_TURN_MAX_BYTES": str(10**9),
}
TABLES = "ARRAY['mcp_host.sessions', 'mcp_host.turns', 'mcp_host.receipts']::regclass[]"


async def _sizes(conn: asyncpg.Connection) -> dict[str, int]:
    tables = await conn.fetchval(f"SELECT sum(pg_total_relation_size(t)) FROM unnest({TABLES}) AS t")
    database = await conn.fetchval("SELECT pg_database_size(current_database())")
    return {"tables": int(tables), "database": int(database)}


async def _flood(url: str, seconds: float, concurrency: int) -> dict[str, Any]:
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(timeout=30, limits=limits) as http:
        opened = await http.post(f"{url}/v1/sessions", json={})
        opened.raise_for_status()
        session = opened.json()
        turns = f"{url}/v1/sessions/{session['session_id']}/turns"
        headers = {"Authorization": f"Bearer {session['token']}"}
        statuses: Counter[str] = Counter()
        large = [True]
        deadline = time.monotonic() + seconds

        async def worker() -> None:
            while time.monotonic() < deadline:
                message = secrets.token_hex(20_000) if large[0] else "hi"
                answer = await http.post(turns, json={"message": message}, headers=headers)
                statuses[f"open {answer.status_code}"] += 1
                if answer.status_code != 201:
                    large[0] = False
                    continue
                if message != "hi":
                    n = answer.json()["turn"]
                    text = secrets.token_hex(12_000)
                    said = await http.post(f"{turns}/{n}/answer", json={"text": text}, headers=headers)
                    statuses[f"answer {said.status_code}"] += 1

        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
    return {"statuses": dict(sorted(statuses.items()))}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--uncapped", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcp-host-bench-turns-") as tmp:
        async with embedded_postgres(Path(tmp) / "pg") as dsn:
            settings = {"MCP_HOST_DATABASE_URL": dsn, **(UNCAPPED if args.uncapped else {})}
            async with bare_host("mcp-host-bench-turns-host-", settings) as host:
                conn = await asyncpg.connect(dsn)
                try:
                    before = await _sizes(conn)
                    started = time.monotonic()
                    report = await _flood(host.url, args.seconds, args.concurrency)
                    report["seconds"] = round(time.monotonic() - started, 1)
                    after = await _sizes(conn)
                    rows = await conn.fetchrow(
                        "SELECT count(*) AS turns, coalesce(sum(octet_length(message)"
                        " + coalesce(octet_length(answer), 0)), 0) AS text_bytes FROM mcp_host.turns"
                    )
                finally:
                    await conn.close()
    assert rows is not None
    report |= {
        "caps": "uncapped" if args.uncapped else "default",
        "turns_stored": rows["turns"],
        "text_bytes": rows["text_bytes"],
        "tables_grew_bytes": after["tables"] - before["tables"],
        "database_grew_bytes": after["database"] - before["database"],
    }
    print(json.dumps(report, indent=2))  # noqa: T201 - a bench prints its report


if __name__ == "__main__":
    anyio.run(main)
