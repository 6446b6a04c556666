"""What a child asks the egress proxy for, read from the first bytes of a connection: an HTTP
request head (`read_http_head`: `CONNECT host:port`, or an absolute-form `GET http://host/…`),
and the checked host and port it names (`Destination`). A head that is not one of these is a
`NoTunnel` with the one-line reason the child is answered. Pure: no socket.

Above: `fronts` (reads the bytes, answers), `socks` (a SOCKS5 request's host). Below: the
standard library's `ipaddress`.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Literal

from mcp_host.plugins import is_host_name

__all__ = ["Destination", "HttpAsk", "NoTunnel", "Outcome", "parse_host", "read_http_head"]

Outcome = Literal["bad", "slow", "large", "refused", "capped", "unreachable"]
"""Why a connection got no tunnel: a malformed head, a head too slow or too large, the policy
refused its destination, the gate's connections are at their cap, or the destination could not
be resolved or connected to."""

_AUTHORITY_RE = re.compile(r"\A(?P<host>\[[^\]]{1,64}\]|[^:\[\]]{1,260})(?::(?P<port>[0-9]{1,5}))?\Z")
_REQUEST_LINE_RE = re.compile(r"\A(?P<method>[A-Z]{1,16}) (?P<target>[!-~]{1,8000}) (?P<version>HTTP/1\.[01])\Z")
_HEADER_RE = re.compile(r"\A(?P<name>[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}):[ \t]*(?P<value>[ -~\t]*?)[ \t]*\Z")
_MAX_HEADERS = 100
# Hop-by-hop and proxy headers: never passed on (RFC 9110 §7.6.1); `Host` is set from the url.
_DROPPED = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "host"})


@dataclass(frozen=True)
class Destination:
    """A host and port a child asked for: `host` a lower-cased name without a trailing dot, or
    an address in its canonical form (an IPv6 one without brackets)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class NoTunnel:
    """A connection answered without a tunnel: why (`outcome`) and the one line it is told."""

    outcome: Outcome
    reason: str


@dataclass(frozen=True)
class HttpAsk:
    """An HTTP head asking for `destination`: a `CONNECT` (`forward` None), or an absolute-form
    request whose head, in origin form, goes to the destination first (`forward`)."""

    destination: Destination
    forward: bytes | None


def parse_host(text: str) -> str | None:
    """`text` as `Destination.host` when it is a host name, a dotted-quad IPv4 address or an
    IPv6 address in [brackets] (without a zone); None otherwise — also for the other forms
    `inet_aton` reads (`2130706433`, `0x7f.1`, `127.1`), which name addresses by surprise."""
    if text.startswith("["):
        inner = text[1:-1] if text.endswith("]") else ""
        address = _address(inner) if "%" not in inner else None
        return str(address) if isinstance(address, ipaddress.IPv6Address) else None
    address = _address(text)
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    name = text.casefold().rstrip(".")
    if address is not None or not is_host_name(name) or _legacy_ipv4(name):
        return None
    return name


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _legacy_ipv4(name: str) -> bool:
    if name.rsplit(".", 1)[-1].isdigit():
        return True  # a last label of digits only is never a name DNS serves (RFC 3696 §2)
    try:
        socket.inet_aton(name)
    except OSError:
        return False
    return True


def _authority(text: str, default_port: int | None) -> Destination | NoTunnel:
    found = _AUTHORITY_RE.match(text)
    host = None if found is None else parse_host(found["host"])
    if found is None or host is None:
        return NoTunnel("bad", "the destination is not host:port with a host name or an IP address")
    port = default_port if found["port"] is None else int(found["port"])
    if port is None or not 1 <= port <= 65535:
        return NoTunnel("bad", "the destination needs a port from 1 to 65535")
    return Destination(host, port)


def read_http_head(head: bytes) -> HttpAsk | NoTunnel:
    """What the request head `head` (up to, not including, the blank line) asks for."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        return NoTunnel("bad", "the request head is not ASCII")
    lines = text.split("\r\n")
    request = _REQUEST_LINE_RE.match(lines[0])
    if request is None:
        return NoTunnel("bad", "the request line is not METHOD TARGET HTTP/1.x")
    headers = _headers(lines[1:])
    if headers is None:
        return NoTunnel("bad", f"the request has a malformed header line or over {_MAX_HEADERS} headers")
    method, target, version = request["method"], request["target"], request["version"]
    if method == "CONNECT":
        destination = _authority(target, None)
        return destination if isinstance(destination, NoTunnel) else HttpAsk(destination, None)
    scheme, _, rest = target.partition("://")
    if scheme.casefold() == "https":
        return NoTunnel("bad", "an https:// url goes through the proxy as CONNECT host:443, not as a request")
    if scheme.casefold() != "http" or not rest:
        return NoTunnel("bad", "this is a proxy: ask for CONNECT host:port or an absolute http:// url")
    return _absolute(method, rest, version, headers)


def _headers(lines: list[str]) -> list[tuple[str, str]] | None:
    if len(lines) > _MAX_HEADERS:
        return None
    headers = []
    for line in lines:
        found = _HEADER_RE.match(line)
        if found is None:  # also an obsolete folded line (leading white space)
            return None
        headers.append((found["name"], found["value"]))
    return headers


def _absolute(method: str, rest: str, version: str, headers: list[tuple[str, str]]) -> HttpAsk | NoTunnel:
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:].split("#", 1)[0]
    if "@" in authority:
        return NoTunnel("bad", "a url with user:password@ is not proxied")
    destination = _authority(authority, 80)
    if isinstance(destination, NoTunnel):
        return destination
    names = {name.casefold() for name, _ in headers}
    if "transfer-encoding" in names and "content-length" in names:
        return NoTunnel("bad", "the request has both Transfer-Encoding and Content-Length")
    host = authority.casefold()
    kept = [
        f"{name}: {value}\r\n"
        for name, value in headers
        if name.casefold() not in _DROPPED and not name.casefold().startswith("proxy-")
    ]
    origin = path if path.startswith("/") else "/" + path
    forward = f"{method} {origin} {version}\r\nHost: {host}\r\n{''.join(kept)}Connection: close\r\n\r\n"
    return HttpAsk(destination, forward.encode("ascii"))
