"""The kit's exception tree, and how a plugin's tool reports one to its caller.

    HostOpError(code, message)      (base; any code of docs/design.md's vocabulary, or the plugin's own)
    ├── Denied                      denied
    ├── QuotaExhausted              quota_exhausted
    ├── InvalidArguments            invalid_arguments
    ├── Unconfigured                unconfigured (a connector's call carries no usable connection)
    └── Unavailable                 unavailable (also: the socket broke, the host did not answer)
        └── EgressRefused           unavailable: the host's egress proxy refused a destination

Above: the plugin's tools, which catch these or let `tool_errors` turn them into an `isError`
result with structured `{code, message}` — the shape the host reads `code` from. Below: the
back-channel client (`channel`) and the standalone emulation (`local`), which raise them.
A refused op's other codes (`timeout`, `held`, …) arrive as the base class with that code.
The codes are the plugin contract's (`contract.codes`), as the host's exception tree's are.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, ParamSpec, TypeVar

import mcp.types as types

from .contract import DENIED, INVALID_ARGUMENTS, QUOTA_EXHAUSTED, UNAVAILABLE, UNCONFIGURED

__all__ = [
    "Denied",
    "EgressRefused",
    "HostOpError",
    "InvalidArguments",
    "QuotaExhausted",
    "Unavailable",
    "Unconfigured",
    "error_for",
    "error_result",
    "tool_errors",
]

P = ParamSpec("P")
R = TypeVar("R")


class HostOpError(Exception):
    """A refused or failed op (or a plugin's own refusal): `code` and a message for the caller.

    Raise it from a tool with a code of your own (`HostOpError("not_found", "no such note")`)
    to refuse a call the same way the host does.
    """

    default_code: ClassVar[str] = UNAVAILABLE

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Denied(HostOpError):
    default_code = DENIED

    def __init__(self, message: str) -> None:
        super().__init__(self.default_code, message)


class QuotaExhausted(HostOpError):
    default_code = QUOTA_EXHAUSTED

    def __init__(self, message: str) -> None:
        super().__init__(self.default_code, message)


class InvalidArguments(HostOpError):
    default_code = INVALID_ARGUMENTS

    def __init__(self, message: str) -> None:
        super().__init__(self.default_code, message)


class Unavailable(HostOpError):
    default_code = UNAVAILABLE

    def __init__(self, message: str) -> None:
        super().__init__(self.default_code, message)


class EgressRefused(Unavailable):
    """The host's egress proxy refused to open a connection to `destination` ("host:port"):
    the plugin's manifest (or its owner) does not let it reach there. `reason` is the proxy's
    one-line answer, cleaned of control characters; the message names both, for the caller."""

    def __init__(self, destination: str, reason: str) -> None:
        super().__init__(f"could not reach {destination}: the host's egress proxy refused it ({reason})")
        self.destination = destination
        self.reason = reason


class Unconfigured(HostOpError):
    """A connector's call carries no connection, or settings the connector cannot use: the
    owner has to connect (again) before the call can work."""

    default_code = UNCONFIGURED

    def __init__(self, message: str) -> None:
        super().__init__(self.default_code, message)


_BY_CODE: dict[str, type[Denied | QuotaExhausted | InvalidArguments | Unavailable | Unconfigured]] = {
    cls.default_code: cls for cls in (Denied, QuotaExhausted, InvalidArguments, Unavailable, Unconfigured)
}


def error_for(code: str, message: str) -> HostOpError:
    """The exception for a refusal with `code`: a subclass when one names it, else the base."""
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else HostOpError(code, message)


def error_result(error: HostOpError) -> types.CallToolResult:
    """`error` as a tool result: `isError` with structured `{code, message}` (docs/design.md)."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{error.code}: {error.message}")],
        structured_content={"code": error.code, "message": error.message},
        is_error=True,
    )


def tool_errors(
    fn: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R | types.CallToolResult]]:
    """Decorate an async tool so a `HostOpError` it raises becomes `error_result(error)`.

    Put it below `@mcp.tool()`; the tool keeps its signature (MCPServer reads the wrapped
    function's). Any other exception passes through to MCPServer, which logs it and answers
    the caller opaquely.
    """
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"tool_errors decorates async functions; {fn.__qualname__} is not one")

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | types.CallToolResult:
        try:
            return await fn(*args, **kwargs)
        except HostOpError as error:
            return error_result(error)

    return wrapper
