"""The console's cookie, CSRF and response-header rules, as plain functions (unit-tested
without a browser) and one ASGI wrapper.

Above: `app`. Below: the standard library and the SDK's Host/Origin check (through
`mcp_host.edge.HostOriginGuard`, which `app` puts in front of every console route).

- The session cookie is HttpOnly, SameSite=Strict, scoped to `/owner/`, and Secure when the
  request came over https: the ASGI scope's scheme, which uvicorn sets from
  `X-Forwarded-Proto` only for the proxies it trusts (`FORWARDED_ALLOW_IPS`).
- The CSRF token is derived from the cookie (HMAC-SHA256 keyed by the cookie's value): per
  session, unguessable without the cookie (which scripts cannot read), never stored, and
  dead with its session. Every non-GET request must carry it (form field `csrf` or header
  `X-CSRF-Token`), and a browser's `Sec-Fetch-Site` must not say another site sent it.
- Every answer carries a strict Content-Security-Policy (no inline script or style: the
  templates use only the package's own files), `nosniff`, no referrer to other origins
  (`same-origin`, see `SECURITY_HEADERS`) and no caching.
- An app's preview (`PREVIEW_PATH`: a plugin's HTML, untrusted) gets `PREVIEW_HEADERS` instead:
  a CSP sandbox with scripts but not same-origin (an opaque origin: no cookie, no console page,
  no storage of ours), no network at all (`default-src 'none'`; inline script and style, data:
  images and fonts only), framed only by the console itself.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "COOKIE_NAME",
    "COOKIE_PATH",
    "CSP",
    "CSRF_FIELD",
    "PREVIEW_CSP",
    "PREVIEW_PATH",
    "CSRF_HEADER",
    "SECURITY_HEADERS",
    "SecurityHeaders",
    "cleared_cookie",
    "cross_site",
    "csrf_ok",
    "csrf_token",
    "is_secure",
    "session_cookie",
]

COOKIE_NAME = "mcp_host_console"
COOKIE_PATH = "/owner/"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_CSRF_LABEL = b"mcp-host console csrf v1"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "frame-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PREVIEW_PATH = "/owner/tools/app/"
PREVIEW_CSP = (
    "sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; font-src data:; form-action 'none'; base-uri 'none'; frame-ancestors 'self'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    # Not no-referrer: under it a browser sends `Origin: null` with the console's own form posts
    # (Fetch, "serializing a request origin"), which the Origin check must refuse. same-origin
    # sends no referrer to any other origin, and our own origin with our own posts.
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
)
PREVIEW_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", PREVIEW_CSP.encode()),
    *(header for header in SECURITY_HEADERS if header[0] not in (b"content-security-policy", b"x-frame-options")),
    (b"x-frame-options", b"SAMEORIGIN"),
)


def is_secure(scope: Scope) -> bool:
    """Whether the browser reached us over TLS (directly, or through a trusted proxy)."""
    return scope.get("scheme") == "https"


def session_cookie(value: str, *, secure: bool, max_age_s: int) -> str:
    """The `Set-Cookie` value that signs the browser in."""
    attributes = [f"{COOKIE_NAME}={value}", f"Path={COOKIE_PATH}", f"Max-Age={max_age_s}", "HttpOnly"]
    attributes.append("SameSite=Strict")
    if secure:
        attributes.append("Secure")
    return "; ".join(attributes)


def cleared_cookie(*, secure: bool) -> str:
    """The `Set-Cookie` value that removes the cookie (sign-out)."""
    return session_cookie("", secure=secure, max_age_s=0)


def csrf_token(cookie: str) -> str:
    """The CSRF token of the session whose cookie this is."""
    return hmac.new(cookie.encode("ascii", "replace"), _CSRF_LABEL, hashlib.sha256).hexdigest()


def csrf_ok(cookie: str, given: str | None) -> bool:
    """Whether `given` is the CSRF token of this cookie's session (constant time)."""
    if not cookie or not given:
        return False
    return hmac.compare_digest(csrf_token(cookie).encode(), given.encode("ascii", "replace"))


def cross_site(headers: Mapping[str, str]) -> bool:
    """A browser says another site (or a sibling site) sent this request (`Sec-Fetch-Site`)."""
    return headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none")


class SecurityHeaders:
    """ASGI wrapper: every console answer gets `SECURITY_HEADERS` (replacing any of the same
    name); an app's preview, under `PREVIEW_PATH`, `PREVIEW_HEADERS`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = PREVIEW_HEADERS if str(scope.get("path", "")).startswith(PREVIEW_PATH) else SECURITY_HEADERS
        names = {name for name, _ in headers}

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": [*kept, *headers]}
            await send(message)

        await self.app(scope, receive, with_headers)
