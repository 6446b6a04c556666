"""The refusal codes: the `code` of every `{code, message}` refusal the host or a plugin's host op
answers with (docs/design.md's error vocabulary).

Above: the host's exception tree (`mcp_host.errors`, one class per code) and the kit's
(`mcp_host_kit.errors`). Below: nothing.
"""

from __future__ import annotations

__all__ = [
    "DENIED",
    "HELD",
    "INVALID_ARGUMENTS",
    "INVALID_MANIFEST",
    "QUOTA_EXHAUSTED",
    "REFUSAL_CODES",
    "TIMEOUT",
    "TRANSPORT",
    "UNAVAILABLE",
    "UNCONFIGURED",
    "UNKNOWN",
]

DENIED = "denied"
"""Not allowed (to a visitor it reads as `unknown`: not allowed looks like not there)."""
HELD = "held"
"""The call waits for the owner's approval."""
QUOTA_EXHAUSTED = "quota_exhausted"
"""The subject has used its quota of this capability."""
UNCONFIGURED = "unconfigured"
"""What the call needs has not been set up by the owner (e.g. no connector connected)."""
UNKNOWN = "unknown"
"""No such tool (or one this caller may not see)."""
INVALID_ARGUMENTS = "invalid_arguments"
"""Arguments that do not fit the tool's or op's contract."""
TIMEOUT = "timeout"
"""The call did not finish in time."""
UNAVAILABLE = "unavailable"
"""A part the call needs does not answer (try again later)."""
TRANSPORT = "transport"
"""The plugin's process or its connection failed."""
INVALID_MANIFEST = "invalid_manifest"
"""A plugin folder that cannot be loaded (load time only; never reaches a caller)."""

REFUSAL_CODES = (
    DENIED,
    HELD,
    QUOTA_EXHAUSTED,
    UNCONFIGURED,
    UNKNOWN,
    INVALID_ARGUMENTS,
    TIMEOUT,
    UNAVAILABLE,
    TRANSPORT,
    INVALID_MANIFEST,
)
