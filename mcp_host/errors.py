"""The host's exception tree; each class maps to one error code of docs/design.md.

    HostError                       (base; never raised itself)
    ├── Denied                      denied
    ├── Held                        held
    ├── QuotaExhausted              quota_exhausted
    ├── Unconfigured                unconfigured
    ├── UnknownTool                 unknown
    ├── InvalidArguments            invalid_arguments
    ├── CallTimeout                 timeout
    ├── Unavailable                 unavailable
    │   ├── DatabaseUnavailable     unavailable (the database does not answer; an outage)
    │   └── AnswerTooLarge          unavailable (a child's answer past the bytes it may send at once)
    ├── TransportFailure            transport
    ├── ManifestError               (load time only; never reaches a caller)
    └── InternalError               (the host's own fault: answered as any unknown exception)

Each door (the visitor endpoint, the owner endpoint, a node's endpoint, the back-channel) has one
boundary that classifies and logs an exception with `at_boundary` (a database outage, decided by
asyncpg's exception classes in `as_unavailable`, is answered `unavailable` and logged once by the
database watch, not per call) and turns it into a wire error with the two functions below, which
are the only places that map: `tool_error` (a tool result with `isError`, `{code, message}` in
`_meta["mcp-host/error"]`, as text, and as structured content unless the tool declares an
`outputSchema`) and `rpc_error` (a JSON-RPC error, for the MCP methods that are not tool calls).
The message of a `HostError` is written for the caller (`explained`); an `InternalError` and
anything else are answered with the boundary's opaque message, and the boundary logs them with
their traceback: `str(exc)` never reaches a caller. The JSON-RPC codes the host answers with are
named here, and nowhere else. A failure a part works around (a read that falls back) is logged
with `log_unless_outage`.

Below: the MCP SDK's types and asyncpg's exception classes only (this is the lowest layer of
`mcp_host`).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Protocol

import asyncpg
import asyncpg.exceptions
import mcp.types as types
from mcp import MCPError

from mcp_host_kit.contract import ERROR_KEY, codes  # the refusal codes and key: one home, the plugin contract

__all__ = [
    "AnswerTooLarge",
    "CallTimeout",
    "DatabaseUnavailable",
    "Denied",
    "Held",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "InternalError",
    "OPAQUE",
    "RefusalLog",
    "QuotaExhausted",
    "RESOURCE_NOT_FOUND",
    "HostError",
    "InvalidArguments",
    "ManifestError",
    "TransportFailure",
    "Unavailable",
    "Unconfigured",
    "UNREADABLE_ANSWER",
    "UnknownTool",
    "as_unavailable",
    "at_boundary",
    "error_result",
    "explained",
    "is_connection_failure",
    "log_unless_outage",
    "rpc_error",
    "tool_error",
]

# JSON-RPC error codes: the SDK's, and MCP's own for a resource that is not there.
PARSE_ERROR = types.PARSE_ERROR
INVALID_REQUEST = types.INVALID_REQUEST
INVALID_PARAMS = types.INVALID_PARAMS
INTERNAL_ERROR = types.INTERNAL_ERROR
RESOURCE_NOT_FOUND = -32002
UNREADABLE_ANSWER = -32099
"""The code of the answer the framing gives in a child's stead when the child's own answer is a
line the host cannot read (`wire.framing`); `children` answers the caller `unavailable`."""

OPAQUE = "the call failed inside the host"
"""What a caller is told of an exception that is not a `HostError` (the boundary logs it)."""


class HostError(Exception):
    """A failure the host can explain to its caller; `code` is docs/design.md's error vocabulary."""

    code: ClassVar[str] = codes.UNAVAILABLE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Denied(HostError):
    code = codes.DENIED


class Held(HostError):
    """The call waits for the owner's approval (docs/design.md "hold"); the message names the hold."""

    code = codes.HELD


class QuotaExhausted(HostError):
    """The subject has used its quota of this capability (docs/design.md "quota")."""

    code = codes.QUOTA_EXHAUSTED


class Unconfigured(HostError):
    """What the call needs has not been set up by the owner (e.g. no connector connected)."""

    code = codes.UNCONFIGURED


class UnknownTool(HostError):
    code = codes.UNKNOWN


class InvalidArguments(HostError):
    code = codes.INVALID_ARGUMENTS


class CallTimeout(HostError):
    code = codes.TIMEOUT


class Unavailable(HostError):
    code = codes.UNAVAILABLE


class DatabaseUnavailable(Unavailable):
    """The database does not answer (it died, restarts, or cannot be reached): an outage.

    `as_unavailable` turns asyncpg's connection-class failures into this; doors
    answer it as `unavailable` (HTTP routes: 503 with Retry-After) without a traceback, since
    the database watch logs each outage once, when it starts and when it ends.
    """

    def __init__(self, message: str = "the database is unavailable; try again shortly") -> None:
        super().__init__(message)


class TransportFailure(HostError):
    code = codes.TRANSPORT


class AnswerTooLarge(Unavailable):
    """A child's answer was a message longer than a child may send at once (the framing's line
    limit): the host stopped reading it and the child was stopped (`unavailable`, as any child
    that stops while answering)."""


class ManifestError(HostError):
    """A plugin folder that cannot be loaded; `path` and `field` say where."""

    code = codes.INVALID_MANIFEST

    def __init__(self, path: str, field: str, problem: str) -> None:
        super().__init__(f"{path}: {field}: {problem}" if field else f"{path}: {problem}")
        self.path = path
        self.field = field
        self.problem = problem


class InternalError(HostError):
    """A fault that is the host's own business (a schema it cannot run on, a sealed value that
    does not open, a cgroup it cannot make): its message is for the log and the local operator,
    never for a caller. The doors answer it exactly as an exception they do not know: logged
    with its traceback, answered with their opaque message; the REST handler leaves it to
    Starlette's 500."""

    code = codes.UNAVAILABLE


def explained(exc: BaseException) -> HostError | None:
    """`exc` when its message is written for the caller (a `HostError` that is not an
    `InternalError`); else None: the boundary logs `exc` with its traceback and answers opaquely."""
    if isinstance(exc, HostError) and not isinstance(exc, InternalError):
        return exc
    return None


# SQLSTATE 57P01-57P05: the server is shutting down, crashed, is starting, dropped the
# database or ended an idle session — the connection is gone, not the query wrong.
_SERVER_GONE = (
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.DatabaseDroppedError,
    asyncpg.exceptions.IdleSessionTimeoutError,
)
# InterfaceErrors that describe the caller's values or the client's configuration, not the
# connection (asyncpg's own DataError and ClientConfigurationError are also ValueErrors).
_MISUSE = (
    ValueError,
    asyncpg.exceptions.UnsupportedClientFeatureError,
    asyncpg.exceptions.UnsupportedServerFeatureError,
)


def is_connection_failure(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached, rather than that a query was wrong.

    By class only: `DatabaseUnavailable`, SQLSTATE class 08 (`PostgresConnectionError`, incl.
    `ConnectionDoesNotExistError`), 57P01-57P05, asyncpg's `InterfaceError` about the
    connection (closed, pool closing) but not about the caller's values, and a plain
    `InternalClientError` (a connection caught between its server's last words and EOF). A
    group counts when every exception in it does. A bare `OSError` does not: a failed connect
    is already raised as `DatabaseUnavailable` by the pool's connect hook, and elsewhere an
    OSError may be anything.
    """
    if isinstance(exc, BaseExceptionGroup):
        return all(is_connection_failure(inner) for inner in exc.exceptions)
    if isinstance(exc, (DatabaseUnavailable, asyncpg.PostgresConnectionError, *_SERVER_GONE)):
        return True
    if type(exc) is asyncpg.exceptions.InternalClientError:
        # What a pooled connection says when it is used after its server sent a last FATAL
        # (the postmaster died) but before the end of its socket was read; not its subclasses.
        return True
    return isinstance(exc, asyncpg.InterfaceError) and not isinstance(exc, _MISUSE)


def as_unavailable(exc: BaseException) -> DatabaseUnavailable | None:
    """`exc` as a `DatabaseUnavailable` when it is a connection failure, else None.

    `at_boundary` calls this on exceptions a door does not otherwise know, and answer a
    non-None result as `unavailable` (HTTP 503) without logging a traceback.
    """
    if isinstance(exc, DatabaseUnavailable):
        return exc
    if not is_connection_failure(exc):
        return None
    outage = DatabaseUnavailable()
    outage.__cause__ = exc
    return outage


class RefusalLog(Protocol):
    """Where a boundary may log the refusals it answers, by code (`wire.LimitedLog`: a few lines a
    second per code, so one caller's flood of refused calls does not flood the log)."""

    def log(self, source: str, level: int, message: str, *args: Any) -> object: ...


def at_boundary(
    exc: BaseException, log: logging.Logger, what: str, *args: object, refusals: bool | RefusalLog = True
) -> HostError | None:
    """The step every door's boundary takes with an exception met while answering `what % args`
    (a call, an op, a method): classify it and log it, once, here.

    Returns what the caller may be told: a `HostError` written for it (`explained`; logged at info
    as "<what> -> <code>: <message>" on `log`, or through `refusals` when it is a `RefusalLog`, not
    at all when it is False), or a `DatabaseUnavailable` for an outage
    (`as_unavailable`; not logged: the database watch logs each outage once). Anything else
    (an `InternalError` included) returns None and is logged on `log` with its traceback, as
    "<what> failed unexpectedly"; the door answers it with its opaque message (`tool_error`,
    `rpc_error`)."""
    known = explained(exc) or as_unavailable(exc)
    if known is None:
        log.error(f"{what} failed unexpectedly", *args, exc_info=exc)
    elif not isinstance(known, DatabaseUnavailable):
        line = f"{what} -> %s: %s"
        if not isinstance(refusals, bool):
            refusals.log(known.code, logging.INFO, line, *args, known.code, known.message)
        elif refusals:
            log.info(line, *args, known.code, known.message)
    return known


def log_unless_outage(exc: BaseException, log: logging.Logger, message: str, *args: object) -> None:
    """Log a failure a part works around (a read that falls back): at warning with its traceback,
    or during a database outage at debug without one (the database watch logs each outage once)."""
    outage = as_unavailable(exc) is not None
    log.log(logging.DEBUG if outage else logging.WARNING, message, *args, exc_info=None if outage else exc)


def error_result(code: str, message: str, *, structured: bool = True) -> types.CallToolResult:
    """A refused or failed call: `isError`, `{code, message}` in `_meta[ERROR_KEY]` (always: the
    machine-readable code) and as text (`"code: message"`, for people and agents).

    `structured`: also as structured content, the contract Python clients and the kit read.
    Pass False when the refused tool declares an `outputSchema`, or when the host cannot tell
    whether it does (a name it does not resolve): the TypeScript SDK client and the MCP
    Inspector check structured content against the tool's output schema even on an error, and
    fail the whole call (-32602) when `{code, message}` does not fit it.
    """
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structured_content={"code": code, "message": message} if structured else None,
        is_error=True,
        _meta={ERROR_KEY: {"code": code, "message": message}},
    )


def tool_error(exc: BaseException, opaque: str = OPAQUE, *, structured: bool = True) -> types.CallToolResult:
    """`exc` as a tool result (`error_result`, with `structured`): a `HostError` with its own
    code and message, anything else (an `InternalError` included) `unavailable` with `opaque`
    (the caller's boundary logs it with its traceback)."""
    known = explained(exc)
    if known is not None:
        return error_result(known.code, known.message, structured=structured)
    return error_result(Unavailable.code, opaque, structured=structured)


def rpc_error(exc: BaseException, opaque: str, *, not_found: int = INVALID_PARAMS) -> MCPError:
    """`exc` as a JSON-RPC error to raise from an MCP handler: `UnknownTool` (a prompt,
    resource or template that is not there) is `not_found`, `InvalidArguments` is
    `INVALID_PARAMS`, another `HostError` is `INTERNAL_ERROR` with its message, anything else
    (an `InternalError` included) `INTERNAL_ERROR` with `opaque` (the caller's boundary logs it
    with its traceback)."""
    known = explained(exc)
    if isinstance(known, UnknownTool):
        return MCPError(code=not_found, message=known.message)
    if isinstance(known, InvalidArguments):
        return MCPError(code=INVALID_PARAMS, message=known.message)
    if known is not None:
        return MCPError(code=INTERNAL_ERROR, message=known.message)
    return MCPError(code=INTERNAL_ERROR, message=opaque)
