"""The two routes of the host's sign-ins to remote servers (`children.RemoteSignIns`): the
client ID metadata document an authorization server fetches to learn the host as a client
(`GET /oauth/client.json`), and the page a browser comes back to from a server's sign-in
(`GET /oauth/callback`), which hands the code to the sign-in waiting for it and says how it
ended.

Above: `asgi` (the routes). Below: the running host's `RemoteSignIns`.
"""

from __future__ import annotations

import html

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from .wiring import Host

__all__ = ["client_document", "sign_in_callback"]

_MAX_PARAM_CHARS = 4096  # a code, a state or an issuer longer than this is no answer of a server
_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>
<body><h1>{title}</h1><p>{text}</p><p><a href="/owner/">Back to the console</a></p></body></html>"""
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
        status = 200
    else:
        title, text = "Sign-in not completed", outcome.cause or "the sign-in did not complete"
        status = 400
    page = _PAGE.format(title=html.escape(title), text=html.escape(text))
    return HTMLResponse(page, status_code=status, headers=_HEADERS)
