"""Where a sandboxed child may connect: the grammar of `transport.sandbox.egress` entries and the
policy the host's egress proxy checks each connection against (docs: the plugin guide's
"Network"; mcp_host/README.md "Egress").

An entry is one of

    host            a name or an address (an IPv6 one in [brackets]), at ports 80 and 443
    host:port       at that port only
    *.domain        every name under `domain` at any depth, not `domain` itself, ports 80 and 443
    *.domain:port   the same, at that port only

`allow_net: true` adds "any public address, any port". An address that is not public (loopback,
private, link-local, cloud metadata: `addresses.address_class`) is reached only as
`addresses.PrivateReach` allows, from the sandbox's `allow_private`: a name or an address named
there, a link-local or metadata address only when that address itself is named. So a name that
resolves to loopback is refused unless the owner named it one by one.

Above: `manifest.transport` (each entry is checked when the manifest is read) and
`mcp_host.egress` (the proxy). Below: `addresses`. Pure: no socket, no lookup.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .addresses import Address, PrivateReach, literal_address

__all__ = ["DEFAULT_PORTS", "EgressPolicy", "EgressRule", "is_host_name", "parse_rule"]

DEFAULT_PORTS = frozenset({80, 443})
"""The ports an entry without one allows: HTTP and HTTPS."""

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME_RE = re.compile(rf"\A(?=.{{1,253}}\Z)(?:{_LABEL}\.)*{_LABEL}\Z")
_ENTRY_RE = re.compile(r"\A(?P<host>\[[0-9a-f:.]{2,45}\]|[^:\[\]]{1,260})(?::(?P<port>[0-9]{1,5}))?\Z")


def is_host_name(name: str) -> bool:
    """Whether `name` (lower-cased, no trailing dot) is a DNS host name: labels of letters,
    digits, `-` and `_`, 253 characters at most. An address passes too when it is also a name
    (`127.0.0.1`); callers tell those apart."""
    return _NAME_RE.match(name) is not None


@dataclass(frozen=True)
class EgressRule:
    """One parsed entry: `host` lower-cased (an address in its canonical form, an IPv6 one
    without brackets), `wildcard` for a `*.domain` entry (then `host` is the domain), `port`
    None for the default ports."""

    host: str
    port: int | None
    wildcard: bool = False

    def matches(self, host: str, port: int) -> bool:
        """Whether a connection to `host` (lower-cased, no trailing dot, an address canonical
        and unbracketed) at `port` is one this entry allows."""
        if port not in (DEFAULT_PORTS if self.port is None else (self.port,)):
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        host = f"*.{self.host}" if self.wildcard else f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def parse_rule(text: str) -> EgressRule:
    """The rule `text` names; raises ValueError saying what is wrong with it."""
    entry = text.strip().casefold()
    found = _ENTRY_RE.match(entry)
    if found is None:
        raise ValueError(f"{text!r} is not host, host:port, *.domain or *.domain:port")
    host, port_text = found["host"], found["port"]
    port = None if port_text is None else int(port_text)
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{text!r}: the port must be 1 to 65535")
    if host.startswith("*."):
        domain = host[2:].rstrip(".")
        if literal_address(domain) is not None or "." not in domain or not is_host_name(domain):
            raise ValueError(f"{text!r}: a wildcard names a domain of at least two labels, like *.example.com")
        return EgressRule(domain, port, wildcard=True)
    address = literal_address(host)
    if address is not None:
        if ":" in str(address) and not host.startswith("["):
            raise ValueError(f"{text!r}: write an IPv6 address in [brackets]")
        return EgressRule(str(address), port)
    if host.startswith("[") or not is_host_name(host.rstrip(".")):
        raise ValueError(f"{text!r} is not a host name or an IP address")
    return EgressRule(host.rstrip("."), port)


def _bare(host: str) -> str:
    """`host` as rules compare it: lower-cased, no trailing dot, an address canonical."""
    host = host.casefold().rstrip(".")
    address = literal_address(host)
    return host if address is None else str(address)


@dataclass(frozen=True)
class EgressPolicy:
    """What one child may reach: its rules, whether any public address is allowed
    (`allow_net`), and which non-public addresses (`reach`)."""

    rules: tuple[EgressRule, ...] = ()
    any_public: bool = False
    reach: PrivateReach = PrivateReach()

    @classmethod
    def of(cls, entries: Iterable[str], *, allow_net: bool = False, allow_private: Iterable[str] = ()) -> EgressPolicy:
        """From a manifest's (and the owner's) entries; raises ValueError for a bad entry."""
        rules = tuple(dict.fromkeys(parse_rule(entry) for entry in entries))
        return cls(rules, allow_net, PrivateReach.of(allow_private))

    @property
    def offline(self) -> bool:
        """Whether the child may reach nothing at all."""
        return not self.rules and not self.any_public

    def destination_refusal(self, host: str, port: int) -> str | None:
        """Why `host`:`port` is not a destination the rules allow (checked before resolving), or
        None. Its address is checked once known (`address_refusal`)."""
        bare = _bare(host)
        if self.any_public or any(rule.matches(bare, port) for rule in self.rules):
            return None
        shown = f"[{bare}]" if ":" in bare else bare
        return f"{shown}:{port} is not in the plugin's egress"

    def address_refusal(self, host: str, address: Address) -> str | None:
        """Why `host` must not be reached at `address` (a non-public address not named in
        `allow_private`), or None."""
        why = self.reach.refusal(host, address)
        return None if why is None else why.replace("transport.allow_private", "transport.sandbox.allow_private")
