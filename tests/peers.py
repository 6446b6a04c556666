"""Real protocol peers for tests, on loopback: a Radicale CalDAV server.

Radicale runs as a subprocess (htpasswd users in plain text, a rights file): `owner` may read
and write the calendars under /owner/, `reader` may only read them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caldav.davclient import DAVClient

from tests.hosting import free_port

PASSWORDS = {"owner": "owner-Pa55-8e1f", "reader": "reader-Pa55-03ab"}
WRONG_PASSWORD = "wrong-Pa55-c4d2e9"
DAY = {"start": "2030-01-07T00:00:00+00:00", "end": "2030-01-08T00:00:00+00:00"}

RIGHTS = """\
[root]
user: .+
collection:
permissions: R

[principal]
user: .+
collection: {user}
permissions: RW

[owner-calendars]
user: owner
collection: owner/[^/]+
permissions: rw

[reader-calendars]
user: reader
collection: owner/[^/]+
permissions: r
"""


@dataclass(frozen=True)
class Radicale:
    base: str

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def connection(self, url: str, user: str = "owner", password: str | None = None) -> dict[str, Any]:
        secret = PASSWORDS[user] if password is None else password
        return {"url": url, "username": user, "password": secret}


@contextmanager
def running_radicale(folder: Path) -> Iterator[Radicale]:
    """Radicale on a free loopback port, its files under `folder`; stopped on exit."""
    port = free_port()
    (folder / "users").write_text("".join(f"{user}:{password}\n" for user, password in PASSWORDS.items()))
    (folder / "rights").write_text(RIGHTS)
    (folder / "config").write_text(
        f"[server]\nhosts = 127.0.0.1:{port}\n"
        # plain: the one htpasswd encryption the installed Radicale reads without bcrypt
        f"[auth]\ntype = htpasswd\nhtpasswd_filename = {folder / 'users'}\nhtpasswd_encryption = plain\n"
        "delay = 0\n"  # no deliberate pause after a refused login
        f"[rights]\ntype = from_file\nfile = {folder / 'rights'}\n"
        f"[storage]\nfilesystem_folder = {folder / 'collections'}\n"
        "[logging]\nlevel = warning\n"
    )
    with (folder / "radicale.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "radicale", "--config", str(folder / "config")], stdout=log, stderr=log
        )
    try:
        _wait_for_listener(process, port, folder / "radicale.log")
        yield Radicale(f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_for_listener(process: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float = 20) -> None:
    """Poll until `process` accepts connections on `port` (it has no readiness signal)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, f"radicale exited: {log.read_text()}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"radicale did not listen within {timeout_s} s: {log.read_text()}"
            time.sleep(0.05)


def new_calendar(radicale: Radicale) -> str:
    """A new, empty calendar collection of `owner`, made with MKCALENDAR."""
    cal_id = uuid.uuid4().hex
    with DAVClient(url=f"{radicale.base}/", username="owner", password=PASSWORDS["owner"]) as client:
        calendar = client.principal().make_calendar(name="Team", cal_id=cal_id)
    return str(calendar.url)
