"""The egress bridge outside any sandbox: a standalone script run by the base interpreter with
`-I -S`, between a TCP port and a unix socket (here an echo server's), half-close kept."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_host.sandbox.interpreter import base_executable

BRIDGE = Path(__file__).resolve().parents[2] / "mcp_host" / "egress" / "bridge.py"


@pytest.fixture
def echo_socket() -> Iterator[Path]:
    """A unix socket answering each connection with b"echo:" + all it read, once its peer half-closed."""
    folder = Path(tempfile.mkdtemp(prefix="bridge-", dir="/tmp"))
    path = folder / "e.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                conn.sendall(b"echo:" + data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(5)
    path.unlink()
    folder.rmdir()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_bytes_cross_both_ways_and_a_half_close_still_gets_its_answer(echo_socket: Path) -> None:
    port = free_port()
    client = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}))\n"
        "s.sendall(b'x' * 200000); s.shutdown(socket.SHUT_WR)\n"
        "data = b''\n"
        "while chunk := s.recv(65536): data += chunk\n"
        "print(len(data), data[:7])\n"
    )
    argv = [str(base_executable()), "-I", "-S", str(BRIDGE), "--listen", f"127.0.0.1:{port}"]
    done = subprocess.run(
        [*argv, "--socket", str(echo_socket), "--", sys.executable, "-c", client],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "200005 b'echo:xx'\n", "")


def test_a_bridge_that_cannot_listen_exits_non_zero_saying_why(echo_socket: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        argv = [str(base_executable()), "-I", "-S", str(BRIDGE), "--listen", f"127.0.0.1:{port}"]
        done = subprocess.run(
            [*argv, "--socket", str(echo_socket), "--", "true"], capture_output=True, text=True, timeout=30
        )
    assert (done.returncode, done.stdout) == (71, "")
    assert done.stderr == f"egress-bridge: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_a_bridge_without_a_command_shows_its_usage(echo_socket: Path) -> None:
    done = subprocess.run(
        [str(base_executable()), "-I", "-S", str(BRIDGE), "--listen", "127.0.0.1:1", "--socket", "/x", "--"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (
        64,
        "egress-bridge: usage: egress-bridge.py --listen HOST:PORT --socket PATH -- COMMAND [ARGS...]\n",
    )


def test_a_short_answer_in_two_writes_crosses_without_waiting_for_an_acknowledgement() -> None:
    """A relay must send what it read at once: with Nagle's algorithm on its client socket, the
    second short write of an answer (an HTTP head, then its body) waits for the client's
    delayed acknowledgement, about 40 ms on Linux once a connection leaves its quick-ack start.
    Measured by bench/egress.py: 100 small https requests took 9.7x direct with it, 1.5x without."""
    folder = Path(tempfile.mkdtemp(prefix="bridge-", dir="/tmp"))
    path = folder / "p.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()

    def serve() -> None:  # each byte asked is answered by two writes, 5 ms apart
        conn, _ = listener.accept()
        with conn:
            while conn.recv(1):
                conn.sendall(b"h")
                time.sleep(0.005)
                conn.sendall(b"b")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = free_port()
    client = (
        "import socket, statistics, time\n"
        f"s = socket.create_connection(('127.0.0.1', {port}))\n"
        "s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
        "gaps = []\n"
        "for _ in range(60):\n"
        "    s.sendall(b'?'); assert s.recv(1) == b'h'; at = time.monotonic()\n"
        "    assert s.recv(1) == b'b'; gaps.append(time.monotonic() - at)\n"
        "print(round(statistics.median(gaps[20:]) * 1000))\n"
    )
    argv = [str(base_executable()), "-I", "-S", str(BRIDGE), "--listen", f"127.0.0.1:{port}"]
    try:
        done = subprocess.run(
            [*argv, "--socket", str(path), "--", sys.executable, "-c", client],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        listener.close()
        thread.join(5)
        path.unlink()
        folder.rmdir()
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 25, f"median gap {done.stdout.strip()} ms between an answer's two writes"
