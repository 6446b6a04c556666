"""`<data dir>/host.json`: where the running host listens, for the command line to find it.

Above: the lifespan (`lifespan.py`) writes the file when the host is ready and removes it
when the host stops; the command line (`cli.py`) reads it, so `mcp-host caps list`, `owner`,
`owner token` and `session new` need only `--data-dir`. Below: the file system.

A file whose process is gone (a host killed with SIGKILL) reads as no host at all.
"""

from __future__ import annotations

import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

__all__ = ["HOST_FILE", "HostRecord", "listen_url", "read_host_file", "remove_host_file", "write_host_file"]

HOST_FILE = "host.json"


class HostRecord(BaseModel):
    """What `host.json` holds."""

    url: str  # reaches the host from this machine (a wildcard address becomes loopback)
    pid: int
    started_at: datetime


def listen_url(host: str, port: int) -> str:
    """A URL that reaches a server listening on `host`:`port` from this machine."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def write_host_file(data_dir: Path, url: str) -> Path:
    """Write `<data_dir>/host.json` (mode 0600) naming `url` and this process; return its path.

    Written under a temporary name and renamed, so a reader sees a whole file or none.
    """
    record = HostRecord(url=url, pid=os.getpid(), started_at=datetime.now(UTC))
    path = data_dir / HOST_FILE
    tmp = data_dir / f".{HOST_FILE}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(record.model_dump_json() + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def remove_host_file(data_dir: Path) -> None:
    """Remove `<data_dir>/host.json` if this process wrote it (another host's file stays)."""
    record = _read(data_dir / HOST_FILE)
    if record is not None and record.pid == os.getpid():
        (data_dir / HOST_FILE).unlink(missing_ok=True)


def read_host_file(data_dir: Path) -> HostRecord | None:
    """The host running with `data_dir`, or None: no file, an unreadable one, or its process gone."""
    record = _read(data_dir / HOST_FILE)
    if record is None or not _alive(record.pid):
        return None
    return record


def _read(path: Path) -> HostRecord | None:
    try:
        return HostRecord.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True
