"""The processes the bench starts: spawn, wait until ready, stop, and sweep leftovers.

Every server (host, uvicorn echo, FastMCP proxy) runs in its own session so a Ctrl-C in the
terminal reaches only the bench, which then stops them itself. Anything still alive at the end
whose command line or working directory is inside the bench's temporary folder (the host's
sandboxed children, its embedded PostgreSQL, stdio echo children) is killed by `sweep`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2
import psutil

__all__ = ["Proc", "Processes", "free_port", "wait_http"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    """One started server process and the file its output goes to."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started_at: float = field(default_factory=time.perf_counter)

    def tail(self, lines: int = 25) -> str:
        """The last lines of its output, for error messages."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Processes:
    """Every process the bench started; `close()` stops them all and sweeps `workdir`."""

    workdir: Path
    running: list[Proc] = field(default_factory=list)

    def spawn(self, name: str, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None) -> Proc:
        log = self.workdir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
            )
        proc = Proc(name, popen, log)
        self.running.append(proc)
        return proc

    def stop(self, proc: Proc, grace_s: float = 20.0) -> None:
        """SIGTERM the process (a graceful shutdown), then SIGKILL its group after `grace_s`."""
        popen = proc.popen
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                print(f"[bench] {proc.name} did not stop within {grace_s:g} s; killing it")
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        popen.wait()
        if proc in self.running:
            self.running.remove(proc)

    def close(self) -> None:
        """Stop every running process (last started first), then sweep leftovers."""
        for proc in reversed(list(self.running)):
            self.stop(proc)
        left = sweep(self.workdir)
        if left:
            print(f"[bench] killed {left} leftover process(es) under {self.workdir}")


def sweep(workdir: Path) -> int:
    """Terminate (then kill) every process whose argv or cwd mentions `workdir`; return how many."""
    mark = str(workdir)
    me = os.getpid()
    found: list[psutil.Process] = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        if p.info["pid"] == me:
            continue
        cmdline = " ".join(p.info["cmdline"] or ())
        if mark in cmdline or str(p.info["cwd"] or "").startswith(mark):
            found.append(p)
    for p in found:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(found, timeout=5)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return len(found)


async def wait_http(proc: Proc, url: str, *, want: int | None = None, timeout_s: float = 90.0) -> float:
    """Poll `url` until it answers (with status `want`, if given); return seconds since the spawn.

    Raises RuntimeError with the log's tail if the process exits or the time runs out.
    """
    async with httpx2.AsyncClient(timeout=2.0) as http:
        while True:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")
            try:
                response = await http.get(url)
                if want is None or response.status_code == want:
                    return time.perf_counter() - proc.started_at
            except httpx2.TransportError:
                pass
            if time.perf_counter() - proc.started_at > timeout_s:
                raise RuntimeError(f"{proc.name} not ready at {url} after {timeout_s:g} s:\n{proc.tail()}")
            await anyio.sleep(0.02)
