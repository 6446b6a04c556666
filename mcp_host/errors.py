"""The host's exception tree; each class maps to one error code of DESIGN.md.

    HostError                       (base; never raised itself)
    ├── Denied                      denied
    ├── Held                        held
    ├── QuotaExhausted              quota_exhausted
    ├── Unconfigured                unconfigured
    ├── UnknownTool                 unknown
    ├── InvalidArguments            invalid_arguments
    ├── CallTimeout                 timeout
    ├── Unavailable                 unavailable
    │   └── DatabaseUnavailable     unavailable (the database does not answer; an outage)
    ├── TransportFailure            transport
    └── ManifestError               (load time only; never reaches a caller)

Doors (the visitor endpoint, later the owner endpoint and the back-channel) turn a
`HostError` into a wire error with `code` and `message`. The message of a `HostError` is
written for the caller; anything else is logged and answered with an opaque message.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CallTimeout",
    "DatabaseUnavailable",
    "Denied",
    "Held",
    "QuotaExhausted",
    "HostError",
    "InvalidArguments",
    "ManifestError",
    "TransportFailure",
    "Unavailable",
    "Unconfigured",
    "UnknownTool",
]


class HostError(Exception):
    """A failure the host can explain to its caller; `code` is DESIGN.md's error vocabulary."""

    code: ClassVar[str] = "unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Denied(HostError):
    code = "denied"


class Held(HostError):
    """The call waits for the owner's approval (DESIGN.md "hold"); the message names the hold."""

    code = "held"


class QuotaExhausted(HostError):
    """The subject has used its quota of this capability (DESIGN.md "quota")."""

    code = "quota_exhausted"


class Unconfigured(HostError):
    """What the call needs has not been set up by the owner (e.g. no connector connected)."""

    code = "unconfigured"


class UnknownTool(HostError):
    code = "unknown"


class InvalidArguments(HostError):
    code = "invalid_arguments"


class CallTimeout(HostError):
    code = "timeout"


class Unavailable(HostError):
    code = "unavailable"


class DatabaseUnavailable(Unavailable):
    """The database does not answer (it died, restarts, or cannot be reached): an outage.

    `database.as_unavailable` turns asyncpg's connection-class failures into this; doors
    answer it as `unavailable` (HTTP routes: 503 with Retry-After) without a traceback, since
    the database watch logs each outage once, when it starts and when it ends.
    """

    def __init__(self, message: str = "the database is unavailable; try again shortly") -> None:
        super().__init__(message)


class TransportFailure(HostError):
    code = "transport"


class ManifestError(HostError):
    """A plugin folder that cannot be loaded; `path` and `field` say where."""

    code = "invalid_manifest"

    def __init__(self, path: str, field: str, problem: str) -> None:
        super().__init__(f"{path}: {field}: {problem}" if field else f"{path}: {problem}")
        self.path = path
        self.field = field
        self.problem = problem
