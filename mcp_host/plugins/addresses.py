"""Which network addresses a remote plugin may reach (docs/design.md "Remote plugins", "Egress").

Every address is in one of three classes:

    public     globally reachable: reached whenever the manifest's hosts allow it
    private    loopback, private (RFC 1918, unique-local), shared (CGNAT), unspecified, reserved,
               multicast: reached only when the manifest's `transport.allow_private` names the
               host the url gives or the address itself
    metadata   link-local (169.254.0.0/16, fe80::/10) and the cloud-metadata services' addresses
               (169.254.169.254, fd00:ec2::254, fd20:ce::254, 100.100.100.200, 168.63.129.16):
               only when `allow_private` names that address itself, one by one; `plugin add`
               refuses them, and the metadata services' names (metadata.google.internal, …)

An IPv6 address that carries an IPv4 one (mapped, compatible, 6to4, Teredo, NAT64) is in the stricter class
of the two. A name is only as public as every address it resolves to; the caller resolves it
once and connects to the address it checked (`children.remote_guard`), so a second answer of a
rebinding DNS server is never asked for.

Above: `sources` (what `plugin add` refuses), `children.remote_guard` (each request of a remote
child). Below: the standard library's `ipaddress`.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Literal

__all__ = ["Address", "AddressClass", "PrivateReach", "address_class", "literal_address", "metadata_host"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressClass = Literal["public", "private", "metadata"]

_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "fd20:ce::254",  # GCP over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure's WireServer: a public address
    )
)
_METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
    }
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LEGACY_IPV4_RE = re.compile(r"\A[0-9a-fx.]{1,64}\Z")
_RANK: dict[AddressClass, int] = {"public": 0, "private": 1, "metadata": 2}


def literal_address(host: str) -> Address | None:
    """`host` as an address when it is one (an IPv6 one with or without [brackets]), else None."""
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


def metadata_host(host: str) -> bool:
    """Whether `host` (a name or an address, also in the forms `inet_aton` reads: `2852039166`,
    `0xa9.0xfe.0xa9.0xfe`) is a cloud-metadata service or link-local."""
    host = host.casefold().rstrip(".")
    address = literal_address(host)
    if address is None and _LEGACY_IPV4_RE.match(host):
        with suppress(OSError):
            address = ipaddress.IPv4Address(socket.inet_aton(host))
    if address is None:
        return host in _METADATA_NAMES
    return address_class(address) == "metadata"


def address_class(address: Address) -> AddressClass:
    """The class of `address`; of an IPv6 address carrying an IPv4 one, the stricter one."""
    found = _own_class(address)
    if isinstance(address, ipaddress.IPv6Address):
        for inner in _carried(address):
            inner_class = _own_class(inner)
            if _RANK[inner_class] > _RANK[found]:
                found = inner_class
    return found


def _own_class(address: Address) -> AddressClass:
    if address in _METADATA_ADDRESSES or address.is_link_local:
        return "metadata"
    if address.is_global and not address.is_multicast:
        return "public"
    return "private"


def _carried(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    carried = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo is not None:
        carried.append(address.teredo[1])
    if address in _NAT64 or int(address) >> 32 == 0:  # NAT64, or IPv4-compatible (::a.b.c.d)
        carried.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return carried


@dataclass(frozen=True)
class PrivateReach:
    """What a manifest's `transport.allow_private` lets a remote plugin reach beyond public
    addresses: a named host (lower-cased; an IPv6 address in brackets) at a private address, a
    named address whatever its class."""

    hosts: frozenset[str] = frozenset()
    addresses: frozenset[Address] = frozenset()

    @classmethod
    def of(cls, named: Iterable[str]) -> PrivateReach:
        """From `allow_private`'s entries: names and addresses."""
        hosts: set[str] = set()
        addresses: set[Address] = set()
        for entry in named:
            address = literal_address(entry)
            if address is None:
                hosts.add(entry.casefold())
            else:
                addresses.add(address)
        return cls(frozenset(hosts), frozenset(addresses))

    def refusal(self, host: str, address: Address) -> str | None:
        """Why `host` (as the url gives it) must not be reached at `address`, or None."""
        kind = address_class(address)
        if kind == "public" or address in self.addresses:
            return None
        bare = host.removeprefix("[").removesuffix("]").casefold()
        if kind == "private" and bare in self.hosts:
            return None
        shown = f"[{bare}]" if ":" in bare else bare
        named = literal_address(bare) == address
        what = f"{shown} is" if named else f"{shown} resolves to {address},"
        if kind == "private":
            name = shown if named else f"{shown} or {address}"
            return f"{what} a loopback or private address; name {name} in transport.allow_private to reach it"
        return (
            f"{what} a link-local or cloud-metadata address; it is reached only when transport.allow_private"
            " names that address itself"
        )
