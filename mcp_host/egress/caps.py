"""The caps the egress proxy holds one child to: a plain value, made by `sandbox.budget`
(`egress_caps_for`) from the manifest's `limits` under the host's `EgressSettings`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EgressCaps"]


@dataclass(frozen=True)
class EgressCaps:
    connections: int
    bytes_per_minute: int
    idle_s: float
