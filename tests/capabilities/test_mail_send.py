"""The builtin `mail.send`: standalone (in-process MCP client) and through a real host whose
`smtp` connector sends to an aiosmtpd server on loopback.

Through the host the capability is granted by a role and reached with an access code of
that role; the owner connects the `smtp` connector (a real sandboxed child) for `mail`.
"""

from __future__ import annotations

import email
import email.policy
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.headerregistry import AddressHeader, HeaderRegistry
from email.message import EmailMessage
from types import ModuleType
from typing import Any

import asyncpg
import mcp.types as types
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from inline_snapshot import snapshot
from mcp import Client

from mcp_host_kit.contract import refusal_of
from tests.hosting import BUILTINS, RunningHost, allow_loopback, free_port, host_fixture
from tests.owner_facade.test_door import owner_client
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

OWNER_EMAIL = "owner@example.test"
SENDER = "host@example.test"
CAPABILITY = "mail.send"
FOOTER = "nothing in this message was verified."


# -- the mail server -----------------------------------------------------------------------


@dataclass
class Mailbox:
    port: int
    envelopes: list[Envelope] = field(default_factory=list)

    def settings(self) -> dict[str, Any]:
        return {"host": "127.0.0.1", "port": self.port, "from_address": SENDER, "security": "none"}

    def messages(self) -> list[EmailMessage]:
        parsed = []
        for envelope in self.envelopes:
            assert isinstance(envelope.content, bytes)
            message = email.message_from_bytes(envelope.content, policy=email.policy.default)
            assert isinstance(message, EmailMessage)
            parsed.append(message)
        return parsed


class _Recorder:
    def __init__(self, envelopes: list[Envelope]) -> None:
        self.envelopes = envelopes

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    box = Mailbox(port=free_port())
    controller = Controller(_Recorder(box.envelopes), hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


# -- standalone ----------------------------------------------------------------------------


def _load_server() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mail_send_server", BUILTINS / "mail_send" / "server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refusal(result: types.CallToolResult) -> dict[str, Any] | None:
    assert result.is_error is True
    found = refusal_of(result)  # the host's key in `_meta`, else a plugin's structured pair
    return None if found is None else found.model_dump()


async def test_standalone_checks_the_arguments_and_reaches_no_connector() -> None:
    server = _load_server().mcp
    async with Client(server, mode="legacy") as client:
        injected = await client.call_tool("send_email", {"subject": "Hi\r\nBcc: eve@example.test", "body": "x"})
        bad_reply = await client.call_tool("send_email", {"subject": "Hi", "body": "x", "reply_to": "Eve <e@x.test>"})
        missing = await client.call_tool("send_email", {"body": "x"})
        # Standalone there is no connector: the emulation refuses connector.invoke.
        sent = await client.call_tool("send_email", {"subject": "Hi", "body": "Hello"})

    assert refusal(injected) == snapshot(
        {"code": "invalid_arguments", "message": "subject must be one line (no CR, LF or control characters)"}
    )
    assert refusal(bad_reply) == snapshot(
        {"code": "invalid_arguments", "message": "reply_to must be one plain email address, e.g. ada@example.com"}
    )
    assert refusal(missing) == snapshot({"code": "invalid_arguments", "message": "missing or mistyped: subject"})
    assert refusal(sent) == snapshot(
        {"code": "denied", "message": "connector.invoke is not emulated in standalone mode"}
    )


# -- through the host ----------------------------------------------------------------------


async def _mailers(running: RunningHost) -> None:
    await running.access.put_role(running.owner_id, "mailers", [CAPABILITY])


host = host_fixture([], builtin_dir=BUILTINS, ready=_mailers)


async def set_owner_email(database_url: str, value: str | None) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE mcp_host.owners SET email = $1", value)
    finally:
        await conn.close()


async def connect_mail(host: RunningHost, settings: dict[str, Any]) -> None:
    await allow_loopback(host, "smtp", settings["port"])
    await host.connections.connect(host.owner_id, "smtp", settings)


async def code_session(
    host: RunningHost, config: dict[str, Any] | None = None, visitor: dict[str, Any] | None = None
) -> dict[str, Any]:
    code, _ = await host.access.create_code(
        host.owner_id, "mailers", {CAPABILITY: config} if config is not None else None
    )
    body: dict[str, Any] = {"code": code}
    if visitor is not None:
        body["visitor"] = visitor
    return await host.new_session(body)


async def tool_names(host: RunningHost, session: dict[str, Any]) -> list[str]:
    async with host.client(session) as client:
        return sorted(t.name for t in (await client.list_tools()).tools)


async def send(host: RunningHost, session: dict[str, Any], **arguments: Any) -> types.CallToolResult:
    async with host.client(session) as client:
        return await client.call_tool("send_email", arguments)


@needs_bwrap
async def test_the_mail_reaches_the_owner_with_its_subject_body_and_reply_to(
    host: RunningHost, mailbox: Mailbox, database_url: str
) -> None:
    await set_owner_email(database_url, OWNER_EMAIL)
    await connect_mail(host, mailbox.settings())
    session = await code_session(host, visitor={"name": "Ada", "email": "ada@example.test"})
    assert "send_email" in await tool_names(host, session)

    given = await send(host, session, subject="Café on Tuesday?", body="Hello,\r\nshall we meet?\n")
    explicit = await send(host, session, subject="Again", body="Hi", reply_to="grace@example.test")

    assert (given.is_error, given.structured_content) == (
        False,
        {"sent": True, "subject": "[visitor] Café on Tuesday?"},
    )
    assert (explicit.is_error, explicit.structured_content) == (False, {"sent": True, "subject": "[visitor] Again"})
    assert [(e.mail_from, e.rcpt_tos) for e in mailbox.envelopes] == [(SENDER, [OWNER_EMAIL])] * 2
    first, second = mailbox.messages()
    headers = {name: str(first[name]) for name in ("From", "To", "Reply-To", "Subject")}
    assert headers == {
        "From": SENDER,
        "To": OWNER_EMAIL,
        "Reply-To": "ada@example.test",
        "Subject": "[visitor] Café on Tuesday?",
    }
    assert first["Cc"] is None and first["Bcc"] is None
    body = first.get_content().replace("\r\n", "\n")
    assert body.startswith("Hello,\nshall we meet?\n\n-- \nSent by a visitor's agent through mcp-host (session ")
    assert f"The visitor gave the name and address Ada <ada@example.test> (the Reply-To); {FOOTER}" in body
    assert (str(second["Reply-To"]), str(second["To"])) == ("grace@example.test", OWNER_EMAIL)


@needs_bwrap
async def test_the_footer_quotes_the_visitors_name_as_a_mail_client_would_and_it_parses_back(
    host: RunningHost, mailbox: Mailbox, database_url: str
) -> None:
    await set_owner_email(database_url, OWNER_EMAIL)
    await connect_mail(host, mailbox.settings())
    name = 'Zoë "Ada" O\'Brien, PhD \\ (Dr.)'  # quotes, a comma, a backslash, parentheses, non-ASCII
    named = await code_session(host, visitor={"name": name, "email": "ada@example.test"})
    unreachable = await code_session(host, visitor={"name": "Hopper, Grace"})
    nobody = await code_session(host)

    for session in (named, unreachable, nobody):
        assert not (await send(host, session, subject="Hi", body="Hello")).is_error
    footers = [m.get_content().replace("\r\n", "\n").split("\n-- \n")[1].splitlines()[1] for m in mailbox.messages()]

    assert footers == [
        f'The visitor gave the name and address "Zoë \\"Ada\\" O\'Brien, PhD \\\\ (Dr.)" <ada@example.test>'
        f" (the Reply-To); {FOOTER}",
        f'The visitor gave the name "Hopper, Grace" and no address; {FOOTER}',
        f"The visitor gave no name and no address; {FOOTER}",
    ]
    # The mailbox is one RFC 5322 address: pasted into a To: field, it is this visitor again.
    mailbox_text = footers[0].removeprefix("The visitor gave the name and address ").split(" (the Reply-To)")[0]
    parsed = HeaderRegistry()("To", mailbox_text)
    assert isinstance(parsed, AddressHeader)
    assert [(a.display_name, a.addr_spec) for a in parsed.addresses] == [(name, "ada@example.test")]
    assert parsed.defects == ()


@needs_bwrap
async def test_the_owners_configured_recipient_wins_and_a_visitor_cannot_name_one(
    host: RunningHost, mailbox: Mailbox, database_url: str
) -> None:
    await set_owner_email(database_url, OWNER_EMAIL)
    plugin = host.plugin(CAPABILITY)
    await host.config.for_plugin(CAPABILITY, plugin.manifest).set(
        host.owner_id, "owner", "", {"recipient": "desk@example.test", "subject_prefix": ""}
    )
    await connect_mail(host, mailbox.settings())
    session = await code_session(host)

    sent = await send(host, session, subject="Hi", body="Hello")
    redirected = await send(host, session, subject="Hi", body="Hello", to="eve@example.test")

    assert sent.structured_content == {"sent": True, "subject": "Hi"}
    assert redirected.structured_content == {"sent": True, "subject": "Hi"}  # `to` is no argument: ignored
    assert [e.rcpt_tos for e in mailbox.envelopes] == [["desk@example.test"]] * 2
    assert [str(m["To"]) for m in mailbox.messages()] == ["desk@example.test"] * 2


@needs_bwrap
async def test_without_a_mail_connection_the_capability_is_hidden(host: RunningHost, database_url: str) -> None:
    await set_owner_email(database_url, OWNER_EMAIL)
    session = await code_session(host)

    assert "send_email" not in await tool_names(host, session)
    refused = await send(host, session, subject="Hi", body="Hello")
    assert (refusal(refused) or {})["code"] == "unknown"


@needs_bwrap
async def test_bad_arguments_are_refused_and_nothing_is_sent(
    host: RunningHost, mailbox: Mailbox, database_url: str
) -> None:
    await set_owner_email(database_url, OWNER_EMAIL)
    await connect_mail(host, mailbox.settings())
    session = await code_session(host, {"max_emails": 0})  # unlimited: refusals are not counted anyway
    cases: list[dict[str, Any]] = [
        {"subject": "Hi\r\nBcc: eve@example.test", "body": "x"},
        {"subject": "Hi\nX-Injected: 1", "body": "x"},
        {"subject": "s" * 201, "body": "x"},
        {"subject": "  ", "body": "x"},
        {"subject": "Hi", "body": ""},
        {"subject": "Hi", "body": "x" * 5001},
        {"subject": "Hi", "body": "bell\x07"},
        {"subject": "Hi", "body": "x", "reply_to": "ada@example.test\r\nBcc: eve@example.test"},
        {"subject": "Hi", "body": "x", "reply_to": "Ada <ada@example.test>"},
        {"subject": "Hi", "body": "x", "reply_to": "ada@example.test, eve@example.test"},
        {"body": "x"},
        {"subject": ["Hi"], "body": "x"},
    ]
    refusals = []
    async with host.client(session) as client:
        for arguments in cases:
            result = await client.call_tool("send_email", arguments)
            refusals.append(refusal(result))

    assert refusals == snapshot(
        [
            {"code": "invalid_arguments", "message": "subject must be one line (no CR, LF or control characters)"},
            {"code": "invalid_arguments", "message": "subject must be one line (no CR, LF or control characters)"},
            {"code": "invalid_arguments", "message": "subject may be at most 200 characters"},
            {"code": "invalid_arguments", "message": "subject must not be empty"},
            {"code": "invalid_arguments", "message": "body must not be empty"},
            {"code": "invalid_arguments", "message": "body may be at most 5000 characters"},
            {"code": "invalid_arguments", "message": "body may hold no control characters but tabs and line breaks"},
            {
                "code": "invalid_arguments",
                "message": "reply_to must be one plain email address, e.g. ada@example.com",
            },
            {
                "code": "invalid_arguments",
                "message": "reply_to must be one plain email address, e.g. ada@example.com",
            },
            {
                "code": "invalid_arguments",
                "message": "reply_to must be one plain email address, e.g. ada@example.com",
            },
            {"code": "invalid_arguments", "message": "missing or mistyped: subject"},
            {"code": "invalid_arguments", "message": "missing or mistyped: subject"},
        ]
    )
    assert mailbox.envelopes == []


@needs_bwrap
async def test_the_codes_quota_is_reached_and_a_failed_send_does_not_count(
    host: RunningHost, mailbox: Mailbox, database_url: str
) -> None:
    await set_owner_email(database_url, OWNER_EMAIL)
    await connect_mail(host, {**mailbox.settings(), "port": free_port()})  # nothing listens there
    session = await code_session(host, {"max_emails": 2})

    failed = await send(host, session, subject="One", body="x")
    await connect_mail(host, mailbox.settings())
    first = await send(host, session, subject="One", body="x")
    second = await send(host, session, subject="Two", body="x")
    third = await send(host, session, subject="Three", body="x")
    names = await tool_names(host, session)
    other = await code_session(host, {"max_emails": 2})  # another code has its own count
    elsewhere = await send(host, other, subject="Four", body="x")

    assert (refusal(failed) or {})["code"] == "unavailable"
    assert [first.is_error, second.is_error, elsewhere.is_error] == [False, False, False]
    assert (refusal(third) or {})["code"] == "quota_exhausted"
    assert "send_email" not in names
    assert [str(m["Subject"]) for m in mailbox.messages()] == ["[visitor] One", "[visitor] Two", "[visitor] Four"]


@needs_bwrap
async def test_the_roles_per_session_cap_is_reached(host: RunningHost, mailbox: Mailbox, database_url: str) -> None:
    await set_owner_email(database_url, OWNER_EMAIL)
    await host.access.put_role(host.owner_id, "mailers", [CAPABILITY], {CAPABILITY: {"max_emails_per_session": 1}})
    await connect_mail(host, mailbox.settings())
    code, _ = await host.access.create_code(host.owner_id, "mailers", {CAPABILITY: {"max_emails": 0}})
    session = await host.new_session({"code": code})
    again = await host.new_session({"code": code})  # the same code, a new session

    first = await send(host, session, subject="One", body="x")
    second = await send(host, session, subject="Two", body="x")
    elsewhere = await send(host, again, subject="Three", body="x")

    assert [first.is_error, elsewhere.is_error] == [False, False]
    assert refusal(second) == snapshot(
        {"code": "quota_exhausted", "message": "this session may send no more emails (at most 1)"}
    )
    assert len(mailbox.envelopes) == 2


@needs_bwrap
async def test_without_an_owner_address_the_call_says_how_to_set_it_and_then_mails_the_profiles(
    host: RunningHost, mailbox: Mailbox
) -> None:
    await connect_mail(host, mailbox.settings())  # the owner has no email address by default
    session = await code_session(host)

    refused = await send(host, session, subject="Hi", body="Hello")
    async with owner_client(host) as owner:
        profile = await owner.call_tool("owner_profile_set", {"email": OWNER_EMAIL})
    sent = await send(host, session, subject="Hi again", body="Hello")

    assert refusal(refused) == snapshot(
        {
            "code": "unconfigured",
            "message": "the owner has set no email address to send visitors' mail to; the owner sets it with"
            " the owner tool owner_profile_set {email} or `mcp-host owner profile --email ADDRESS`",
        }
    )
    assert (profile.is_error, (profile.structured_content or {})["email"]) == (False, OWNER_EMAIL)
    assert (sent.is_error, sent.structured_content) == (False, {"sent": True, "subject": "[visitor] Hi again"})
    assert [(e.mail_from, e.rcpt_tos) for e in mailbox.envelopes] == [(SENDER, [OWNER_EMAIL])]
    assert [str(m["To"]) for m in mailbox.messages()] == [OWNER_EMAIL]


@needs_bwrap
async def test_claiming_an_email_needs_a_sent_one_in_the_same_turn(
    host: RunningHost, mailbox: Mailbox, database_url: str
) -> None:
    await set_owner_email(database_url, OWNER_EMAIL)
    await connect_mail(host, mailbox.settings())
    session = await code_session(host)
    base = f"{host.url}/v1/sessions/{session['session_id']}/turns"
    auth = {"Authorization": f"Bearer {session['token']}"}

    async def answer(message: str, text: str, *, send_first: bool) -> Any:
        number = (await host.http.post(base, json={"message": message}, headers=auth)).json()["turn"]
        if send_first:
            assert not (await send(host, session, subject="Hi", body="Hello")).is_error
        return (await host.http.post(f"{base}/{number}/answer", json={"text": text}, headers=auth)).json()

    unsent = await answer("tell the owner", "Done: I've emailed the owner.", send_first=False)
    sent = await answer("tell the owner", "Done: I've emailed the owner.", send_first=True)

    assert unsent == {
        "ok": False,
        "violations": [{"capability": CAPABILITY, "tool": "send_email", "phrase": "i've emailed"}],
    }
    assert sent == {"ok": True}
