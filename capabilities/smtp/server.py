"""smtp: the `mail` connector, sending plain-text mail through the owner's SMTP server.

The host calls each verb as a tool and puts the owner's settings in the call's
`_meta["mcp-host/connection"]`: `host`, `port`, `username`, `password`, `from_address`,
`security`. They serve that call only; nothing is stored.

    send      {to: [email], subject, text, cc?: [email], reply_to?: email}
              -> {sent: true, message_id, refused: [email]}
    connected {} -> {ok, detail}

Settings (an unset one may come absent, null, "" or, for `port`, 0): `security` is
`starttls` (the default: plaintext connect, then STARTTLS, which the server must offer —
never a silent downgrade), `tls` (TLS from the first byte) or `none` (plaintext throughout,
for a relay on a trusted network). `port` defaults to 587, 465 and 25 for those. With a
`username` the connector logs in (the server must offer AUTH); without one it does not.
`from_address` defaults to the username when that is an email address. Certificates are
verified against the system's CA store.

A refusal is an `isError` result `{code, message}`: `invalid_arguments` (a bad address, CR or
LF in the subject, more than 50 recipients, a body over 256 KiB), `unconfigured` (no or
unusable settings; no STARTTLS or AUTH where the settings need them), `denied` (the server
refused the login), `unavailable` (unreachable, no answer in time, or the host's egress proxy
refused the server: `could not reach HOST:PORT: the host's egress proxy refused it (why)`),
`rejected` (the server refused the sender, every recipient, or the message). `refused` lists
the recipients the server turned down when it took the others. Messages never carry the
password or a library's exception text; logs name the exception class only.

Below: `aiosmtplib`, one connection per call, over a socket from the kit's `open_tunnel`:
sandboxed, the connector's only way out is the host's egress proxy (HTTP CONNECT to the
server's host and port, named by ALL_PROXY); unsandboxed, a direct connection.
"""

from __future__ import annotations

import email.policy
import email.utils
import logging
import re
import traceback
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Annotated, Any, Literal

import aiosmtplib
import anyio
from mcp.server.mcpserver import Context
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from mcp_host_kit import (
    Denied,
    HostOpError,
    InvalidArguments,
    Kit,
    PluginServer,
    Unavailable,
    Unconfigured,
    open_tunnel,
    tool_errors,
)
from mcp_host_kit.addresses import is_email

logger = logging.getLogger("smtp_connector")

CALL_TIMEOUT_S = 20.0  # below the host's call timeout (30 s), so the caller hears why
SMTP_TIMEOUT_S = 10.0
MAX_RECIPIENTS = 50
MAX_SUBJECT_CHARS = 500
MAX_TEXT_BYTES = 256 * 1024
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HOST = re.compile(
    r"\A(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9-]{1,63})*|\[?[0-9A-Fa-f:.]+\]?)\Z"
)


mcp = PluginServer("smtp", version="1", log_level="WARNING")
kit = Kit(__file__)


# ---------------------------------------------------------------------------------------------
# Settings and arguments


class Settings(BaseModel):
    """The owner's connection settings (see the module docstring for the defaults)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    host: str = Field(max_length=253)
    port: int | None = Field(default=None, ge=1, le=65535)
    username: str | None = Field(default=None, max_length=256)
    password: SecretStr | None = Field(default=None, max_length=1024)
    from_address: str | None = None
    security: Literal["starttls", "tls", "none"] = "starttls"

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not _HOST.match(value):
            raise ValueError("must be a host name or an IP address")
        return value.strip("[]")

    @field_validator("port", "username", "password", "from_address", "security", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object, info: ValidationInfo) -> object:
        # The host may hand every declared setting over, the unset ones as "" or 0.
        if value is None or value == "" or (info.field_name == "port" and value == 0):
            return cls.model_fields[info.field_name or ""].default
        return value

    @model_validator(mode="after")
    def _has_sender(self) -> Settings:
        if not is_email(self.sender):
            raise ValueError("from_address must be an email address (or the username one)")
        return self

    @property
    def sender(self) -> str:
        """The From address: `from_address`, else the username when it is an email address."""
        return self.from_address or self.username or ""

    @property
    def server(self) -> str:
        """host:port, for messages to the owner."""
        return f"{self.host}:{self.port or DEFAULT_PORTS[self.security]}"


def _settings(ctx: Context) -> Settings:
    connection = kit.connection(ctx)
    try:
        return Settings.model_validate(connection.settings)
    except ValidationError as exc:
        # Field names only: the values may be secrets.
        fields = sorted({str(e["loc"][0]) if e["loc"] else "from_address" for e in exc.errors()})
        raise Unconfigured(f"the mail connection's settings are unusable: {', '.join(fields)}") from None


def _addresses(name: str, values: list[str]) -> list[str]:
    for index, value in enumerate(values):
        if _CONTROL.search(value):
            raise InvalidArguments(f"{name}[{index}] holds a line break or control character")
        if not is_email(value):
            raise InvalidArguments(f"{name}[{index}] is not an email address")
    return values


def _message(
    settings: Settings, to: list[str], subject: str, text: str, cc: list[str], reply_to: str | None
) -> EmailMessage:
    if not to:
        raise InvalidArguments("to must name at least one recipient")
    _addresses("to", to)
    _addresses("cc", cc)
    if len({a.lower() for a in to + cc}) > MAX_RECIPIENTS:
        raise InvalidArguments(f"at most {MAX_RECIPIENTS} recipients (to and cc)")
    if reply_to is not None:
        _addresses("reply_to", [reply_to])
    if _CONTROL.search(subject):
        raise InvalidArguments("subject must be one line (no CR, LF or control characters)")
    if len(subject) > MAX_SUBJECT_CHARS:
        raise InvalidArguments(f"subject may be at most {MAX_SUBJECT_CHARS} characters")
    if "\x00" in text or len(text.encode()) > MAX_TEXT_BYTES:
        raise InvalidArguments(f"text must be at most {MAX_TEXT_BYTES // 1024} KiB of text")
    sender = settings.sender
    # 7-bit: non-ASCII text goes quoted-printable or base64, so no server needs 8BITMIME.
    message = EmailMessage(policy=email.policy.SMTP.clone(cte_type="7bit"))
    message["From"] = sender
    message["To"] = ", ".join(to)
    if cc:
        message["Cc"] = ", ".join(cc)
    if reply_to is not None:
        message["Reply-To"] = reply_to
    message["Subject"] = subject
    message["Date"] = email.utils.format_datetime(datetime.now(UTC))
    # An explicit domain: make_msgid would otherwise look up this machine's name.
    message["Message-ID"] = email.utils.make_msgid(domain=sender.rpartition("@")[2])
    message.set_content(text)
    return message


# ---------------------------------------------------------------------------------------------
# The server and its failures


@asynccontextmanager
async def _session(settings: Settings, action: str) -> AsyncIterator[aiosmtplib.SMTP]:
    """A connection to the server of `settings`, secured and logged in as they say, with every
    failure of `action` (words for the owner: "send mail") turned into a HostOpError and the
    whole bounded in time."""
    with _failures(action, settings), anyio.fail_after(CALL_TIMEOUT_S):
        # Through the host's egress proxy when the sandbox names one (the only way out
        # there), else directly; TLS is aiosmtplib's, over the socket, for `hostname`.
        sock = await open_tunnel(
            settings.host, settings.port or DEFAULT_PORTS[settings.security], timeout_s=SMTP_TIMEOUT_S
        )
        smtp = aiosmtplib.SMTP(
            hostname=settings.host,  # the name TLS sends (SNI) and checks the certificate for
            sock=sock,
            use_tls=settings.security == "tls",
            start_tls=False,  # done below, so a server without it is refused, not downgraded
            timeout=SMTP_TIMEOUT_S,
            # EHLO names the sender's domain: the default would look up this machine's name.
            local_hostname=settings.sender.rpartition("@")[2],
        )
        try:
            await smtp.connect()
        except BaseException:
            sock.close()  # aiosmtplib closes it only once its transport holds it
            raise
        try:
            await smtp.ehlo()  # what the server offers: STARTTLS, AUTH
            if settings.security == "starttls":
                if not smtp.supports_extension("starttls"):
                    raise Unconfigured(f"the mail server at {settings.server} does not offer STARTTLS")
                await smtp.starttls()
                await smtp.ehlo()  # RFC 3207: what the server offered before TLS is forgotten
            if settings.username is not None:
                if not smtp.supports_extension("auth"):
                    raise Unconfigured(f"the mail server at {settings.server} offers no login on this connection")
                password = settings.password.get_secret_value() if settings.password is not None else ""
                await smtp.login(settings.username, password)
            yield smtp
            await _quit(smtp)
        finally:
            smtp.close()  # a no-op after quit


async def _quit(smtp: aiosmtplib.SMTP) -> None:
    # Best effort: the work is done (a message may be sent); a server that drops the
    # connection instead of answering QUIT must not turn that into a failure to retry.
    try:
        await smtp.quit()
    except (aiosmtplib.SMTPException, OSError) as exc:
        _log("QUIT", exc)


@contextmanager
def _failures(action: str, settings: Settings) -> Iterator[None]:
    try:
        yield
    except HostOpError:
        raise
    except aiosmtplib.SMTPAuthenticationError:
        raise Denied("the mail server refused the username or password") from None
    except aiosmtplib.SMTPRecipientsRefused:
        raise HostOpError("rejected", "the mail server refused every recipient") from None
    except aiosmtplib.SMTPSenderRefused as exc:
        raise HostOpError("rejected", f"the mail server refused the sender address (SMTP {exc.code})") from None
    except aiosmtplib.SMTPDataError as exc:
        raise HostOpError("rejected", f"the mail server refused the message (SMTP {exc.code})") from None
    except (TimeoutError, aiosmtplib.SMTPTimeoutError):
        raise Unavailable(f"the mail server did not answer within {CALL_TIMEOUT_S:g} s") from None
    except (OSError, aiosmtplib.SMTPConnectError, aiosmtplib.SMTPServerDisconnected) as exc:
        _log(action, exc)
        raise Unavailable(f"could not reach the mail server at {settings.server}") from None
    except aiosmtplib.SMTPResponseException as exc:
        _log(action, exc)
        raise Unavailable(f"the mail server could not {action} (SMTP {exc.code})") from None
    except Exception as exc:  # another protocol failure, or a library bug
        _log(action, exc, trace=True)
        raise Unavailable(f"the mail server could not {action}") from None


def _log(action: str, exc: BaseException, *, trace: bool = False) -> None:
    # The class and where it was raised, never the text: it may quote the server or a secret.
    frames = "".join(traceback.format_tb(exc.__traceback__)) if trace else ""
    logger.warning("%s failed: %s.%s\n%s", action, type(exc).__module__, type(exc).__qualname__, frames)


# ---------------------------------------------------------------------------------------------
# Verbs

Email = Annotated[str, Field(description="an email address, e.g. ada@example.com")]


@mcp.tool()
@tool_errors
async def send(
    to: list[Email],
    subject: str,
    text: str,
    ctx: Context,
    cc: list[Email] | None = None,
    reply_to: Email | None = None,
) -> dict[str, Any]:
    """Send a plain-text mail from the owner's address. `refused` lists recipients the
    server turned down while taking the others."""
    settings = _settings(ctx)
    message = _message(settings, to, subject, text, cc or [], reply_to)
    async with _session(settings, "send mail") as smtp:
        refused, _ = await smtp.send_message(message)
    return {"sent": True, "message_id": message["Message-ID"], "refused": sorted(refused)}


@mcp.tool()
@tool_errors
async def connected(ctx: Context) -> dict[str, Any]:
    """Whether the settings reach the mail server (connect, EHLO, STARTTLS or TLS as set,
    login when a username is set): `ok`, and a `detail` to show the owner."""
    settings = _settings(ctx)
    try:
        async with _session(settings, "accept a connection"):
            pass
    except HostOpError as refusal:
        return {"ok": False, "detail": refusal.message}
    login = f"logged in as {settings.username}" if settings.username is not None else "no login"
    return {"ok": True, "detail": f"connected to {settings.server} ({settings.security}, {login})"}


if __name__ == "__main__":
    mcp.run()
