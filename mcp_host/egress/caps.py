"""`EgressCaps`: what one child instance may spend through the egress proxy.

Above: whoever opens a gate for a child (the child factory, from the manifest's `limits` within
the host's `EgressSettings`). Below: nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EgressCaps"]


@dataclass(frozen=True)
class EgressCaps:
    """`connections`: connections a child may hold open through its gate at once (more are
    refused); `bytes_per_minute`: bytes through the gate in any rolling minute, both directions
    together (reads pause past it); `idle_s`: a tunnel with no byte either way for this long is
    closed."""

    connections: int
    bytes_per_minute: int
    idle_s: float

    def __post_init__(self) -> None:
        """Raises ValueError for a cap that is not positive (a child with no egress gets no gate)."""
        if self.connections < 1 or self.bytes_per_minute < 1 or not self.idle_s > 0:
            raise ValueError("egress caps are positive: connections, bytes_per_minute, idle_s")
