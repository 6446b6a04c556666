"""Seeded hostile bytes for the egress proxy, and what its answer may be: valid requests aimed
at one destination (`templates`: HTTP `CONNECT`, absolute-form HTTP, SOCKS5 greetings with a
request to a name, an IPv4 and an IPv6 address), mutated by kind (`mutated`: bytes flipped,
cut, control characters and non-ASCII inserted, runs repeated past the head limit, numbers made
huge, delimiters inserted); `exchange`, one case sent on a connection of its own; and what came
back: `well_formed`, and `status_of`, the HTTP status it amounts to.

Used by `tests/egress/test_fuzz.py` (a bare gate) and `tests/fuzzing.py`'s `egress` endpoint
(a sandboxed child's gate in a running host).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

import anyio

from tests.egress.loopback import read_all

__all__ = ["KINDS", "exchange", "mutated", "status_of", "templates", "well_formed"]

KINDS = ("flipped", "cut", "controls", "repeated", "huge_numbers", "delimiters")
"""How a template is mutated (docs/security.md §A): a byte flipped (A9, shape), the head cut
short, control bytes and bytes that are not ASCII or UTF-8 inserted (A8), a run repeated up to
hundreds of times (A1, over the head's 16 KiB), a huge or negative number inserted (A5), and
a delimiter inserted: CRLF, `:`, brackets, `@`, `%` (A7, header and url games)."""

_MAX_CASE_BYTES = 40 * 1024
_FORWARDED_RE = re.compile(rb"\A[A-Z]{1,16} /[!-~]* HTTP/1\.[01]\r\nHost: ")
_ANSWER_RE = re.compile(rb"\AHTTP/1\.1 (200|400|403|408|429|431|502) [A-Za-z ]+\r\n")
_STATUS_RE = re.compile(rb"\AHTTP/1\.[01] ([0-9]{3}) ")
# A SOCKS5 reply as the HTTP status of the same answer (egress/fronts.py): succeeded, a
# malformed request (general failure, command or address type not supported), refused by the
# rules or at the cap, unreachable.
_SOCKS_AS_HTTP = {0x00: 200, 0x01: 400, 0x02: 403, 0x04: 502, 0x07: 400, 0x08: 400}


def templates(port: int, name: bytes = b"site.example.test") -> list[bytes]:
    """Valid requests for `name`:`port` (and 127.0.0.1, ::1 at `port`), one per way of asking."""
    return [
        b"CONNECT %s:%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (name, port, name),
        b"GET http://%s:%d/a?b=c HTTP/1.1\r\nAccept: */*\r\nProxy-Authorization: x\r\n\r\n" % (name, port),
        b"POST http://[::1]:%d/ HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi" % port,
        b"\x05\x01\x00\x05\x01\x00\x03" + bytes([len(name)]) + name + port.to_bytes(2, "big"),
        b"\x05\x02\x00\x02\x05\x01\x00\x01\x7f\x00\x00\x01" + port.to_bytes(2, "big"),
        b"\x05\x01\x00\x05\x01\x00\x04" + b"\x00" * 15 + b"\x01" + port.to_bytes(2, "big"),
    ]


def mutated(template: bytes, rng: random.Random, kinds: Sequence[str] = KINDS) -> bytes:
    """`template` changed one to four times, each by a kind drawn from `kinds`; at most 40 KiB."""
    data = bytearray(template)
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(kinds)
        at = rng.randrange(len(data) + 1)
        if kind == "flipped" and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif kind == "cut":
            del data[at:]
        elif kind == "controls":
            data[at:at] = bytes([rng.choice([0, 9, 10, 13, 127, 0x80, 0xFF, 0x05])]) * rng.randint(1, 8)
        elif kind == "repeated":
            data[at:at] = data[at : at + rng.randint(1, 40)] * rng.randint(2, 500)
        elif kind == "huge_numbers":
            data[at:at] = str(rng.choice([0, -1, 65536, 2**64, 10**400])).encode()[:600]
        elif kind == "delimiters":
            data[at:at] = rng.choice([b"\r\n", b"\r\n\r\n", b":", b"[", b"]", b"@", b"%", b"*."])
    return bytes(data[:_MAX_CASE_BYTES])


def well_formed(answer: bytes) -> bool:
    """An answer of the proxy's (one of its statuses with a one-line body, or a SOCKS5 reply),
    an echo through a tunnel it opened, or nothing."""
    if not answer or answer.startswith(b"\x05"):
        return True
    if _FORWARDED_RE.match(answer):  # the echo server sent back the request the proxy forwarded
        head = answer.partition(b"\r\n\r\n")[0].lower()
        return b"\r\nproxy-" not in head and head.endswith(b"\r\nconnection: close")
    found = _ANSWER_RE.match(answer)
    if found is None:
        return False
    if found[1] == b"200":
        return True  # a tunnel or a forwarded request: what follows is the echo server's
    body = answer.partition(b"\r\n\r\n")[2]
    return body.endswith(b"\n") and body.count(b"\n") == 1 and b"Error" not in body and b"Traceback" not in body


async def exchange(gate: Path, case: bytes) -> bytes:
    """Send `case` on a new connection to the gate at `gate`, then end the connection's way
    out; everything that comes back until the gate closes it."""
    async with await anyio.connect_unix(gate) as stream:
        try:
            await stream.send(case)
            await stream.send_eof()
        except anyio.BrokenResourceError:
            pass  # the gate answered and closed before reading it all
        return await read_all(stream)


def status_of(answer: bytes) -> int:
    """The HTTP status an answer of the proxy amounts to: its own for an HTTP one, 200 for a
    request forwarded (the echo of its head), a SOCKS5 reply's equivalent (400 for a refused
    method), 499 for a connection closed without a word; 0 for bytes that are none of these."""
    if not answer:
        return 499
    if answer.startswith(b"\x05"):
        reply = answer[2:4]
        if answer[1:2] == b"\xff" or len(reply) < 2:
            return 400
        return _SOCKS_AS_HTTP.get(reply[1], 0)
    if _FORWARDED_RE.match(answer):
        return 200
    found = _STATUS_RE.match(answer)
    return int(found[1]) if found else 0
