"""Per-plugin egress: what a sandboxed child may reach through the host's proxy."""

from .allowance import egress_caps_for, egress_limit_warnings
from .caps import EgressCaps

__all__ = ["EgressCaps", "egress_caps_for", "egress_limit_warnings"]
