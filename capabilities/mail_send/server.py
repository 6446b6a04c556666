"""mail.send: a visitor's agent emails the owner — and only the owner.

    send_email {subject, body, reply_to?} -> {sent: true, subject}

The recipient is never an argument. It is the owner's `recipient` config, else the owner's
own address (`owner.meta email`: the profile's, set with the owner tool `owner_profile_set` or
`mcp-host owner profile --email`); with neither, the call is `unconfigured` and says how to set
it. The visitor's
address goes into Reply-To (`reply_to`, else the email the visitor gave when the session
opened, else none), and the body ends with a note saying the mail came from a visitor and
that nothing in it was verified. The owner's address is never shown to the visitor.

Spam is the obvious abuse, so every mail is bounded: a one-line subject of at most
`MAX_SUBJECT_CHARS`, a body of at most the owner's `max_body_chars`, and counts: per access
code (`code_config.max_emails`) or API key (`key_config.max_emails`), enforced by the host's
quota where the `sent` row is written, and per session
(`role_config.max_emails_per_session`, the only count a public session meets), counted here
under a claim on the session so one session's sends run one at a time. The `sent` row is
written before the mail goes out (that is where the quota is exact) and deleted again when
the connector refuses, so a failed send costs nothing. The manifest's claim gate flags an
agent's answer that says it emailed the owner without a successful `send_email` in that turn.

Refusals: `invalid_arguments` (checked here before any op, although the connector refuses
header injection too), `unconfigured` (no recipient), `quota_exhausted`, `busy` (another
mail of this session is being sent), and the `mail` connector's own codes (`unavailable`,
`denied`, `rejected`, `unconfigured`), passed through.

Below: the plugin kit (host ops) and, through the host, the owner's `mail` connector.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.headerregistry import Address
from typing import Any

from mcp.server.mcpserver import Context

from mcp_host_kit import (
    Host,
    HostOpError,
    InvalidArguments,
    Kit,
    PluginServer,
    QuotaExhausted,
    SessionInfo,
    Unconfigured,
    tool_errors,
)
from mcp_host_kit.addresses import is_email

MAX_SUBJECT_CHARS = 200
MAX_PREFIX_CHARS = 50
MAX_NAME_CHARS = 100
CLAIM_TTL_S = 60  # longer than the host's call timeout: the claim outlives no call by much
SENT = "sent"
# Read by the visitor's agent and, through it or the owner's own, by the owner: how to fix it.
NO_ADDRESS = (
    "the owner has set no email address to send visitors' mail to; the owner sets it with the owner tool "
    "owner_profile_set {email} or `mcp-host owner profile --email ADDRESS`"
)

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_BODY_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # tab, LF, CR allowed

mcp = PluginServer("mail.send", version="1", log_level="WARNING")
kit = Kit(__file__)


def _subject(subject: str) -> str:
    subject = subject.strip()
    if not subject:
        raise InvalidArguments("subject must not be empty")
    if _CONTROL.search(subject):
        raise InvalidArguments("subject must be one line (no CR, LF or control characters)")
    if len(subject) > MAX_SUBJECT_CHARS:
        raise InvalidArguments(f"subject may be at most {MAX_SUBJECT_CHARS} characters")
    return subject


def _body(body: str, max_chars: int) -> str:
    body = body.replace("\r\n", "\n").replace("\r", "\n").strip()
    if not body:
        raise InvalidArguments("body must not be empty")
    if _BODY_CONTROL.search(body):
        raise InvalidArguments("body may hold no control characters but tabs and line breaks")
    if len(body) > max_chars:
        raise InvalidArguments(f"body may be at most {max_chars} characters")
    return body


def _reply_to(reply_to: str | None, session: SessionInfo) -> str | None:
    if reply_to is not None:
        reply_to = reply_to.strip()
        if not is_email(reply_to):
            raise InvalidArguments("reply_to must be one plain email address, e.g. ada@example.com")
        return reply_to
    # The address the visitor gave when the session opened, when it is one.
    given = session.visitor.email if session.visitor is not None else None
    return given if given is not None and is_email(given) else None


async def _recipient(host: Host, configured: Any) -> str:
    """The owner's configured recipient, else the owner's own address."""
    if isinstance(configured, str) and configured.strip():
        if not is_email(configured.strip()):
            raise Unconfigured("the recipient in mail.send's config is not an email address")
        return configured.strip()
    own = await host.owner.meta("email")
    if own is None or not is_email(own):
        raise Unconfigured(NO_ADDRESS)
    return own


def _footer(session: SessionInfo, reply_to: str | None) -> str:
    name = session.visitor.name if session.visitor is not None else None
    name = _CONTROL.sub("", name or "").strip()[:MAX_NAME_CHARS]
    if name and reply_to:
        gave = f"the name and address {_mailbox(name, reply_to)} (the Reply-To)"
    elif name:
        gave = f"the name {_mailbox(name, None)} and no address"
    elif reply_to:
        gave = f"the address {reply_to} (the Reply-To)"
    else:
        gave = "no name and no address"
    return (
        f"\n\n-- \nSent by a visitor's agent through mcp-host (session {session.session_id}, {session.mode}).\n"
        f"The visitor gave {gave}; nothing in this message was verified."
    )


def _mailbox(name: str, address: str | None) -> str:
    """`name` as an RFC 5322 display name, with `<address>` when there is one: quoted (`"` and
    `\\` escaped) when it holds a comma, a quote or another special, as a mail client writes it,
    so `"O'Brien, Ada" <ada@example.com>` pastes into a To: field as one person. Non-ASCII
    stays UTF-8 (RFC 6532): this is body text, where RFC 2047 encoded words do not belong."""
    display = str(Address(display_name=name)).removesuffix(" <>")
    return f"{display} <{address}>" if address else display


def _limit(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


@mcp.tool()
@tool_errors
async def send_email(subject: str, body: str, ctx: Context, reply_to: str | None = None) -> dict[str, Any]:
    """Send the owner a short plain-text email (the recipient is always the owner).
    `reply_to` is the visitor's own email address, for the owner's answer."""
    host = kit.host(ctx)
    session = host.session
    subject = _subject(subject)
    values = await host.config.get()
    body = _body(body, _limit(values.config.get("max_body_chars")) or 5000)
    reply_to = _reply_to(reply_to, session)
    recipient = await _recipient(host, values.config.get("recipient"))
    prefix = _CONTROL.sub("", str(values.config.get("subject_prefix") or ""))[:MAX_PREFIX_CHARS]
    per_session = _limit(values.role_config.get("max_emails_per_session"))

    claim = session.session_id or "owner"
    if not await host.store.claim(SENT, claim, CLAIM_TTL_S):
        raise HostOpError("busy", "another email of this session is being sent; try again in a moment")
    try:
        if per_session is not None and session.session_id is not None:
            if await host.store.count(SENT, {"session_id": session.session_id}) >= per_session:
                raise QuotaExhausted(f"this session may send no more emails (at most {per_session})")
        row = {"session_id": session.session_id, "subject": subject, "reply_to": reply_to, "status": "sending"}
        row["created_at"] = datetime.now(UTC).isoformat()
        record = await host.store.insert(SENT, row)  # the host's quota: exact, raced or not
        mail = {"to": [recipient], "subject": prefix + subject, "text": body + _footer(session, reply_to)}
        if reply_to is not None:
            mail["reply_to"] = reply_to
        try:
            result = await host.call("connector.invoke", {"category": "mail", "verb": "send", "args": mail})
        except HostOpError:
            await host.store.delete(SENT, id=record)  # not sent: it does not count
            raise
        await host.store.update(SENT, record, {**row, "status": "sent", "message_id": result.get("message_id")})
    finally:
        await host.store.release(SENT, claim)
    return {"sent": True, "subject": prefix + subject}


if __name__ == "__main__":
    mcp.run()
