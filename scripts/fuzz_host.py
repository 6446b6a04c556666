"""`scripts/fuzz`: ten thousand hostile messages per endpoint against a `mcp-host serve` process.

The cases and the checks are `tests/fuzzing.py`'s (the same as `tests/test_fuzz.py`, more of
them); here the host is a process of its own, so its memory is its own and a crash or a
restart is visible: the process must be the same one, alive, at the end. The `egress` endpoint
writes to the gate of a sandboxed child of `test.egress_httpx` (copied with egress to a
loopback site and an echo server this script serves); the host process names its gates' folder
after its pid (`app/early._egress_folder`), which is how the gate is found from outside.
Above: a developer's terminal. Below: `mcp-host serve` and the host's HTTP interface.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO

import anyio
import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.egress.loopback import echo_server  # noqa: E402
from tests.egress_e2e.support import (  # noqa: E402
    Site,
    copy_with_egress,
    fixture_plugin,
    running_site,
    write_hosts_file,
)
from tests.fuzzing import (  # noqa: E402
    ENDPOINTS,
    EgressTarget,
    Fuzzer,
    Target,
    egress_target,
    serves_a_normal_session,
    still_reaches,
)
from tests.hosting import wait_serving  # noqa: E402

PLUGINS = ROOT / "tests" / "fixtures" / "plugins"
EGRESS = "test.egress_httpx"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _start(command: list[str], env: dict[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def _socket(runtime: Path) -> Path | None:
    sockets = sorted(runtime.glob("*.sock"))  # only `notes` names host ops
    return sockets[0] if sockets else None


def _gate_folders(pid: int | str = "*") -> set[Path]:
    """The egress proxy folders of the host process `pid` (of any, by default): a host names its
    folder in the system temp dir after its pid (`app/early._egress_folder`)."""
    return set(Path(tempfile.gettempdir()).glob(f"mcp-host-egress-{pid}-*"))


def _gates(pid: int, stale: set[Path]) -> list[Path]:
    """The egress gates the host process `pid` has open, all `EGRESS`'s (the only plugin here
    with egress); `stale`: folders left before it started by a host killed with the same pid."""
    return sorted(socket for folder in _gate_folders(pid) - stale for socket in folder.glob("*.sock"))


@asynccontextmanager
async def _egress_peers(work: Path) -> AsyncIterator[tuple[Site, int, Path]]:
    """The loopback site and echo server the egress plugin may reach, while inside; with the
    echo server's port and the plugin's copy (its manifest allowing both)."""
    async with running_site() as site, echo_server() as echo:
        allowed = [f"site.example.test:{site.allowed}", f"site.example.test:{echo.port}"]
        (work / "plugins").mkdir()
        plugin = copy_with_egress(fixture_plugin("egress_httpx", allowed, ["site.example.test"]), work / "plugins")
        yield site, echo.port, plugin


async def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    try:
        await wait_serving(url, lambda: process.poll() is None)
    except AssertionError:
        raise SystemExit(f"the host exited during start (code {process.returncode})") from None
    except TimeoutError:
        raise SystemExit("the host did not become healthy within 60 s") from None


async def _fuzz(args: argparse.Namespace, work: Path) -> int:
    async with _egress_peers(work) as (site, echo_port, plugin):
        return await _fuzz_host(args, work, site, echo_port, plugin)


async def _fuzz_host(args: argparse.Namespace, work: Path, site: Site, echo_port: int, plugin: Path) -> int:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    runtime = Path(tempfile.mkdtemp(prefix="fz-"))
    env = {
        **os.environ,
        "MCP_HOST_PLUGINS": f"{PLUGINS / 'echo'}:{PLUGINS / 'notes'}:{plugin}",
        "MCP_HOST_EGRESS_HOSTS_FILE": str(write_hosts_file(work)),
        "MCP_HOST_PIN_TOOLS": "false",
        "MCP_HOST_RUNTIME_DIR": str(runtime),
        "MCP_HOST_CALL_TIMEOUT_S": "5",
    }
    log = (work / "host.log").open("wb")
    command = [
        str(Path(sys.executable).parent / "mcp-host"),
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(work / "data"),
    ]
    stale = _gate_folders()
    process = _start(command, env, log)
    try:
        await _wait_ready(url, process)
        token = (work / "data" / "owner-token").read_text().strip()
        async with httpx2.AsyncClient(timeout=10) as http:
            session = (await http.post(f"{url}/v1/sessions", json={})).json()
        egress = await _egress(url, lambda: _gates(process.pid, stale), echo_port, site)
        target = Target(url, token, session, _socket(runtime), egress)
        rss_start = _rss_mib(process.pid)
        fuzzer = Fuzzer(target, timeout_s=15.0, concurrency=args.concurrency)
        endpoints = args.endpoint or list(ENDPOINTS)
        try:
            for endpoint in endpoints:
                started = time.monotonic()
                before = fuzzer.report.summary()
                if endpoint == "egress":
                    await fuzzer.run(endpoint, args.n, args.seed, lambda: still_reaches(url, egress))
                else:
                    await fuzzer.run(endpoint, args.n, args.seed, lambda: serves_a_normal_session(url))
                after = fuzzer.report.summary()
                print(
                    f"{endpoint:15} {args.n} cases in {time.monotonic() - started:6.1f} s; "
                    f"5xx {after['5xx'] - before['5xx']}, hangs {after['hangs'] - before['hangs']}, "
                    f"malformed {after['malformed'] - before['malformed']}, "
                    f"failed health checks {after['health_failures'] - before['health_failures']}; "
                    f"host RSS {_rss_mib(process.pid):.0f} MiB",
                    flush=True,
                )
        finally:
            await fuzzer.aclose()
        alive = process.poll() is None
        final = await serves_a_normal_session(url) if alive else "the host process is gone"
        summary = fuzzer.report.summary()
        summary |= {
            "host_restarts": 0 if alive else 1,
            "host_rss_mib": {"start": round(rss_start), "end": round(_rss_mib(process.pid)) if alive else None},
            "final_health": final or "ok",
        }
        tracebacks = (work / "host.log").read_text(errors="replace").count("Traceback")
        summary["tracebacks_in_host_log"] = tracebacks
        print(json.dumps(summary, indent=2))
        return 0 if fuzzer.report.ok and alive and final is None and tracebacks == 0 else 1
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        # The host's runtime folder (its sockets) lives in the temp dir, not under `work`: a
        # socket path must stay short. The host is gone, so nothing holds it any more.
        shutil.rmtree(runtime, ignore_errors=True)


async def _egress(url: str, gates: Callable[[], list[Path]], echo_port: int, site: Site) -> EgressTarget:
    """The egress plugin's child started (it fetches the site once) and its gate found."""
    try:
        return await egress_target(
            url,
            EGRESS,
            gates,
            port=echo_port,
            tool="httpx_get",
            fetch=site.url(),
            says=site.says(),
        )
    except AssertionError as failed:
        raise SystemExit(f"the egress plugin's child did not start with one gate: {failed}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000, help="cases per endpoint (default 10000)")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--endpoint", action="append", choices=ENDPOINTS, help="only this endpoint (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (host log, data) and print it")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mcp-host-fuzz-"))
    try:
        return anyio.run(_fuzz, args, work)
    finally:
        if args.keep:
            print(f"work folder: {work}")
        else:
            subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    raise SystemExit(main())
