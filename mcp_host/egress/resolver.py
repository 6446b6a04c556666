"""Where the host learns the addresses of a host name before it connects anywhere on a
plugin's behalf (`Resolver`): the machine's resolver (`SystemResolver`), an /etc/hosts-format
file read first (`HostsFileResolver`: the owner's split-horizon names, and how tests name
loopback servers), and a table for tests (`MemoryResolver`).

Whoever resolves connects to an address it checked, never to a second lookup's answer: a name
is resolved once per connection, here.

Above: `proxy` (each tunnel of a sandboxed child), `children.remote_guard` (each request of a
remote child). Below: anyio's `getaddrinfo`, `plugins.Address`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio

from mcp_host.plugins import Address

__all__ = ["HostsFileResolver", "MemoryResolver", "Resolver", "SystemResolver"]

logger = logging.getLogger(__name__)

# A hosts file larger than this is not read (it is the owner's, but a mistake must not eat memory).
_MAX_HOSTS_FILE_BYTES = 4 * 1024 * 1024


class Resolver(Protocol):
    """Where the caller learns the addresses of a host name."""

    async def resolve(self, host: str, port: int) -> Sequence[Address]:
        """The addresses `host` has (at least one), in the order to try them; raises `OSError`
        when it has none."""
        ...


class SystemResolver:
    """The machine's resolver (`getaddrinfo`)."""

    async def resolve(self, host: str, port: int) -> Sequence[Address]:
        found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(ipaddress.ip_address(sockaddr[0]) for *_, sockaddr in found))
        if not addresses:
            raise OSError(f"{host} has no address")
        return addresses


@dataclass
class MemoryResolver:
    """A resolver that answers from a table (name → addresses) and records each name asked."""

    table: Mapping[str, Sequence[str]]
    asked: list[str] = field(default_factory=list)

    async def resolve(self, host: str, port: int) -> Sequence[Address]:
        self.asked.append(host)
        answer = self.table.get(host, ())
        if not answer:
            raise OSError(f"{host} has no address")
        return [ipaddress.ip_address(a) for a in answer]


class HostsFileResolver:
    """Names from a file in /etc/hosts' format first (an address, then its names; `#` starts
    a comment; IPv4 and IPv6), else `fallback`. The file is read again when its modification
    time or size changes; a file that cannot be read counts as empty (logged once per change).
    Names match without regard to case or a trailing dot."""

    def __init__(self, path: Path, fallback: Resolver) -> None:
        self._path = path
        self._fallback = fallback
        self._seen: tuple[int, int] | None = None
        self._table: dict[str, list[Address]] = {}

    async def resolve(self, host: str, port: int) -> Sequence[Address]:
        found = self._current().get(host.casefold().rstrip("."))
        if found:
            return list(found)
        return await self._fallback.resolve(host, port)

    def _current(self) -> dict[str, list[Address]]:
        try:
            info = os.stat(self._path)
        except OSError:
            info = None
        seen = (-1, -1) if info is None else (info.st_mtime_ns, info.st_size)
        if seen != self._seen:
            self._seen = seen
            self._table = self._read(info is not None)
        return self._table

    def _read(self, present: bool) -> dict[str, list[Address]]:
        try:
            if not present:
                raise FileNotFoundError(self._path)
            with open(self._path, "rb") as file:
                text = file.read(_MAX_HOSTS_FILE_BYTES + 1)
            if len(text) > _MAX_HOSTS_FILE_BYTES:
                raise OSError(f"over {_MAX_HOSTS_FILE_BYTES} bytes")
        except OSError as exc:
            logger.warning("egress hosts file %s is not read: %s", self._path, type(exc).__name__)
            return {}
        return parse_hosts(text.decode("utf-8", "replace"))


def parse_hosts(text: str) -> dict[str, list[Address]]:
    """Each name of a hosts file with its addresses in file order; a line whose first field is
    not an address is skipped."""
    table: dict[str, list[Address]] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        try:
            address = ipaddress.ip_address(fields[0].split("%", 1)[0])
        except ValueError:
            continue
        for name in fields[1:]:
            known = table.setdefault(name.casefold().rstrip("."), [])
            if address not in known:
                known.append(address)
    return table
