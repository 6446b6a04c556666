"""The kit's one email check, shared by the caldav and smtp connectors and mail.send."""

from __future__ import annotations

import pytest

from mcp_host_kit.addresses import is_email


@pytest.mark.parametrize("value", ["ada@example.org", "a.b+tag@mail.example.co.uk"])
def test_plain_addresses_pass(value: str) -> None:
    assert is_email(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "ada",
        "Ada <ada@example.org>",
        "ada@example.org\r\nBcc: eve@example.org",
        "ada@example.org\n",
        "ada@localhost",
        "ada@[127.0.0.1]",
        '"ada"@example.org',
        "ada@exa mple.org",
        "ada@example.org\u2028",
    ],
)
def test_anything_else_is_refused(value: str) -> None:
    assert not is_email(value)
