"""The egress bridge: run inside a sandbox, it carries the child's TCP connections to 127.0.0.1:3128
(its proxy variables) to the host's egress proxy on a unix socket, byte for byte, then becomes
the child's command.

    <base python> -I -S /run/mcp-host/egress-bridge.py --listen 127.0.0.1:3128 \\
        --socket /run/mcp-host/egress.sock -- COMMAND ARGS...

It binds and listens first (so the child never finds the port closed), then forks twice: the
grandchild, re-parented to the sandbox's init, with stdin and stdout on /dev/null (the child's
MCP stdio is not its to touch) and stderr kept, serves the connections; the original process
execs COMMAND, which keeps the pid and the stdio the host spawned. The sandbox's pid namespace
ends with COMMAND (bwrap's init exits, the kernel kills the rest); without one, the bridge
still leaves within a second of COMMAND ending (it watches COMMAND's pid).

Standalone, standard library only (it is bound alone into the sandbox; `-S`: no site-packages),
one thread: a selector loop, so 1,000 connections cost 2,000 fds and no task. It never speaks
HTTP: the host's proxy reads the requests, decides and answers. Above: `sandbox.bwrap`, which
binds it and wraps the command. Below: the kernel.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import sys
import time

__all__ = ["main"]

_CHUNK = 64 * 1024
_CONNECT_PATIENCE_S = 10.0  # the proxy's listen queue full: retry this long, then drop the client
_RETRY_S = 0.05
_WATCH_S = 1.0
_USAGE = "usage: egress-bridge.py --listen HOST:PORT --socket PATH -- COMMAND [ARGS...]"


class _Side:
    """One socket of a pair: bytes read from its peer waiting to be written to it, and whether
    its peer has sent everything (then this side's write half is shut once `pending` is out)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pending = b""
        self.peer_done = False
        self.write_shut = False
        self.peer: _Side


class _Bridge:
    def __init__(self, listener: socket.socket, path: str, watched: int) -> None:
        self.listener = listener
        self.path = path
        self.watched = watched
        self.selector = selectors.DefaultSelector()
        # (client, its upstream or None while there is no fd for one, deadline)
        self.waiting: list[tuple[socket.socket, socket.socket | None, float]] = []
        self.accepting = True
        self.selector.register(listener, selectors.EVENT_READ, None)

    def serve(self) -> None:
        next_watch = time.monotonic() + _WATCH_S
        while True:
            timeout = _RETRY_S if self.waiting or not self.accepting else _WATCH_S
            for key, events in self.selector.select(timeout):
                if key.data is None:
                    self._accept()
                else:
                    self._ready(key.data, events)
            self._retry_waiting()
            if not self.accepting and not self.waiting:
                self._resume_accepting()
            now = time.monotonic()
            if now >= next_watch:
                next_watch = now + _WATCH_S
                if not _alive(self.watched):
                    return

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of fds: stop accepting for a moment (the clients wait in the listen
                    # queue) rather than spin or fall over.
                    self._pause_accepting()
                return
            client.setblocking(False)
            # A relay sends what it read at once: without this, Nagle holds a short write back
            # until the client acknowledges the last one (a response's head, then its body).
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._connect(client, None, time.monotonic() + _CONNECT_PATIENCE_S)
            if not self.accepting:
                return

    def _connect(self, client: socket.socket, upstream: socket.socket | None, deadline: float) -> None:
        """Carry `client` to a new connection on the proxy's socket; while there is no fd for it,
        or the proxy's queue is full, try again shortly (until `deadline`, then drop the client)."""
        if upstream is None:
            try:
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            except OSError:
                self._wait(client, None, deadline)
                self._pause_accepting()  # out of fds: let the clients wait in the listen queue
                return
            upstream.setblocking(False)
        try:
            upstream.connect(self.path)
        except (BlockingIOError, InterruptedError):
            self._wait(client, upstream, deadline)
            return
        except OSError as exc:
            _say(f"cannot reach the host's egress proxy: {exc.strerror or exc}")
            _close(client, upstream)
            return
        a, b = _Side(client), _Side(upstream)
        a.peer, b.peer = b, a
        self.selector.register(client, selectors.EVENT_READ, a)
        self.selector.register(upstream, selectors.EVENT_READ, b)

    def _wait(self, client: socket.socket, upstream: socket.socket | None, deadline: float) -> None:
        if time.monotonic() < deadline:
            self.waiting.append((client, upstream, deadline))
        else:
            _close(client, *(() if upstream is None else (upstream,)))

    def _pause_accepting(self) -> None:
        if self.accepting:
            self.selector.unregister(self.listener)
            self.accepting = False

    def _retry_waiting(self) -> None:
        waiting, self.waiting = self.waiting, []
        for client, upstream, deadline in waiting:
            self._connect(client, upstream, deadline)

    def _resume_accepting(self) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.accepting = True

    def _ready(self, side: _Side, events: int) -> None:
        try:
            if events & selectors.EVENT_WRITE:
                self._flush(side)
            if events & selectors.EVENT_READ:
                self._read(side)
        except OSError:  # a reset, a broken pipe: the pair is over
            self._drop(side)

    def _read(self, side: _Side) -> None:
        if side.sock.fileno() < 0:  # the pair ended while flushing
            return
        data = side.sock.recv(_CHUNK)
        peer = side.peer
        if data:
            peer.pending += data
        else:
            peer.peer_done = True
        self._flush(peer)
        self._update(side)

    def _flush(self, side: _Side) -> None:
        if side.pending:
            try:
                sent = side.sock.send(side.pending)
            except BlockingIOError:
                sent = 0
            side.pending = side.pending[sent:]
        if not side.pending and side.peer_done and not side.write_shut:
            side.write_shut = True
            try:
                side.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        if side.write_shut and side.peer.write_shut:
            self._drop(side)
            return
        self._update(side)
        self._update(side.peer)  # its reads resume once this side's backlog is out

    def _update(self, side: _Side) -> None:
        """Read from a side while its peer's backlog is empty and it has not ended; write to
        it while it has a backlog."""
        if side.sock.fileno() < 0:
            return
        events = 0
        if not side.peer.peer_done and not side.peer.pending:
            events |= selectors.EVENT_READ
        if side.pending:
            events |= selectors.EVENT_WRITE
        registered = _is_registered(self.selector, side.sock)
        if events and registered:
            self.selector.modify(side.sock, events, side)
        elif events:
            self.selector.register(side.sock, events, side)
        elif registered:
            self.selector.unregister(side.sock)

    def _drop(self, side: _Side) -> None:
        for one in (side, side.peer):
            if one.sock.fileno() >= 0:
                if _is_registered(self.selector, one.sock):
                    self.selector.unregister(one.sock)
                one.sock.close()
        if not self.accepting and not self.waiting:
            self._resume_accepting()


def _is_registered(selector: selectors.BaseSelector, sock: socket.socket) -> bool:
    try:
        selector.get_key(sock)
    except KeyError:
        return False
    return True


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        sock.close()


def _alive(pid: int) -> bool:
    """Whether the command still runs: an exited one may stay a zombie until its parent reaps
    it, which may be waiting for the bridge to let go of the stderr they share."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"egress-bridge: {line}\n")
        sys.stderr.flush()
    except OSError:
        pass


def _parse(argv: list[str]) -> tuple[tuple[str, int], str, list[str]] | None:
    if "--" not in argv:
        return None
    at = argv.index("--")
    options, command = argv[:at], argv[at + 1 :]
    if len(options) != 4 or options[0] != "--listen" or options[2] != "--socket" or not command:
        return None
    host, _, port = options[1].rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return (host, int(port)), options[3], command


def _listen(address: tuple[str, int]) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(1024)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener


def _serve_forked(listener: socket.socket, path: str, command_pid: int) -> None:
    """In the grandchild: quiet stdio, no fd of the command's but the listener, then serve."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    keep = listener.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, max(keep + 2, os.sysconf("SC_OPEN_MAX")))
    try:
        _Bridge(listener, path, command_pid).serve()
    except BaseException as exc:  # noqa: BLE001 - the bridge's last word, then it is gone
        _say(f"stopped: {type(exc).__name__}")
        os._exit(1)
    os._exit(0)


def main(argv: list[str]) -> int:
    parsed = _parse(argv)
    if parsed is None:
        _say(_USAGE)
        return 64
    address, path, command = parsed
    try:
        listener = _listen(address)
    except OSError as exc:
        _say(f"cannot listen on {address[0]}:{address[1]}: {exc.strerror or exc}")
        return 71
    command_pid = os.getpid()
    middle = os.fork()
    if middle == 0:
        # Fork again and leave: the bridge is re-parented to the sandbox's init, so the command
        # (which becomes this pid's program) never sees a child it did not start.
        if os.fork() == 0:
            _serve_forked(listener, path, command_pid)
        os._exit(0)
    os.waitpid(middle, 0)
    listener.close()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        _say(f"cannot run {command[0]!r}: {exc.strerror or exc}")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
