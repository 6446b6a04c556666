"""The REST endpoints' one error boundary: a `HostError` as an HTTP answer in docs/design.md's codes.

Above: the REST endpoints (`POST /v1/sessions`, the turns routes, `GET /v1/catalogue`), which
raise `HostError`s, and the composition root, which registers `REST_ERRORS` as the Starlette
app's exception handlers. Below: `errors` (the exception tree) and Starlette's responses.

Every refusal is `{"error": code, "message": message}` with the code of the exception's class
(docs/design.md "Error vocabulary") and the HTTP status of the table below; a credential that is
missing or not accepted (`Unauthorized`) also carries its `WWW-Authenticate` challenge, a
method the path does not take (`MethodNotAllowed`) its `Allow` header. Only `HostError`s are
handled, and not a database outage: `OutageGuard` (outside Starlette's exception handlers)
answers that 503 with `Retry-After`, and anything else (an `InternalError` included) goes on to
Starlette's 500, never with its text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ExceptionHandler

from mcp_host.errors import (
    CallTimeout,
    DatabaseUnavailable,
    Denied,
    Held,
    HostError,
    InternalError,
    InvalidArguments,
    QuotaExhausted,
    TransportFailure,
    Unavailable,
    Unconfigured,
    UnknownTool,
)

__all__ = ["REST_ERRORS", "MethodNotAllowed", "Misdirected", "TooFast", "TooLarge", "Unauthorized", "rest_response"]


class Unauthorized(Denied):
    """No credential, or one that was not accepted: 401 with a bearer challenge of `realm`,
    naming the door's protected-resource metadata (RFC 9728 §5.1) when it is an OAuth resource."""

    def __init__(self, message: str, realm: str = "mcp-host", resource_metadata: str | None = None) -> None:
        super().__init__(message)
        self.realm = realm
        self.resource_metadata = resource_metadata


class Misdirected(Denied):
    """A request whose Host is not one of this host's names: 421."""


class TooLarge(InvalidArguments):
    """A request body over the endpoint's cap: 413."""


class MethodNotAllowed(UnknownTool):
    """A method the path does not take: 405 with `Allow: allowed`."""

    def __init__(self, allowed: str) -> None:
        super().__init__(f"this path takes {allowed} only")
        self.allowed = allowed


class TooFast(Unavailable):
    """A principal starts something faster than its share allows: 429 with Retry-After."""

    def __init__(self, what: str, retry_after_s: float) -> None:
        self.retry_after_s = max(1, math.ceil(retry_after_s))
        super().__init__(f"{what}; retry in {self.retry_after_s} s")


# Most specific first: the first class the exception is an instance of gives the status.
_STATUS: tuple[tuple[type[HostError], int], ...] = (
    (Unauthorized, 401),
    (Misdirected, 421),
    (Denied, 403),
    (TooLarge, 413),
    (InvalidArguments, 400),
    (MethodNotAllowed, 405),
    (UnknownTool, 404),
    (Held, 409),
    (Unconfigured, 409),
    (QuotaExhausted, 429),
    (TooFast, 429),
    (CallTimeout, 504),
    (TransportFailure, 502),
    (Unavailable, 503),
)


def rest_response(exc: HostError) -> Response:
    """`exc` as the REST endpoints answer it (see the module's docstring)."""
    status = next((status for cls, status in _STATUS if isinstance(exc, cls)), 503)
    headers: dict[str, str] = {}
    if isinstance(exc, Unauthorized):
        challenge = f'Bearer realm="{exc.realm}"'
        if exc.resource_metadata is not None:
            challenge += f', resource_metadata="{exc.resource_metadata}"'
        headers["WWW-Authenticate"] = challenge
    elif isinstance(exc, MethodNotAllowed):
        headers["Allow"] = exc.allowed
    elif isinstance(exc, TooFast):
        headers["Retry-After"] = str(exc.retry_after_s)
    return JSONResponse({"error": exc.code, "message": exc.message}, status_code=status, headers=headers)


async def _handle(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HostError)  # registered for HostError only
    if isinstance(exc, DatabaseUnavailable):
        raise exc  # `OutageGuard`, outside, answers an outage 503 with its Retry-After
    if isinstance(exc, InternalError):
        raise exc  # the host's own fault: Starlette's 500, as for any exception not handled here
    return rest_response(exc)


REST_ERRORS: Mapping[type[Exception], ExceptionHandler] = {HostError: _handle}
"""The Starlette app's `exception_handlers`: `Starlette(..., exception_handlers=REST_ERRORS)`."""
