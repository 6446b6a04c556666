"""A connection to a destination a child asked for, made only where its policy allows
(`dial`): the rules for the name and port first, then the name resolved once (a literal
address is its own answer), every address it resolves to checked (a name that resolves to
loopback once is refused, whatever else it resolves to), and the connection made to one of the
addresses checked, never to a second lookup's answer.

Above: `gate`. Below: `resolver`, `plugins.EgressPolicy`, anyio's `connect_tcp`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
from anyio.abc import SocketStream

from mcp_host.plugins import Address, EgressPolicy, literal_address

from .heads import Destination, NoTunnel
from .resolver import Resolver

__all__ = ["CONNECT_TIMEOUT_S", "dial"]

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
"""How long resolving and connecting may take together."""
_MAX_TRIED = 4  # addresses of one name tried in turn when a connection is refused


async def dial(destination: Destination, policy: EgressPolicy, resolver: Resolver) -> SocketStream | NoTunnel:
    """A TCP connection to `destination`, or why there is none (`refused`: the policy's reason;
    `unreachable`: no address answered in time)."""
    host, port = destination.host, destination.port
    why = policy.destination_refusal(host, port)
    if why is not None:
        return NoTunnel("refused", why)
    with anyio.move_on_after(CONNECT_TIMEOUT_S):
        addresses = await _addresses(destination, resolver)
        if isinstance(addresses, NoTunnel):
            return addresses
        for address in addresses:
            why = policy.address_refusal(host, address)
            if why is not None:
                return NoTunnel("refused", why)
        for address in addresses[:_MAX_TRIED]:
            try:
                return await anyio.connect_tcp(str(address), port)
            except OSError as exc:
                logger.debug("egress to %s at %s: %s", destination, address, type(exc).__name__)
        return NoTunnel("unreachable", f"{destination} did not accept a connection")
    return NoTunnel("unreachable", f"{destination} did not answer within {CONNECT_TIMEOUT_S:g} s")


async def _addresses(destination: Destination, resolver: Resolver) -> Sequence[Address] | NoTunnel:
    literal = literal_address(destination.host)
    if literal is not None:
        return [literal]
    try:
        found = await resolver.resolve(destination.host, destination.port)
    except OSError:
        return NoTunnel("unreachable", f"{destination.host} could not be resolved")
    return found if found else NoTunnel("unreachable", f"{destination.host} could not be resolved")
