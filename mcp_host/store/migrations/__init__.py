"""Schema migrations: numbered SQL files applied once each, in order, when the host starts.

Below: asyncpg, on one connection lent by the caller, and the SQL files beside this module.
Above: `database.open_database`, which runs `apply_migrations` before anything else touches
the database.

The files are `mcp_host/migrations/NNN_name.sql`, numbered 001, 002, … without gaps. Each is
applied in its own transaction together with its row in `mcp_host.schema_migrations`, so a
file is either applied and recorded or neither. Replicas that start at once take a session
advisory lock around the whole run: the second waits, then finds nothing left to do.

A file runs under the connection's own `lock_timeout` and `statement_timeout` (the pool's):
a migration that would queue behind live traffic's locks fails the start instead of
stalling every query queued behind it (docs/security.md F5). Keep files short (new tables, nullable
columns); a start that failed this way can simply be retried.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING

from mcp_host.errors import InternalError

if TYPE_CHECKING:
    from ..database import PgConnection

__all__ = [
    "MIGRATIONS_LOCK_ID",
    "Migration",
    "MigrationError",
    "apply_migrations",
    "load_migrations",
]

_logger = logging.getLogger("mcp_host.store.database")

# pg_advisory_lock key for the migration run; any fixed 64-bit value that no other code uses.
MIGRATIONS_LOCK_ID = 0x6D63_7068_6F73_7401  # "mcphost" + 1

_FILE_NAME = re.compile(r"^(?P<version>\d{3})_(?P<name>[a-z0-9]+(?:_[a-z0-9]+)*)\.sql$")

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS mcp_host;
CREATE TABLE IF NOT EXISTS mcp_host.schema_migrations (
    version     int PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
"""


class MigrationError(InternalError):
    """The migration files, or the database's record of them, are not what this host expects.

    Raised at start only; the host refuses to serve rather than run on an unknown schema.
    """


@dataclass(frozen=True)
class Migration:
    """One file: `version` and `name` come from `NNN_name.sql`, `sql` is its text."""

    version: int
    name: str
    sql: str

    def __post_init__(self) -> None:
        if _FILE_NAME.fullmatch(f"{self.version:03d}_{self.name}.sql") is None or self.version < 1:
            raise MigrationError(f"{self.version:03d}_{self.name}: not a migration's version and name")


def load_migrations(directory: Traversable | None = None) -> tuple[Migration, ...]:
    """Read `NNN_name.sql` files from `directory` (default: the package's own), in order.

    Raises `MigrationError` for a `.sql` file whose name breaks the grammar, or for versions
    that do not run 1, 2, … n without gaps or repeats.
    """
    folder = directory if directory is not None else files(__name__)
    found: list[Migration] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_NAME.match(entry.name)
        if match is None:
            raise MigrationError(f"{entry.name}: a migration file is named NNN_lower_words.sql")
        found.append(Migration(int(match["version"]), match["name"], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration versions must run 1..n without gaps or repeats: {versions}")
    return tuple(found)


async def apply_migrations(
    conn: PgConnection,
    migrations: tuple[Migration, ...] | None = None,
    *,
    lock_wait_s: float = 300.0,
) -> list[int]:
    """Apply the migrations this database lacks; return the versions applied now, in order.

    Waits up to `lock_wait_s` for another replica's run. Raises `MigrationError` when a
    recorded version carries another name than the file of that number (the files were
    renumbered after release). Versions recorded in the database but unknown here (a newer
    replica ran first) are logged and left alone.
    """
    todo = load_migrations() if migrations is None else migrations
    # The advisory lock wait honours lock_timeout and statement_timeout; lift both for this
    # wait only and put the pool's values back before the connection goes back to the pool.
    wait_ms = max(1, int(lock_wait_s * 1000))
    await conn.execute(f"SET lock_timeout = {wait_ms}; SET statement_timeout = 0")
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATIONS_LOCK_ID)
    try:
        await conn.execute("RESET lock_timeout; RESET statement_timeout")
        await conn.execute(_BOOTSTRAP)
        recorded = {
            r["version"]: r["name"] for r in await conn.fetch("SELECT version, name FROM mcp_host.schema_migrations")
        }
        _check_recorded(recorded, todo)
        applied: list[int] = []
        for migration in todo:
            if migration.version in recorded:
                continue
            async with conn.transaction():
                # One simple query: the file may hold several statements, or none (asyncpg
                # fails on an empty query). Version and name passed the file-name grammar.
                await conn.execute(
                    f"{migration.sql}\n;\nINSERT INTO mcp_host.schema_migrations (version, name) "
                    f"VALUES ({migration.version:d}, '{migration.name}')"
                )
            _logger.info("applied migration %03d_%s", migration.version, migration.name)
            applied.append(migration.version)
        return applied
    finally:
        await conn.execute("RESET lock_timeout; RESET statement_timeout")
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATIONS_LOCK_ID)


def _check_recorded(recorded: dict[int, str], known: tuple[Migration, ...]) -> None:
    by_version = {m.version: m.name for m in known}
    for version, name in sorted(recorded.items()):
        if version not in by_version:
            _logger.warning(
                "database has migration %03d_%s that this host does not know; a newer host ran it",
                version,
                name,
            )
        elif by_version[version] != name:
            raise MigrationError(
                f"database recorded migration {version:03d} as {name!r}, this host has {by_version[version]!r}"
            )
