"""An embedded PostgreSQL under the host's data directory, for installs without a database URL.

Below: pgserver, which ships PostgreSQL 16 binaries, so no PostgreSQL need be installed.
Above: `database.open_database`, the only caller.

What pgserver 0.1.4 does, and what this module adds:

- `get_server` runs initdb on first use and starts postgres with pg_ctl, listening on no TCP
  address, only on a unix socket. Authentication is `trust`, so the socket directory's
  permissions are the only gate. The socket goes into the data directory (mode 0700) unless
  that path is too long for a socket, in which case pgserver falls back to a world-writable
  runtime directory; this module refuses such a path instead.
- As root, pgserver runs postgres as the system user `pgserver` (creating it), chowns the data
  directory to it and adds g+rx,o+rx to every directory above it. pgserver creates the user
  outside any lock, so on a machine where it does not exist yet, several processes starting
  at once (pytest's workers, `scripts/run` beside a test run) each run `useradd`, and one of
  them saw the user half-made: its `initdb` failed with "could not change permissions of
  directory … Operation not permitted". This module creates the user first, once, under a
  lock every process on the machine shares (`_ensure_system_user`).
- pgserver stops the server only when the last process in `<pgdata>/.handle_pids.json` lets
  go. A host killed with SIGKILL stays in that list, which would keep the next host from ever
  stopping the server, so pids of processes that are gone are dropped before starting.
- A postmaster still running from a killed host is adopted. pgserver only checks that the pid
  in `postmaster.pid` exists; after a container restart it may belong to an unrelated
  process, or to an unreaped zombie. A pid file whose pid is not a live postgres process
  working in this data directory is removed so that a fresh server starts (PostgreSQL
  recovers from its WAL as after any crash).
- pgserver registers an atexit handler; this module stops the server itself on exit and
  unregisters the handler, so the explicit stop is the one that runs.
- A postmaster that dies while the host runs (`kill -9`, the OOM killer) is noticed at once
  (`EmbeddedPostgres.wait_exit`, a pidfd) and started again by `restart` when the database
  watch asks. Its orphaned postmaster may stay a zombie (nobody reaps it), and both
  `postmaster.pid` and the socket's lock file still name its pid, which PostgreSQL would take
  for a live server: lock files whose pid is not a live postgres of this data directory are
  removed before every start.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import pwd
import subprocess
import tempfile
import threading
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import anyio
import anyio.to_thread
import psutil

from mcp_host.errors import InternalError

if TYPE_CHECKING:
    from pgserver.postgres_server import PostgresServer

__all__ = ["EmbeddedPostgres", "EmbeddedPostgresError", "embedded_postgres", "embedded_server"]

_logger = logging.getLogger("mcp_host.store.database")

# pgserver's start and stop share class-level state (its instance table and one interprocess
# lock object), so this process makes one such call at a time.
_pgserver_calls = threading.Lock()

# The system user pgserver runs postgres as when started by root (fixed by pgserver).
_SYSTEM_USER = "pgserver"

# Linux sun_path holds 108 bytes including the terminating NUL.
_SOCKET_PATH_MAX = 107
_SOCKET_NAME = ".s.PGSQL.5432"


class EmbeddedPostgresError(InternalError):
    """The embedded server cannot be started safely here; the message says why."""


class EmbeddedPostgres:
    """A running embedded server: where to connect, whether its postmaster lives, restarting it."""

    def __init__(self, server: PostgresServer) -> None:
        self._server = server
        self.dsn = _dsn(server)
        """The asyncpg DSN (a unix socket in the data directory); the same after a restart."""

    @property
    def pid(self) -> int:
        """The postmaster's pid (of the latest start)."""
        return self._server.get_postmaster_info().pid

    def running(self) -> bool:
        """Whether the postmaster is a live postgres process of this data directory."""
        return _is_live_postmaster_of(self.pid, self._server.pgdata)

    async def wait_exit(self) -> None:
        """Return once the postmaster has exited (at once if it is not running)."""
        try:
            fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return
        try:
            if self.running():  # the pid may have died, or been reused, before it was opened
                await anyio.wait_readable(fd)
        finally:
            os.close(fd)

    async def restart(self) -> None:
        """Start the server again after its postmaster died (PostgreSQL recovers from its WAL).

        A postmaster that is in fact running is adopted, not replaced. pgserver's errors
        (pg_ctl failing or timing out) pass through, after it logged the server's log.
        """
        await anyio.to_thread.run_sync(_restart, self._server)


@asynccontextmanager
async def embedded_server(pgdata: Path) -> AsyncIterator[EmbeddedPostgres]:
    """Run PostgreSQL with its data in `pgdata` (created if missing); yield the running server.

    Adopts a server another host process left running on the same directory. Stops the server
    on exit unless another live process still uses it. Raises `EmbeddedPostgresError` when
    `pgdata` is too long for a private unix socket or is already open in this process;
    pgserver's own errors (initdb or pg_ctl failing) pass through, after it logged the
    server's log.
    """
    _import_pgserver()
    server = await anyio.to_thread.run_sync(_start, pgdata)
    try:
        yield EmbeddedPostgres(server)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_stop, server)


@asynccontextmanager
async def embedded_postgres(pgdata: Path) -> AsyncIterator[str]:
    """`embedded_server`, yielding only its asyncpg DSN."""
    async with embedded_server(pgdata) as server:
        yield server.dsn


def _import_pgserver() -> None:
    """Import pgserver once, on the event loop's thread, before any worker thread uses it.

    pgserver looks up the user's runtime directory (for its lock file) when it is imported, and
    without XDG_RUNTIME_DIR (a root shell, a container, CI) platformdirs warns about the
    fallback it takes: a warning at every start that the user can do nothing about. It is
    silenced for that import only (`catch_warnings` is not thread-safe, hence no worker thread).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
        import pgserver.postgres_server  # noqa: F401


def _start(pgdata: Path) -> PostgresServer:
    pgdata = pgdata.expanduser().resolve()
    socket = pgdata / _SOCKET_NAME
    if len(os.fsencode(socket)) > _SOCKET_PATH_MAX:
        raise EmbeddedPostgresError(
            f"{pgdata}: path too long for the database's unix socket ({socket}); choose a shorter data directory"
        )
    pgdata.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.geteuid() == 0:
        _ensure_system_user()
    with _pgserver_calls:
        from pgserver.postgres_server import PostgresServer, get_server

        if pgdata in PostgresServer._instances:
            raise EmbeddedPostgresError(f"{pgdata}: the embedded database is already open in this process")
        with PostgresServer._lock:
            _forget_dead_handles(pgdata)
            _remove_stale_lock_files(pgdata)
        server = get_server(pgdata, cleanup_mode="stop")
        info = server.get_postmaster_info()
    _logger.info(
        "embedded PostgreSQL (pid %s%s): data in %s, socket in %s, server log %s",
        info.pid,
        f", run as system user {server.system_user!r}" if server.system_user else "",
        pgdata,
        info.socket_dir,
        server.log,
    )
    return server


def _ensure_system_user() -> None:
    """Create pgserver's system user unless it exists, one process on the machine at a time.

    The lock is a file of root's (only root gets here) that every process of every host and
    test run on the machine takes, whatever its runtime directory: pgserver's own lock lives
    in the user's runtime directory, which differs between a login shell and CI.
    """
    with _machine_lock("mcp-host-pgserver-user.lock"):
        try:
            pwd.getpwnam(_SYSTEM_USER)
            return
        except KeyError:
            pass
        _logger.info("embedded PostgreSQL: creating the system user %r to run it as", _SYSTEM_USER)
        # The same user pgserver would make (`useradd -s /bin/bash pgserver`), so both agree.
        subprocess.run(["useradd", "--shell", "/bin/bash", _SYSTEM_USER], check=True, capture_output=True, text=True)


@contextmanager
def _machine_lock(name: str) -> Iterator[None]:
    """Hold an exclusive `flock` on `name` in /run/lock (or the temp dir) until exit."""
    directory = Path("/run/lock")
    if not directory.is_dir():
        directory = Path(tempfile.gettempdir())
    fd = os.open(directory / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _restart(server: PostgresServer) -> None:
    with _pgserver_calls:
        from pgserver.postgres_server import PostgresServer

        with PostgresServer._lock:
            _remove_stale_lock_files(server.pgdata, quiet=True)
            server.ensure_postgres_running()
    _logger.info("embedded PostgreSQL restarted (pid %s)", server.get_pid())


def _stop(server: PostgresServer) -> None:
    with _pgserver_calls:
        from pgserver.postgres_server import PostgresServer

        try:
            server.cleanup()
        finally:
            atexit.unregister(server._cleanup)
            PostgresServer._instances.pop(server.pgdata, None)
    others = server.global_process_id_list.get()
    if others:
        _logger.info("embedded PostgreSQL left running for processes %s", others)
    else:
        _logger.info("embedded PostgreSQL stopped (data in %s)", server.pgdata)


def _dsn(server: PostgresServer) -> str:
    info = server.get_postmaster_info()
    if info.socket_dir is None:  # pgserver listens on TCP only on Windows
        return server.get_uri()
    host = quote(str(info.socket_dir), safe="/")
    return f"postgresql://{server.postgres_user}@/postgres?host={host}&port={info.port or 5432}"


def _forget_dead_handles(pgdata: Path) -> None:
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except FileNotFoundError:
        return
    except ValueError:  # torn write by a killed process: nobody's handle can be trusted
        pids = []
    live = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
    if live != pids:
        gone = sorted(set(pids) - set(live))
        _logger.info("embedded PostgreSQL: dropping handles of exited processes %s", gone)
        handles.write_text(json.dumps(live))


def _remove_stale_lock_files(pgdata: Path, *, quiet: bool = False) -> None:
    """Remove `postmaster.pid` and the socket's lock file unless they name a live postmaster.

    PostgreSQL refuses to start while either names a pid that exists, even an unrelated
    process or the zombie of a killed postmaster. `quiet`: a restart after a crash the
    database watch already reported (logged at info, not as a warning).
    """
    for lock_file in (pgdata / "postmaster.pid", pgdata / f"{_SOCKET_NAME}.lock"):
        try:
            first_line = lock_file.read_text().split("\n", 1)[0].strip()
        except FileNotFoundError:
            continue
        pid = int(first_line) if first_line.isdigit() else None
        if pid is not None and _is_live_postmaster_of(pid, pgdata):
            return  # a live server: leave both alone (pgserver adopts it)
        _logger.log(
            logging.INFO if quiet else logging.WARNING,
            "embedded PostgreSQL: removing stale %s (pid %s is not a running postgres of this "
            "data directory); the server recovers from its WAL",
            lock_file,
            first_line,
        )
        lock_file.unlink()


def _is_live_postmaster_of(pid: int, pgdata: Path) -> bool:
    try:
        process = psutil.Process(pid)
        if process.name() != "postgres" or process.status() == psutil.STATUS_ZOMBIE:
            return False
        try:
            # The postmaster's working directory is its data directory.
            return Path(process.cwd()).resolve() == pgdata
        except psutil.AccessDenied:
            return True  # cannot tell: never remove the pid file of what may be a live server
    except psutil.NoSuchProcess:
        return False
