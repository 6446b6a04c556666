"""The REST endpoints' one error handler, on a small Starlette app: status, headers and body."""

from __future__ import annotations

import httpx2
import pytest
from inline_snapshot import snapshot
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcp_host.edge import REST_ERRORS, MethodNotAllowed, TooLarge, Unauthorized
from mcp_host.edge.rest_errors import Misdirected
from mcp_host.errors import DatabaseUnavailable, Denied, HostError, InvalidArguments, QuotaExhausted, UnknownTool

pytestmark = pytest.mark.anyio

RAISED: list[Exception] = []


async def _raise(request: Request) -> Response:
    raise RAISED[-1]


async def _answer(exc: Exception) -> tuple[int, dict[str, str], object]:
    RAISED.append(exc)
    app = Starlette(routes=[Route("/x", _raise, methods=["POST"])], exception_handlers=REST_ERRORS)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://t") as http:
        response = await http.post("/x")
    kept = {k: v for k, v in response.headers.items() if k in ("www-authenticate", "allow")}
    return response.status_code, kept, response.json()


async def test_each_refusal_has_its_status_and_designs_code() -> None:
    answers = [
        await _answer(exc)
        for exc in (
            Unauthorized("wrong token"),
            Unauthorized("no owner token", realm="mcp-host-owner"),
            Denied("no"),
            Misdirected("not our name"),
            InvalidArguments("body: bad"),
            TooLarge("body over 10 bytes"),
            UnknownTool("no such turn"),
            MethodNotAllowed("POST"),
            QuotaExhausted("used up"),
        )
    ]
    assert answers == snapshot(
        [
            (401, {"www-authenticate": 'Bearer realm="mcp-host"'}, {"error": "denied", "message": "wrong token"}),
            (
                401,
                {"www-authenticate": 'Bearer realm="mcp-host-owner"'},
                {"error": "denied", "message": "no owner token"},
            ),
            (403, {}, {"error": "denied", "message": "no"}),
            (421, {}, {"error": "denied", "message": "not our name"}),
            (400, {}, {"error": "invalid_arguments", "message": "body: bad"}),
            (413, {}, {"error": "invalid_arguments", "message": "body over 10 bytes"}),
            (404, {}, {"error": "unknown", "message": "no such turn"}),
            (405, {"allow": "POST"}, {"error": "unknown", "message": "this path takes POST only"}),
            (429, {}, {"error": "quota_exhausted", "message": "used up"}),
        ]
    )


async def test_a_database_outage_and_other_exceptions_are_not_answered_here() -> None:
    for exc in (DatabaseUnavailable(), RuntimeError("secret")):
        with pytest.raises(type(exc)):
            await _answer(exc)
    assert all(issubclass(cls, HostError) for cls in (Unauthorized, TooLarge, MethodNotAllowed))
