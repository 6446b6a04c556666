"""What the audit keeps of an owner tool call's arguments: never a secret value."""

from __future__ import annotations

from mcp_host.policy.audit import REDACTED, summarize


def test_summary_redacts_secret_looking_values_at_any_depth_and_named_keys() -> None:
    arguments = {
        "connector": "imap",
        "settings": {"url": "https://x", "password": "hunter2"},
        "code": "abcdefghijklmnopqrstuv",
        "arguments": {"api_key": "k", "nested": {"token": "t", "text": "fine"}},
        "scope_id": "looks-like-a-code",
        "long": "x" * 500,
    }

    summary = summarize(arguments, secret={"scope_id"})

    assert summary == {
        "connector": "imap",
        "settings": REDACTED,
        "code": REDACTED,
        "arguments": {"api_key": REDACTED, "nested": {"token": REDACTED, "text": "fine"}},
        "scope_id": REDACTED,
        "long": "x" * 200 + "…",
    }


def test_summary_keeps_ordinary_arguments_and_shortens_deep_ones() -> None:
    assert summarize({"role": "public", "max_uses": 2, "config": {"a": {"b": {"c": {"d": 1}}}}}) == {
        "role": "public",
        "max_uses": 2,
        "config": {"a": {"b": {"c": "…"}}},
    }
    assert summarize(None) == {}


def test_summary_is_storable_as_jsonb_whatever_the_caller_sent() -> None:
    """PostgreSQL's jsonb takes no NUL, no lone surrogate, no NaN: each becomes storable text."""
    arguments = {"a\x00b": "c\x00d", "nested": {"k\x00": ["\ud800x", float("nan"), float("inf")]}}

    assert summarize(arguments) == {
        "a\ufffdb": "c\ufffdd",
        "nested": {"k\ufffd": ["\ufffdx", "nan", "inf"]},
    }
