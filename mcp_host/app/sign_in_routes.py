"""The two routes of the host's sign-ins to remote servers (`children.RemoteSignIns`): the
client ID metadata document an authorization server fetches to learn the host as a client
(`GET /oauth/client.json`), and the page a browser comes back to from a server's sign-in
(`GET /oauth/callback`), which hands the code to the sign-in waiting for it and says how it
ended; and the link a visitor opens to sign in with its own account (`GET /oauth/visitor`,
for a plugin that signs in per visitor), which starts that sign-in and sends the browser to the
server's authorization URL.

Above: `asgi` (the routes). Below: the running host's `RemoteSignIns`.
"""

from __future__ import annotations

import html

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from mcp_host.errors import HostError

from .wiring import Host

__all__ = ["client_document", "sign_in_callback", "visitor_sign_in"]

_MAX_PARAM_CHARS = 4096  # a code, a state or an issuer longer than this is no answer of a server
_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>
<body><h1>{title}</h1><p>{text}</p>{back}</body></html>"""
_BACK = '<p><a href="/owner/">Back to the console</a></p>'
_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",  # the code must not leave in a Referer
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
}


async def client_document(host: Host, request: Request) -> Response:
    return JSONResponse(host.sign_ins.client_document(), headers={"Cache-Control": "public, max-age=3600"})


async def sign_in_callback(host: Host, request: Request) -> Response:
    query = {k: v[:_MAX_PARAM_CHARS] for k, v in request.query_params.items() if k in ("code", "state", "iss", "error")}
    outcome = await host.sign_ins.finish(query)
    if outcome.connected:
        title, text = "Signed in", f"The host is signed in to {outcome.capability}'s server. You can close this page."
        return _page(title, text, 200)
    return _page("Sign-in not completed", outcome.cause or "the sign-in did not complete", 400)


async def visitor_sign_in(host: Host, request: Request) -> Response:
    """A visitor's sign-in link: start its sign-in, then on to the server's authorization URL."""
    ticket = request.query_params.get("ticket", "")[:_MAX_PARAM_CHARS]
    try:
        url = await host.sign_ins.start_visitor(ticket)
    except HostError as exc:
        return _page("Sign-in not started", exc.message, 400, back="")
    return RedirectResponse(url, status_code=303, headers=_HEADERS)


def _page(title: str, text: str, status: int, back: str = _BACK) -> HTMLResponse:
    page = _PAGE.format(title=html.escape(title), text=html.escape(text), back=back)
    return HTMLResponse(page, status_code=status, headers=_HEADERS)
