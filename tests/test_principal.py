"""Who is asking: a client address counts as itself, an IPv6 one by its /64; the principal asking
for a session is known while a request of it runs, the first one's while requests overlap."""

from __future__ import annotations

from datetime import UTC, datetime

from mcp_host.access import Session, Subject, principal_of
from mcp_host.access.sessions import public_role
from mcp_host.principal import Asking, Principal


def test_a_client_address_is_its_principal_an_ipv6_one_by_its_64() -> None:
    clients = [
        ("203.0.113.7", 50000),
        ("2001:db8:1:2:aaaa::1", 443),
        ("2001:db8:1:2:bbbb::9", 443),  # the same /64
        ("2001:db8:1:3::1", 443),
        ("::ffff:203.0.113.7", 1),
        ("fe80::1%eth0", 1),
        None,
        ("proxy-said-this", 0),
    ]
    assert [str(Principal.of_client(c)) for c in clients] == [
        "address:203.0.113.7",
        "address:2001:db8:1:2::/64",
        "address:2001:db8:1:2::/64",
        "address:2001:db8:1:3::/64",
        "address:203.0.113.7",
        "address:fe80::/64",
        "address:unknown",
        "address:proxy-said-this",
    ]


def _session(subject: Subject | None) -> Session:
    mode = "public" if subject is None else subject.kind
    return Session(
        id="a" * 32,
        owner_id="o",
        mode=mode,
        subject=subject,
        visitor=None,
        role=public_role(),
        created_at=datetime.now(UTC),
    )


def test_a_session_opened_with_a_code_or_key_is_its_credential_wherever_it_asks_from() -> None:
    client = ("198.51.100.1", 1)
    assert [principal_of(_session(s), client) for s in (Subject(kind="code", id="c1"), None)] == [
        Principal("code", "c1"),
        Principal("address", "198.51.100.1"),
    ]
    assert principal_of(_session(Subject(kind="api_key", id="k1")), None) == Principal("api_key", "k1")


def test_the_principal_asking_for_a_session_is_known_only_while_a_request_of_it_runs() -> None:
    asking = Asking()
    first, second = Principal("address", "192.0.2.1"), Principal("address", "192.0.2.2")
    assert asking.of("s1") == Principal("session", "s1")
    with asking.request("s1", first) as outer:
        with asking.request("s1", second) as inner:  # overlapping requests: the first one's stands
            assert (outer, inner, asking.of("s1"), asking.of("s2")) == (first, first, first, Principal("session", "s2"))
        assert asking.of("s1") == first
    assert asking.of("s1") == Principal("session", "s1")
    with asking.request("s1", second):
        assert asking.of("s1") == second
