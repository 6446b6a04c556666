"""The builtin `smtp` connector: a real stdio MCP child sending to an aiosmtpd server on loopback.

The server (in process, on its own thread) offers AUTH LOGIN/PLAIN without TLS — loopback
only — and records every message it accepts. The connector gets its settings per call in
`_meta["mcp-host/connection"]`, as the host sends them.
"""

from __future__ import annotations

import email
import email.policy
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from inline_snapshot import snapshot

from mcp_host.children.pool import ChildPool
from mcp_host.plugins.loading import load_plugins
from mcp_host.sandbox.launch import launch_for
from mcp_host.settings import Settings as HostSettings
from mcp_host_kit import CONNECTION_KEY
from tests.capabilities.connector_child import Connector, connector_child, loopback_egress, refusal
from tests.certificates import tls_pair
from tests.hosting import BUILTINS, free_port
from tests.processes import CHILD_LIMITS, needs_bwrap
from tests.proxy_peer import REASON, running_proxy

pytestmark = pytest.mark.anyio

SERVER = BUILTINS / "smtp" / "server.py"
USER = "mailer"
PASSWORD = "smtp-Pa55-4f9c2e"
WRONG_PASSWORD = "wrong-Pa55-7d1b0a"
SENDER = "owner@example.test"


@dataclass
class Mailbox:
    port: int
    envelopes: list[Envelope] = field(default_factory=list)

    def settings(self, **overrides: Any) -> dict[str, Any]:
        values = {
            "host": "127.0.0.1",
            "port": self.port,
            "username": USER,
            "password": PASSWORD,
            "from_address": SENDER,
            "security": "none",
        }
        return {**values, **overrides}


class _Recorder:
    def __init__(self, envelopes: list[Envelope]) -> None:
        self.envelopes = envelopes

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"


def _authenticate(server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any) -> AuthResult:
    known = {LoginPassword(user.encode(), PASSWORD.encode()) for user in (USER, SENDER)}
    # handled=False: aiosmtpd answers 235 or 535 itself.
    return AuthResult(success=isinstance(data, LoginPassword) and data in known, handled=False)


@contextmanager
def serving_mailbox(**tls: Any) -> Iterator[Mailbox]:
    """An aiosmtpd server on a free loopback port; `tls`: aiosmtpd's `tls_context` (STARTTLS)
    or `ssl_context` (TLS from the first byte)."""
    box = Mailbox(port=free_port())
    controller = Controller(
        _Recorder(box.envelopes),
        hostname="127.0.0.1",
        port=box.port,
        authenticator=_authenticate,
        # Loopback only: AUTH offered without TLS. Not auth_required: aiosmtpd warns (an error
        # here) when AUTH is required without TLS; a failed login is refused all the same.
        auth_require_tls=False,
        **tls,
    )
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    with serving_mailbox() as box:
        yield box


@pytest.fixture(scope="module")
async def connector(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Connector]:
    async with connector_child(SERVER, "mail", tmp_path_factory.mktemp("connector")) as child:
        yield child


MESSAGE = {"to": ["ada@example.test"], "subject": "Hello", "text": "Hi Ada."}


async def test_send_delivers_the_message_with_its_headers_and_body(connector: Connector, mailbox: Mailbox) -> None:
    args = {
        "to": ["ada@example.test", "grace@example.test"],
        "cc": ["alan@example.test"],
        "reply_to": "desk@example.test",
        "subject": "Café at 10 ☕",
        "text": "Shall we meet?\n\n— Owner\n",
    }
    result = await connector.call("send", args, mailbox.settings())
    assert result.is_error is False
    assert result.structured_content is not None
    message_id = result.structured_content["message_id"]
    assert result.structured_content == {"sent": True, "message_id": message_id, "refused": []}
    assert message_id.startswith("<") and message_id.endswith("@example.test>")

    [envelope] = mailbox.envelopes
    assert (envelope.mail_from, envelope.rcpt_tos) == (
        SENDER,
        ["ada@example.test", "grace@example.test", "alan@example.test"],
    )
    assert isinstance(envelope.content, bytes)
    message = email.message_from_bytes(envelope.content, policy=email.policy.default)
    headers = {name: str(message[name]) for name in ("From", "To", "Cc", "Reply-To", "Subject", "Message-ID")}
    assert headers == {
        "From": SENDER,
        "To": "ada@example.test, grace@example.test",
        "Cc": "alan@example.test",
        "Reply-To": "desk@example.test",
        "Subject": "Café at 10 ☕",
        "Message-ID": message_id,
    }
    assert message["Bcc"] is None and message["Date"] is not None
    assert message.get_content_type() == "text/plain"
    assert message.get_content() == "Shall we meet?\r\n\r\n— Owner\r\n"  # SMTP's line ends


async def test_connected_logs_in_and_says_so(connector: Connector, mailbox: Mailbox) -> None:
    result = await connector.call("connected", {}, mailbox.settings())
    assert result.structured_content == {
        "ok": True,
        "detail": f"connected to 127.0.0.1:{mailbox.port} (none, logged in as {USER})",
    }
    assert mailbox.envelopes == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"subject": "Hi\r\nBcc: eve@example.test"}, "subject must be one line (no CR, LF or control characters)"),
        ({"subject": "Hi\nX-Injected: 1"}, "subject must be one line (no CR, LF or control characters)"),
        ({"to": ["ada@example.test\r\nBcc: eve@example.test"]}, "to[0] holds a line break or control character"),
        ({"cc": ["ok@example.test", "x@example.test\n"]}, "cc[1] holds a line break or control character"),
        (
            {"reply_to": "desk@example.test\r\nBcc: eve@example.test"},
            "reply_to[0] holds a line break or control character",
        ),
        ({"to": ["Ada <ada@example.test>"]}, "to[0] is not an email address"),
        ({"to": []}, "to must name at least one recipient"),
        ({"to": [f"r{i}@example.test" for i in range(51)]}, "at most 50 recipients (to and cc)"),
        ({"cc": [f"r{i}@example.test" for i in range(50)]}, "at most 50 recipients (to and cc)"),
        ({"subject": "s" * 501}, "subject may be at most 500 characters"),
        ({"text": "x" * (256 * 1024 + 1)}, "text must be at most 256 KiB of text"),
        ({"to": "ada@example.test"}, "missing or mistyped: to"),
        ({"subject": None}, "missing or mistyped: subject"),
    ],
)
async def test_bad_arguments_and_header_injection_are_refused_and_nothing_is_sent(
    connector: Connector, mailbox: Mailbox, args: dict[str, Any], message: str
) -> None:
    result = await connector.call("send", {**MESSAGE, **args}, mailbox.settings())
    assert refusal(result) == {"code": "invalid_arguments", "message": message}
    assert mailbox.envelopes == []


async def test_wrong_password_is_denied_and_the_password_appears_nowhere(
    connector: Connector, mailbox: Mailbox
) -> None:
    settings = mailbox.settings(password=WRONG_PASSWORD)
    sent = await connector.call("send", MESSAGE, settings)
    checked = await connector.call("connected", {}, settings)
    assert refusal(sent) == snapshot({"code": "denied", "message": "the mail server refused the username or password"})
    assert checked.structured_content == snapshot(
        {"ok": False, "detail": "the mail server refused the username or password"}
    )
    assert mailbox.envelopes == []
    shown = json.dumps([sent.model_dump(mode="json"), checked.model_dump(mode="json")])
    assert WRONG_PASSWORD not in shown and PASSWORD not in shown
    assert WRONG_PASSWORD not in connector.stderr.read_text()


async def test_unreachable_server_is_unavailable_within_a_bounded_time(connector: Connector) -> None:
    closed = free_port()  # bound once and released: nothing listens there
    settings = {"host": "127.0.0.1", "port": closed, "from_address": SENDER, "security": "none"}
    started = time.monotonic()
    sent = await connector.call("send", MESSAGE, settings)
    checked = await connector.call("connected", {}, settings)
    assert time.monotonic() - started < 5
    reason = f"could not reach the mail server at 127.0.0.1:{closed}"
    assert refusal(sent) == {"code": "unavailable", "message": reason}
    assert checked.structured_content == {"ok": False, "detail": reason}


async def test_starttls_is_required_when_set_and_never_silently_dropped(connector: Connector, mailbox: Mailbox) -> None:
    settings = mailbox.settings(security="starttls")
    sent = await connector.call("send", MESSAGE, settings)
    checked = await connector.call("connected", {}, settings)
    reason = f"the mail server at 127.0.0.1:{mailbox.port} does not offer STARTTLS"
    assert refusal(sent) == {"code": "unconfigured", "message": reason}
    assert checked.structured_content == {"ok": False, "detail": reason}
    assert mailbox.envelopes == []


@pytest.mark.parametrize("verb", ["send", "connected"])
async def test_a_call_without_a_connection_is_unconfigured(connector: Connector, verb: str) -> None:
    result = await connector.call(verb, MESSAGE if verb == "send" else {}, None)
    assert refusal(result) == snapshot(
        {
            "code": "unconfigured",
            "message": "this call carries no connection: the owner has not connected this service",
        }
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"security": "ssl"}, "the mail connection's settings are unusable: security"),
        ({"host": "smtp.example.test\r\nX: y"}, "the mail connection's settings are unusable: host"),
        ({"port": 70000}, "the mail connection's settings are unusable: port"),
        ({"from_address": "", "username": "mailer"}, "the mail connection's settings are unusable: from_address"),
        (
            {"from_address": "owner@example.test\nBcc: eve@example.test"},
            "the mail connection's settings are unusable: from_address",
        ),
    ],
)
async def test_unusable_settings_are_unconfigured(
    connector: Connector, mailbox: Mailbox, overrides: dict[str, Any], message: str
) -> None:
    result = await connector.call("send", MESSAGE, mailbox.settings(**overrides))
    assert refusal(result) == {"code": "unconfigured", "message": message}
    assert PASSWORD not in json.dumps(result.model_dump(mode="json"))


async def test_from_address_defaults_to_a_username_that_is_an_email_address(
    connector: Connector, mailbox: Mailbox
) -> None:
    result = await connector.call("send", MESSAGE, mailbox.settings(username=SENDER, from_address=""))
    assert result.is_error is False
    [envelope] = mailbox.envelopes
    assert envelope.mail_from == SENDER


@pytest.mark.parametrize("unset", ["", None])
async def test_security_defaults_to_starttls(connector: Connector, mailbox: Mailbox, unset: str | None) -> None:
    result = await connector.call("connected", {}, mailbox.settings(security=unset))
    detail = f"the mail server at 127.0.0.1:{mailbox.port} does not offer STARTTLS"
    assert result.structured_content == {"ok": False, "detail": detail}


@pytest.mark.parametrize("security", ["starttls", "tls"])
async def test_through_the_egress_proxy_tls_is_done_for_the_servers_name_and_a_refusal_names_the_server(
    tmp_path: Path, security: str
) -> None:
    name = "mail.tls.test"  # only the proxy resolves it, and the certificate is for it alone
    pair = tls_pair(name)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(pair.ca_pem)
    tls = {"ssl_context": pair.server} if security == "tls" else {"tls_context": pair.server}
    with serving_mailbox(**tls) as box:
        async with (
            running_proxy({name: "127.0.0.1"}) as proxy,
            connector_child(SERVER, "mail", tmp_path, env={**proxy.environ(), "SSL_CERT_FILE": str(ca)}) as child,
        ):
            settings = box.settings(host=name, security=security)
            sent = await child.ok("send", MESSAGE, settings)
            proxy.refused.add(f"{name}:{box.port}")
            refused = await child.call("send", MESSAGE, settings)
    assert sent["sent"] is True
    assert [envelope.rcpt_tos for envelope in box.envelopes] == [["ada@example.test"]]
    assert proxy.requests == [f"CONNECT {name}:{box.port}"] * 2
    reason = f"could not reach {name}:{box.port}: the host's egress proxy refused it ({REASON})"
    assert refusal(refused) == {"code": "unavailable", "message": reason}


@needs_bwrap
async def test_the_connector_sends_from_inside_the_sandbox(mailbox: Mailbox) -> None:
    report = load_plugins(None, [BUILTINS / "smtp"])
    assert report.errors == ()
    [plugin] = report.plugins
    meta = {CONNECTION_KEY: {"owner_id": "owner-1", "category": "mail", "settings": mailbox.settings()}}
    async with (
        loopback_egress(plugin.manifest.id, mailbox.port) as egress,
        ChildPool(CHILD_LIMITS, max_children=1) as pool,
    ):
        child = pool.child(plugin.manifest.id, lambda: launch_for(plugin, HostSettings(), egress_socket=egress))
        result = await child.call_tool("send", dict(MESSAGE), meta, timeout_s=30)
        child.stop()
    assert result.is_error is False
    [envelope] = mailbox.envelopes
    assert envelope.rcpt_tos == ["ada@example.test"]
