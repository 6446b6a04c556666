"""Outbound TCP for a plugin: through the proxy its environment names, else directly.

Above: a plugin's own clients of protocols other than HTTP (the smtp connector hands the
socket to aiosmtplib). Below: the socket module and AnyIO's address lookup and readiness waits.

Under the host, a sandboxed child with network (`allow_net` or `egress` in its manifest) has
no route out but the host's filtering proxy, which `ALL_PROXY`, `HTTPS_PROXY` and
`HTTP_PROXY` (and their lower-case twins) name inside the sandbox as `http://127.0.0.1:3128`.
HTTP libraries read those variables themselves (niquests, httpx, curl); `open_tunnel` is the
same for any other TCP protocol:

    sock = await open_tunnel("smtp.example.com", 587, timeout_s=10)

asks the proxy for `CONNECT smtp.example.com:587`, reads its answer and returns the socket,
now a byte pipe to the server (TLS, when wanted, is the caller's, with the server's name).
The proxy resolves the name and checks the destination against the plugin's egress; its
refusal (403, or 429 when the plugin has too many connections open) is `EgressRefused`, with
the proxy's one-line reason. With no proxy variable set (a plugin run standalone, or by a
host with its sandbox off) it connects directly, so the same code works in development.
`NO_PROXY` is honoured as curl and urllib honour it.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit

import anyio

from .errors import EgressRefused, Unavailable

__all__ = ["PROXY_VARIABLES", "open_tunnel", "proxy_address"]

# The variables naming a proxy for any TCP, in the order they are read; the lower-case one
# first, as curl and urllib prefer it.
PROXY_VARIABLES = ("all_proxy", "ALL_PROXY", "https_proxy", "HTTPS_PROXY")
MAX_HEAD_BYTES = 16 * 1024  # the host's proxy refuses longer heads too
MAX_REASON_CHARS = 200

_HOST_NAME = re.compile(r"\A[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_.])?\Z")
_STATUS = re.compile(rb"\AHTTP/1\.[01] ([0-9]{3})[^\r\n]*\r\n")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


async def open_tunnel(
    host: str, port: int, *, timeout_s: float, environ: Mapping[str, str] | None = None
) -> socket.socket:
    """A TCP connection to `host`:`port`, through the proxy `environ` (default: the process
    environment) names, else direct; the whole bounded by `timeout_s` seconds.

    Returns a connected, non-blocking socket the caller owns (it closes it, or hands it to a
    library that will). Raises `EgressRefused` when the proxy refuses the destination,
    `Unavailable` when a proxy variable names something other than an `http://` proxy,
    `ValueError` for a `host` that is no host name or IP address, and `OSError` for the rest:
    no address, nothing listening, another answer from the proxy, `TimeoutError` in time.
    """
    if not 0 < port < 65536:
        raise ValueError("port must be 1-65535")
    authority = _authority(host, port)
    proxy = proxy_address(host, environ)
    with anyio.fail_after(timeout_s):
        if proxy is None:
            return await _connect(host, port)
        sock = await _connect(*proxy)
        try:
            await _send_all(sock, f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
            status = await _read_status(sock)
            if status in (403, 429):
                raise EgressRefused(authority, await _read_reason(sock))
            if status // 100 != 2:
                raise ConnectionRefusedError(f"the proxy answered {status} to CONNECT")
        except BaseException:
            sock.close()
            raise
        return sock


def proxy_address(host: str, environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """The (host, port) of the proxy `environ` (default: the process environment) names for a
    connection to `host`, or None: no proxy variable set, or `NO_PROXY` names `host`.

    Raises `Unavailable` when the first variable set names a proxy that is not `http://`.
    """
    environ = os.environ if environ is None else environ
    name, url = next(((name, environ[name]) for name in PROXY_VARIABLES if environ.get(name)), (None, ""))
    if name is None:
        return None
    no_proxy = environ.get("no_proxy") or environ.get("NO_PROXY")
    if no_proxy and _bypassed(host, no_proxy):
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port or 80
    except ValueError:
        port = 0
    if parts.scheme.lower() != "http" or not parts.hostname or not port:
        # The URL itself is not shown: it may carry the proxy's credentials.
        raise Unavailable(f"{name} names no http:// proxy (host:port); open_tunnel speaks HTTP CONNECT only")
    return parts.hostname, port


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether `no_proxy` names `host` as curl reads it: `*`, the host itself, or a domain
    (with or without a leading dot) the host is in. Entries with a port are not read."""
    host = host.strip("[]").lower()
    for entry in no_proxy.lower().replace(" ", "").split(","):
        name = entry.strip("[]").lstrip(".")
        if entry == "*" or (name and (host == name or host.endswith(f".{name}"))):
            return True
    return False


def _authority(host: str, port: int) -> str:
    """`host:port` for the CONNECT line, IPv6 in brackets; anything else than a host name or
    an IP address (a space, CR, LF, a slash …) is refused, so nothing rides into the head."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        if not _HOST_NAME.match(host) or ".." in host:
            raise ValueError("host must be a host name or an IP address") from None
        return f"{host}:{port}"
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


async def _connect(host: str, port: int) -> socket.socket:
    """A non-blocking TCP socket connected to the first address of `host` that answers."""
    failure: OSError = OSError(errno.EHOSTUNREACH, f"no address for {host}")
    for family, kind, proto, _, address in await anyio.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            code = sock.connect_ex(address)
            if code in (errno.EINPROGRESS, errno.EAGAIN):
                await anyio.wait_writable(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        except BaseException:  # cancelled or timed out: the socket is ours to close
            sock.close()
            raise
        return sock
    raise failure


async def _send_all(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view) :]
        except BlockingIOError:
            await anyio.wait_writable(sock)


async def _read_status(sock: socket.socket) -> int:
    """The status code of the proxy's answer, its head read to the blank line and no further:
    every byte after it is the server's, left in the socket for the caller."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        try:
            byte = sock.recv(1)  # one at a time: the server may speak at once (an SMTP greeting)
        except BlockingIOError:
            await anyio.wait_readable(sock)
            continue
        if not byte:
            raise ConnectionResetError("the proxy closed the connection before answering")
        head += byte
        if len(head) > MAX_HEAD_BYTES:
            raise ConnectionRefusedError("the proxy's answer is too long")
    matched = _STATUS.match(head)
    if matched is None:
        raise ConnectionRefusedError("the proxy's answer is not HTTP")
    return int(matched.group(1))


async def _read_reason(sock: socket.socket) -> str:
    """The first line of a refusal's body (the proxy closes after it), cleaned and cut short."""
    body = b""
    with anyio.move_on_after(1):
        while len(body) < 4 * MAX_REASON_CHARS and b"\n" not in body:
            try:
                chunk = sock.recv(4 * MAX_REASON_CHARS)
            except BlockingIOError:
                await anyio.wait_readable(sock)
                continue
            except OSError:  # reset after the head: the status said enough
                break
            if not chunk:
                break
            body += chunk
    line = body.decode(errors="replace").split("\n", 1)[0]
    return _CONTROL.sub(" ", line).strip()[:MAX_REASON_CHARS] or "no reason given"
