"""Grants: minted per forwarded call, redeemed per host op, dead once the call is over."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mcp_host.access.sessions import RoleSnapshot, Session, Subject
from mcp_host.backchannel.grants import CallScope, GrantBook
from mcp_host.errors import Denied

SESSION = Session(
    id="0" * 32,
    owner_id="owner",
    mode="code",
    subject=Subject(kind="code", id="SPRING"),
    visitor=None,
    role=RoleSnapshot(id="guests", capabilities=("notes",), config={}),
    created_at=datetime(2026, 11, 30, tzinfo=UTC),
)


def test_grant_redeems_for_its_plugin_with_the_scope_it_was_minted_for() -> None:
    book = GrantBook(budget=3)
    scope = CallScope("owner", SESSION)

    with book.issue("notes", scope, "note_add") as (token, _):
        grant = book.redeem(token, "notes")

    assert (grant.plugin_id, grant.scope, grant.tool, grant.budget) == ("notes", scope, "note_add", 2)


def test_grant_is_refused_once_its_call_has_ended() -> None:
    book = GrantBook(budget=3)
    with book.issue("notes", CallScope("owner"), "t") as (token, _):
        pass

    with pytest.raises(Denied, match="not live"):
        book.redeem(token, "notes")
    assert book.live_count() == 0


def test_grant_ends_when_the_call_fails_too() -> None:
    book = GrantBook(budget=3)
    with pytest.raises(TimeoutError), book.issue("notes", CallScope("owner"), "t"):
        raise TimeoutError

    assert book.live_count() == 0


def test_grant_minted_for_another_plugin_is_refused() -> None:
    book = GrantBook(budget=3)
    with book.issue("notes", CallScope("owner"), "t") as (token, _), pytest.raises(Denied, match="minted for notes"):
        book.redeem(token, "forger")


def test_budget_is_spent_one_op_at_a_time() -> None:
    book = GrantBook(budget=2)
    with book.issue("notes", CallScope("owner"), "t") as (token, _):
        book.redeem(token, "notes")
        book.redeem(token, "notes")
        with pytest.raises(Denied, match="budget"):
            book.redeem(token, "notes")


@pytest.mark.parametrize("token", [None, "", 42, ["t"], "x" * 129, "not-a-token"])
def test_anything_but_a_live_token_is_refused(token: object) -> None:
    book = GrantBook(budget=2)
    with book.issue("notes", CallScope("owner"), "t"), pytest.raises(Denied):
        book.redeem(token, "notes")


def test_scope_on_the_wire_is_the_session_or_owner_context() -> None:
    assert CallScope("owner", SESSION).wire() == {
        "owner_id": "owner",
        "session_id": "0" * 32,
        "mode": "code",
        "subject": {"kind": "code", "id": "SPRING"},
        "visitor": None,
        "role": "guests",
    }
    assert CallScope("owner").wire() == {
        "owner_id": "owner",
        "session_id": None,
        "mode": "owner",
        "subject": None,
        "visitor": None,
        "role": None,
    }
