"""The console's cookie, CSRF and header rules, without a browser or a host."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Message

from owner_console.guard import (
    CSP,
    SecurityHeaders,
    cleared_cookie,
    cross_site,
    csrf_ok,
    csrf_token,
    is_secure,
    session_cookie,
)

pytestmark = pytest.mark.anyio


def test_the_session_cookie_is_httponly_strict_and_scoped_to_the_console() -> None:
    assert session_cookie("abc", secure=False, max_age_s=60) == (
        "mcp_host_console=abc; Path=/owner/; Max-Age=60; HttpOnly; SameSite=Strict"
    )
    assert session_cookie("abc", secure=True, max_age_s=60).endswith("; HttpOnly; SameSite=Strict; Secure")
    assert (
        cleared_cookie(secure=True) == "mcp_host_console=; Path=/owner/; Max-Age=0; HttpOnly; SameSite=Strict; Secure"
    )


def test_secure_follows_the_scheme_uvicorn_sets_from_a_trusted_proxy() -> None:
    assert is_secure({"type": "http", "scheme": "https"}) is True
    assert is_secure({"type": "http", "scheme": "http"}) is False
    assert is_secure({"type": "http"}) is False


def test_the_csrf_token_belongs_to_one_session_and_is_checked_exactly() -> None:
    one, other = "a" * 43, "b" * 43
    token = csrf_token(one)
    assert len(token) == 64 and token == csrf_token(one)
    assert token != csrf_token(other)
    assert csrf_ok(one, token) is True
    assert csrf_ok(other, token) is False
    assert csrf_ok(one, None) is False
    assert csrf_ok(one, "") is False
    assert csrf_ok(one, token[:-1]) is False
    assert csrf_ok("", csrf_token("")) is False  # no session, no token
    assert csrf_ok(one, "é" * 64) is False  # non-ASCII is compared, not raised on


def test_a_request_another_site_sent_is_cross_site() -> None:
    assert cross_site({"sec-fetch-site": "cross-site"}) is True
    assert cross_site({"sec-fetch-site": "same-site"}) is True  # a sibling subdomain or port is not us
    assert cross_site({"sec-fetch-site": "same-origin"}) is False
    assert cross_site({"sec-fetch-site": "none"}) is False  # typed in the address bar
    assert cross_site({}) is False  # not a browser: the CSRF token still decides


async def test_every_answer_carries_the_strict_headers_replacing_the_apps_own() -> None:
    app = SecurityHeaders(PlainTextResponse("x", headers={"Cache-Control": "max-age=60"}))
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/", "headers": []}
    await app(scope, receive, send)
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    assert headers["content-security-policy"] == CSP
    assert CSP == (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "frame-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
    assert headers["cache-control"] == "no-store"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert [k for k, _ in sent[0]["headers"]].count(b"cache-control") == 1
