"""The front desk's HTML: the page where a person lets a client in, and the pages that end a
visit early. Plain functions of plain values; everything shown is escaped here.

Above: `endpoint` (which decides what to show). Below: the standard library only.

What a page shows is attacker-chosen in part: a client names itself at registration and the
name is shown as it said it, escaped and marked as its own claim; the redirect target is shown
by its scheme and host only. The form is the contract other programs drive (a client's test
harness, a browser): `request` (hidden), `name`, `email` and `code` (a visitor door) or
`owner_token` (the owner door), and a submit button `decision` of value `allow` or `deny`.
Decline never needs the other fields (`formnovalidate`).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from html import escape
from urllib.parse import urlsplit

__all__ = ["CSP", "DeskView", "desk_page", "notice_page", "shown_target"]

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:34rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "label{display:block;margin:.8rem 0}input{display:block;width:100%;padding:.4rem;box-sizing:border-box}"
    ".claim{color:#555;font-size:.9em}.error{color:#a00;font-weight:bold}"
    "button{margin:1rem .5rem 0 0;padding:.5rem 1.2rem}"
)
CSP = (
    "default-src 'none'; "
    f"style-src 'sha256-{base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()}'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
"""No script, no frame, the one inline style. No `form-action`: a browser would apply it to the
redirect back to the client as well, which may be any registered redirect URI."""


@dataclass(frozen=True)
class DeskView:
    """What the page of one waiting request shows. `offer`: the titles of what a visitor may
    use without a code (None: shown nothing, the owner lets no one in without one)."""

    request_id: str
    action: str
    owner_name: str | None
    client_name: str | None
    target: str
    owner_door: bool
    offer: tuple[str, ...] | None = None
    code_required: bool = True
    signed_in: bool = False
    email: str = "optional"
    """Whether the visitor's email is asked: `off`, `optional` or `required` (the owner's choice)."""


def shown_target(redirect_uri: str) -> str:
    """The part of a redirect URI the page names: its scheme and host."""
    parts = urlsplit(redirect_uri)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"


def _document(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body><main>{body}</main></body></html>"
    )


def _client(view: DeskView) -> str:
    named = (
        f"<strong>{escape(view.client_name)}</strong> "
        '<span class="claim">(the name it gives itself; the host has not checked it)</span>'
        if view.client_name
        else "<strong>an application that gave no name</strong>"
    )
    return (
        f"<p>{named} asks to connect to {'the owner door' if view.owner_door else 'this host'}. "
        f"Whatever you decide, your browser goes back to <strong>{escape(view.target)}</strong>.</p>"
    )


def _visitor_fields(view: DeskView) -> str:
    if view.offer is None:
        offer = "<p>The owner shares this host's tools with people who have an access code.</p>"
    elif view.offer:
        items = "".join(f"<li>{escape(title)}</li>" for title in view.offer)
        offer = f"<p>Anyone may use:</p><ul>{items}</ul><p>An access code may let you use more.</p>"
    else:
        offer = "<p>An access code from the owner decides what you may use.</p>"
    code = "Access code" if view.code_required else "Access code (if the owner gave you one)"
    required = " required" if view.code_required else ""
    return (
        f"{offer}"
        '<label>Your name <input name="name" maxlength="200" autocomplete="name"></label>'
        f"{_email_field(view.email)}"
        f'<label>{code} <input name="code" maxlength="256" autocomplete="off"{required}></label>'
    )


def _email_field(asked: str) -> str:
    if asked == "off":
        return ""
    label, required = ("Your email", " required") if asked == "required" else ("Your email (optional)", "")
    return f'<label>{label} <input name="email" type="email" maxlength="320" autocomplete="email"{required}></label>'


def _owner_fields(view: DeskView) -> str:
    if view.signed_in:
        return "<p>You are signed in to the console as the owner.</p>"
    return (
        "<p>Only the owner may let a client in here: it will act as you, with every owner tool.</p>"
        '<label>Owner token <input name="owner_token" type="password" autocomplete="current-password" required></label>'
    )


def desk_page(view: DeskView, error: str | None = None) -> str:
    """The page of a waiting request: who asks, what it offers, the form."""
    who = escape(view.owner_name) if view.owner_name else "The owner"
    title = f"{view.owner_name or 'The owner'}'s MCP host"
    fields = _owner_fields(view) if view.owner_door else _visitor_fields(view)
    problem = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    body = (
        f"<h1>{who}'s MCP host</h1>{_client(view)}{problem}"
        f'<form method="post" action="{escape(view.action)}">'
        f'<input type="hidden" name="request" value="{escape(view.request_id)}">{fields}'
        '<button type="submit" name="decision" value="allow">Let it in</button>'
        '<button type="submit" name="decision" value="deny" formnovalidate>Decline</button>'
        "</form>"
    )
    return _document(title, body)


def notice_page(title: str, message: str) -> str:
    """A page that ends the visit: an unknown or expired request, a refused request."""
    return _document(title, f"<h1>{escape(title)}</h1><p>{escape(message)}</p>")
