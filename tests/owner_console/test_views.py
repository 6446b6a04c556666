"""What the console's pages show, made from owner tool answers: the diff, the config and role
forms, a capability's cause, a session's subject and visitor, the audit's filters."""

from __future__ import annotations

from typing import Any

from inline_snapshot import snapshot

from owner_console.views import (
    Cause,
    DiffRow,
    audit_filtered,
    catalogue_cause,
    changed_values,
    config_fields,
    config_values,
    connect_values,
    field_errors,
    role_config,
    role_sections,
    side_by_side,
    subject_text,
    visitor_text,
)

DECLARED: list[dict[str, Any]] = [
    {"key": "limit", "type": "int", "default": 3, "description": "How many."},
    {"key": "tags", "type": "string_list", "default": []},
    {"key": "on", "type": "bool", "default": False},
    {"key": "password", "type": "string", "secret": True, "required": True},
]


def test_a_changed_definition_is_shown_side_by_side_line_by_line() -> None:
    approved = {"name": "wipe", "description": "Wipe a thing."}
    live = {"name": "wipe", "description": "Wipe <b>everything</b>.", "annotations": {"destructiveHint": True}}
    assert side_by_side(approved, live) == snapshot(
        [
            DiffRow(left="{", right="{", kind="same"),
            DiffRow(left="", right='  "annotations": {', kind="added"),
            DiffRow(left="", right='    "destructiveHint": true', kind="added"),
            DiffRow(left="", right="  },", kind="added"),
            DiffRow(
                left='  "description": "Wipe a thing.",',
                right='  "description": "Wipe <b>everything</b>.",',
                kind="changed",
            ),
            DiffRow(left='  "name": "wipe"', right='  "name": "wipe"', kind="same"),
            DiffRow(left="}", right="}", kind="same"),
        ]
    )


def test_a_new_tool_is_all_added() -> None:
    rows = side_by_side(None, {"name": "t"})
    assert [r.kind for r in rows] == ["added"] * 3
    assert [r.left for r in rows] == ["", "", ""]


def test_the_config_form_shows_values_as_typed_and_never_a_secret() -> None:
    values = {"limit": 5, "tags": ["a", "b"], "on": True, "password": "set"}
    fields = config_fields(DECLARED, values, {"limit": "limit: must be an integer"})
    assert [(f.key, f.shown, f.error) for f in fields] == [
        ("limit", "5", "limit: must be an integer"),
        ("tags", "a\nb", None),
        ("on", "true", None),
        ("password", "", None),
    ]
    assert fields[3].secret and fields[3].required and fields[0].default == 3


def test_a_submitted_config_form_means_typed_values_resets_and_a_kept_secret() -> None:
    form = {"limit": " 7 ", "tags": "a\n\n b \n", "on": "false", "password": ""}
    assert config_values(DECLARED, form) == {"limit": 7, "tags": ["a", "b"], "on": False}
    assert config_values(DECLARED, {"limit": "", "password": "hunter2"}) == {"limit": None, "password": "hunter2"}
    # Text that does not parse goes to the host as it is: its own check words the refusal.
    assert config_values(DECLARED, {"limit": "seven", "on": "maybe"}) == {"limit": "seven", "on": "maybe"}


def test_a_saved_form_writes_only_what_the_owner_changed() -> None:
    current = {"limit": 3, "tags": [], "on": False, "password": True}
    submitted = {"limit": 3, "tags": ["a"], "on": None, "password": "new"}
    assert changed_values(submitted, current) == {"tags": ["a"], "on": None, "password": "new"}
    assert changed_values({"limit": None}, {"limit": None}) == {}  # unset stays unset


def test_a_connect_form_leaves_out_empty_fields() -> None:
    declared: list[dict[str, Any]] = [
        {"key": "url", "type": "string"},
        {"key": "port", "type": "int"},
        {"key": "password", "secret": True},
    ]
    assert connect_values(declared, {"url": "https://x", "port": "587", "password": ""}) == {
        "url": "https://x",
        "port": 587,
    }


def test_a_refusal_is_placed_by_the_field_it_names() -> None:
    assert field_errors("limit: must be an integer (type int), got 'x'", ["limit"]) == {
        "limit": "limit: must be an integer (type int), got 'x'"
    }
    assert field_errors("tags.2: must be a string, got 3", ["tags"]) == {"tags": "tags.2: must be a string, got 3"}
    assert field_errors("scope_id: no role 'r'", ["limit"]) == {"": "scope_id: no role 'r'"}


def test_the_audit_filters_match_tool_and_outcome_text_and_hide_reads() -> None:
    rows = [
        {"tool": "hold_decide", "outcome": "ok"},
        {"tool": "code_create", "outcome": "invalid_arguments"},
        {"tool": "holds_list", "outcome": "ok"},
    ]
    assert audit_filtered(rows, "hold", "") == [rows[0]]
    assert audit_filtered(rows, "", "INVALID") == [rows[1]]
    assert audit_filtered(rows, " ", "") == rows[:2]
    assert audit_filtered(rows, "hold", "", reads=True) == [rows[0], rows[2]]


def test_a_capabilitys_cause_says_what_it_waits_for() -> None:
    calendar = {"status": "not_started", "cause": None, "requires": [{"category": "calendar", "connected": False}]}
    both = {**calendar, "requires": [{"category": "calendar", "connected": False}, {"category": "mail"}]}
    connected = {**calendar, "requires": [{"category": "calendar", "connected": True}]}
    failing = {**calendar, "status": "failing", "cause": "exited with code 1"}
    assert [catalogue_cause(c) for c in (calendar, both, connected, failing, {"status": "healthy"})] == [
        Cause("needs a calendar connector — connect one on Connectors", "/owner/connectors"),
        Cause("needs a calendar and mail connector — connect them on Connectors", "/owner/connectors"),
        Cause("not started yet: it starts when first used"),
        Cause("exited with code 1"),
        None,
    ]


def test_a_sessions_subject_and_visitor_read_as_words() -> None:
    assert subject_text({"kind": "code", "id": "c_ab12"}) == "access code c_ab12"
    assert subject_text({"kind": "api_key", "id": "k_cd34"}) == "API key k_cd34"
    assert subject_text(None) == ""
    assert visitor_text({"name": "Ada", "email": "ada@example.org"}) == "Ada <ada@example.org>"
    assert visitor_text({"name": "Ada", "email": None}) == "Ada"
    assert visitor_text({"email": "ada@example.org"}) == "ada@example.org"
    assert visitor_text(None) == ""


CAPABILITIES: list[dict[str, Any]] = [
    {"id": "plain", "config": {"role": []}},
    {"id": "greeter", "title": "Greeter", "config": {"role": [DECLARED[0], DECLARED[2]]}},
]


def test_a_role_form_shows_its_grants_and_config_or_what_was_typed() -> None:
    role = {"id": "friends", "capabilities": ["greeter"], "config": {"greeter": {"limit": 5, "on": False}}}
    shown = role_sections(CAPABILITIES, role)
    typed = role_sections(CAPABILITIES, role, ({"role_config:greeter:limit": "x"}, ["plain"]))
    assert [(s.capability, s.title, s.granted, [(f.key, f.shown) for f in s.fields]) for s in shown] == [
        ("plain", "plain", False, []),
        ("greeter", "Greeter", True, [("limit", "5"), ("on", "false")]),
    ]
    assert [(s.granted, [f.shown for f in s.fields]) for s in typed] == [(True, []), (False, ["x", "false"])]
    assert role_sections(CAPABILITIES, None)[1].granted is False


def test_a_submitted_role_form_means_the_granted_capabilities_changed_config() -> None:
    form = {"role_config:greeter:limit": "7", "role_config:greeter:on": "false", "role_config:plain:x": "1"}
    assert role_config(CAPABILITIES, ["greeter"], form) == {"greeter": {"limit": 7}}  # on: its default
    assert role_config(CAPABILITIES, ["greeter"], {**form, "role_config:greeter:limit": ""}) == {"greeter": {}}
    assert role_config(CAPABILITIES, ["plain"], form) == {}  # greeter not granted; plain has no role config
    assert role_config(CAPABILITIES, ["greeter"], {}) == {}  # no config field sent: role config left alone
