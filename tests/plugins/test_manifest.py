"""Manifest model and reader: a good manifest's whole model, and every refusal naming file and field."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from inline_snapshot import snapshot

from mcp_host.errors import ManifestError
from mcp_host.plugins.manifest import (
    MANIFEST_NAME,
    TOOL_NAME_RE,
    Manifest,
    ManifestResult,
    Quota,
    ResourceLimits,
    load_manifest,
    read_manifest,
)

GOOD = """\
id: calendar.book
kind: capability
title: Book a meeting
version: "1"
description: |
  Books a meeting in the owner's calendar.
  Second line,\ttabbed.
acl: always
requires: [calendar]
visitor_tools: [calendar_book, calendar_list_slots]
visitor_tool_requires: {calendar_book: ["calendar:events.insert"]}
owner_tools:
  - name: bookings.list
    tool: bookings_list
    description: List bookings
    input_schema: '{"type": "object", "properties": {"limit": {"type": "integer"}}}'
  - name: bookings.cancel
    tool: bookings_cancel
    input_schema:
      type: object
      properties: {id: {$ref: "#/$defs/id"}}
      $defs: {id: {type: string}}
config:
  - {key: max_bookings, label: Max bookings, type: int, default: 3, min: 0, max: 10}
  - {key: opens, label: Opens, type: time, default: 09:30}
  - {key: closes, label: Closes, type: time, default: 17:30}
  - {key: rooms, type: string_list, default: [small, large]}
code_config:
  - {key: note, type: string, description: Shown to the visitor}
role_config:
  - {key: max_bookings, type: int, default: 1}
key_config:
  - {key: trusted, type: bool, default: false}
  - {key: max_bookings, type: int, min: 0}
quota: {config_key: max_bookings, collection: bookings, subject_field: subject_id}
claim_gate: {tool: calendar_book, phrases: ["i've booked", "invite went to"]}
transport:
  kind: stdio
  command: python
  args: [server.py, --verbose]
  env: {LOG_LEVEL: info}
  sandbox: {host_ops: [store.insert, config.get], allow_net: false, workspace: true}
"""

CONNECTOR = """\
id: caldav
kind: connector
title: CalDAV
category: calendar
verbs: [freebusy, insert_event]
settings:
  - {key: url, label: Server URL, type: string}
  - {key: password, label: Password, type: string, secret: true}
transport: {kind: http, url: "https://caldav.example/mcp"}
"""


def write_manifest(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST_NAME).write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


def refusal(tmp_path: Path, text: str) -> tuple[str, str]:
    """Load `text` as a manifest; return the refusal's (field, problem) after checking its path."""
    folder = write_manifest(tmp_path / "plugin", text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(folder)
    assert caught.value.path == str(folder / MANIFEST_NAME)
    return caught.value.field, caught.value.problem


def nested_schema(levels: int) -> str:
    schema: dict[str, object] = {"type": "object"}
    for _ in range(levels - 1):
        schema = {"type": "object", "properties": {"a": schema}}
    return json.dumps(json.dumps(schema))


def test_good_manifest_loads_without_a_mistake_or_a_warning(tmp_path: Path) -> None:
    result = read_manifest(write_manifest(tmp_path / "calendar_book", GOOD))

    assert (result.errors, result.mistakes, result.warnings) == ((), (), ())


def test_good_manifest_loads_into_the_whole_model(tmp_path: Path) -> None:
    manifest = load_manifest(write_manifest(tmp_path / "calendar_book", GOOD))

    assert manifest.model_dump(mode="json") == snapshot(
        {
            "id": "calendar.book",
            "kind": "capability",
            "title": "Book a meeting",
            "version": "1",
            "description": """\
Books a meeting in the owner's calendar.
Second line,	tabbed.
""",
            "acl": "always",
            "requires": ["calendar"],
            "visitor_tools": ["calendar_book", "calendar_list_slots"],
            "visitor_tool_requires": {"calendar_book": ["calendar:events.insert"]},
            "owner_tools": [
                {
                    "name": "bookings.list",
                    "tool": "bookings_list",
                    "description": "List bookings",
                    "input_schema": {"type": "object", "properties": {"limit": {"type": "integer"}}},
                },
                {
                    "name": "bookings.cancel",
                    "tool": "bookings_cancel",
                    "description": "",
                    "input_schema": {
                        "type": "object",
                        "properties": {"id": {"$ref": "#/$defs/id"}},
                        "$defs": {"id": {"type": "string"}},
                    },
                },
            ],
            "config": [
                {
                    "key": "max_bookings",
                    "label": "Max bookings",
                    "type": "int",
                    "default": 3,
                    "min": 0,
                    "max": 10,
                    "description": "",
                    "secret": False,
                    "required": False,
                },
                {
                    "key": "opens",
                    "label": "Opens",
                    "type": "time",
                    "default": "09:30",
                    "min": None,
                    "max": None,
                    "description": "",
                    "secret": False,
                    "required": False,
                },
                {
                    "key": "closes",
                    "label": "Closes",
                    "type": "time",
                    "default": "17:30",
                    "min": None,
                    "max": None,
                    "description": "",
                    "secret": False,
                    "required": False,
                },
                {
                    "key": "rooms",
                    "label": "",
                    "type": "string_list",
                    "default": ["small", "large"],
                    "min": None,
                    "max": None,
                    "description": "",
                    "secret": False,
                    "required": False,
                },
            ],
            "code_config": [
                {
                    "key": "note",
                    "label": "",
                    "type": "string",
                    "default": None,
                    "min": None,
                    "max": None,
                    "description": "Shown to the visitor",
                    "secret": False,
                    "required": False,
                }
            ],
            "role_config": [
                {
                    "key": "max_bookings",
                    "label": "",
                    "type": "int",
                    "default": 1,
                    "min": None,
                    "max": None,
                    "description": "",
                    "secret": False,
                    "required": False,
                }
            ],
            "key_config": [
                {
                    "key": "trusted",
                    "label": "",
                    "type": "bool",
                    "default": False,
                    "min": None,
                    "max": None,
                    "description": "",
                    "secret": False,
                    "required": False,
                },
                {
                    "key": "max_bookings",
                    "label": "",
                    "type": "int",
                    "default": None,
                    "min": 0,
                    "max": None,
                    "description": "",
                    "secret": False,
                    "required": False,
                },
            ],
            "quota": {
                "config_key": "max_bookings",
                "collection": "bookings",
                "subject_field": "subject_id",
                "tools": [],
            },
            "claim_gate": {"tool": "calendar_book", "phrases": ["i've booked", "invite went to"]},
            "transport": {
                "kind": "stdio",
                "command": "python",
                "args": ["server.py", "--verbose"],
                "env": {"LOG_LEVEL": "info"},
                "url": None,
                "sandbox": {
                    "host_ops": ["store.insert", "config.get"],
                    "allow_net": False,
                    "workspace": True,
                    "egress": [],
                    "allow_private": [],
                },
                "env_from_config": {},
                "headers": {},
                "headers_from_config": {},
                "timeout_s": None,
                "allowed_hosts": [],
                "allow_private": [],
                "sign_in": "owner",
            },
            "category": None,
            "verbs": None,
            "settings": None,
            "limits": None,
            "instances": None,
        }
    )


def test_connector_manifest_loads_with_its_connector_fields(tmp_path: Path) -> None:
    manifest = load_manifest(write_manifest(tmp_path / "caldav", CONNECTOR))

    assert manifest.model_dump(mode="json", include={"kind", "category", "verbs", "settings", "transport"}) == (
        snapshot(
            {
                "kind": "connector",
                "transport": {
                    "kind": "http",
                    "command": None,
                    "args": [],
                    "env": {},
                    "url": "https://caldav.example/mcp",
                    "sandbox": {
                        "host_ops": [],
                        "allow_net": False,
                        "workspace": False,
                        "egress": [],
                        "allow_private": [],
                    },
                    "env_from_config": {},
                    "headers": {},
                    "headers_from_config": {},
                    "timeout_s": None,
                    "allowed_hosts": [],
                    "allow_private": [],
                    "sign_in": "owner",
                },
                "category": "calendar",
                "verbs": ["freebusy", "insert_event"],
                "settings": [
                    {"key": "url", "label": "Server URL", "type": "string", "secret": False},
                    {"key": "password", "label": "Password", "type": "string", "secret": True},
                ],
            }
        )
    )


def test_manifest_with_only_an_id_gets_fail_closed_defaults(tmp_path: Path) -> None:
    manifest = load_manifest(write_manifest(tmp_path / "bare", "id: bare\n"))

    assert manifest.model_dump(mode="json") == snapshot(
        {
            "id": "bare",
            "kind": "capability",
            "title": "",
            "version": "",
            "description": "",
            "acl": "role_granted",
            "requires": [],
            "visitor_tools": [],
            "visitor_tool_requires": {},
            "owner_tools": [],
            "config": [],
            "code_config": [],
            "role_config": [],
            "key_config": [],
            "quota": None,
            "claim_gate": None,
            "transport": None,
            "category": None,
            "verbs": None,
            "settings": None,
            "limits": None,
            "instances": None,
        }
    )


def test_manifest_is_frozen(tmp_path: Path) -> None:
    manifest = load_manifest(write_manifest(tmp_path / "bare", "id: bare\n"))

    with pytest.raises(ValueError, match="frozen"):
        manifest.acl = "always"


def findings(result: ManifestResult) -> list[tuple[str, str]]:
    return [(mistake.field, mistake.problem) for mistake in result.mistakes]


@pytest.mark.parametrize(("acl", "shown"), [("public", "'public'"), ("ALWAYS", "'ALWAYS'"), ("true", "True")])
def test_unknown_acl_reads_as_role_granted_and_is_a_mistake(tmp_path: Path, acl: str, shown: str) -> None:
    result = read_manifest(write_manifest(tmp_path / "p", f"id: demo\nacl: {acl}\n"))

    assert result.manifest is not None
    assert result.manifest.acl == "role_granted"
    assert findings(result) == [("acl", f"unknown value {shown} (always or role_granted); read as role_granted")]
    assert result.mistakes[0].path == str(tmp_path / "p" / MANIFEST_NAME)
    assert result.warnings == ()


def test_declarations_naming_no_visitor_tool_load_as_mistakes_and_the_rest_as_warnings(tmp_path: Path) -> None:
    text = """\
        id: demo
        visitor_tools: [book]
        visitor_tool_requires: {cancel: ["calendar:events.delete"]}
        claim_gate: {tool: rebook, phrases: [booked]}
        code_config: [{key: max_books, type: int}]
        quota: {config_key: max_books, collection: books, subject_field: subject_id, tools: [book, Book, rebook]}
    """
    result = read_manifest(write_manifest(tmp_path / "p", text))

    assert result.manifest is not None
    assert findings(result) == snapshot(
        [
            ("quota.tools.1", "'Book' is not in visitor_tools; it uses up no quota"),
            ("quota.tools.2", "'rebook' is not in visitor_tools; it uses up no quota"),
            ("visitor_tool_requires.cancel", "'cancel' is not in visitor_tools"),
        ]
    )
    assert result.warnings == snapshot(
        (
            "visitor_tool_requires: 'cancel' needs 'calendar', not in requires",
            "claim_gate: 'rebook' is not in visitor_tools",
        )
    )


def test_requirements_and_quota_tools_with_no_visitor_tools_declared_are_mistakes(tmp_path: Path) -> None:
    text = """\
        id: demo
        requires: [calendar]
        visitor_tool_requires: {book: ["calendar:events.insert"]}
        code_config: [{key: max_books, type: int}]
        quota: {config_key: max_books, collection: books, subject_field: subject_id, tools: [book]}
    """
    result = read_manifest(write_manifest(tmp_path / "p", text))

    assert findings(result) == snapshot(
        [
            ("quota.tools.0", "'book' is not in visitor_tools; it uses up no quota"),
            ("visitor_tool_requires.book", "'book' is not in visitor_tools"),
        ]
    )


def test_every_mistake_and_error_of_a_manifest_is_reported_at_once(tmp_path: Path) -> None:
    text = """\
        id: demo
        acl: everyone
        colour: red
        config: [{key: n, type: string, min: 1, max: 0, default: 3}]
    """
    result = read_manifest(write_manifest(tmp_path / "p", text))

    assert result.manifest is None
    assert [(e.field, e.problem) for e in result.errors] == snapshot(
        [
            ("config.0.min", "min applies to int fields only"),
            ("config.0.max", "max applies to int fields only"),
            ("config.0.max", "max (0) is below min (1)"),
            ("config.0.default", "must be a string (type string)"),
            ("colour", "unknown key 'colour'"),
        ]
    )
    assert findings(result) == [("acl", "unknown value 'everyone' (always or role_granted); read as role_granted")]


def test_every_cross_field_error_of_a_manifest_is_reported_at_once(tmp_path: Path) -> None:
    text = """\
        id: demo
        kind: connector
        code_config: [{key: max_books, type: string}]
        quota: {config_key: max_books, collection: books, subject_field: subject_id}
    """
    assert [(e.field, e.problem) for e in read_manifest(write_manifest(tmp_path / "p", text)).errors] == snapshot(
        [
            ("category", "required when kind is connector"),
            ("verbs", "required when kind is connector"),
            ("settings", "required when kind is connector"),
            ("quota.config_key", "'max_books' is a string field in code_config; a quota needs int"),
        ]
    )


def test_yaml_scalars_read_as_yaml_1_2(tmp_path: Path) -> None:
    text = """\
        id: demo
        claim_gate: {tool: book, phrases: [no, on, yes]}
        config: [{key: opens, type: time, default: 10:30}, {key: n, type: int, default: 010}]
    """
    assert refusal(tmp_path, text) == snapshot(("config.1.default", "must be an integer (type int)"))
    fixed = load_manifest(write_manifest(tmp_path / "fixed", text.replace("default: 010", "default: 10")))
    assert fixed.claim_gate is not None
    assert fixed.claim_gate.phrases == ("no", "on", "yes")
    assert fixed.config[0].default == "10:30"


def test_read_manifest_reports_every_problem_in_the_file(tmp_path: Path) -> None:
    text = """\
        id: Demo
        colour: red
        visitor_tools: ["book it"]
        transport: {command: python, args: ["a\\0b"]}
    """
    result = read_manifest(write_manifest(tmp_path / "p", text))

    assert result.manifest is None
    assert [(error.field, error.problem) for error in result.errors] == snapshot(
        [
            ("id", "'Demo' is not a plugin id (dot-joined words of a-z 0-9 _, at most 64)"),
            ("visitor_tools.0", "'book it' is not a tool name (A-Z a-z 0-9 _ -, at most 64)"),
            ("transport.args.0", "contains NUL"),
            ("colour", "unknown key 'colour'"),
        ]
    )
    assert {error.path for error in result.errors} == {str(tmp_path / "p" / MANIFEST_NAME)}


BAD_MANIFESTS = [
    # unknown keys, at the top and nested
    pytest.param("id: demo\ncolour: red\n", snapshot(("colour", "unknown key 'colour'")), id="unknown-top-level-key"),
    pytest.param(
        "id: demo\ntransport: {command: python, sandbox: {colour: red}}\n",
        snapshot(("transport.sandbox.colour", "unknown key 'colour'")),
        id="unknown-key-in-sandbox",
    ),
    pytest.param(
        "id: demo\nowner_tools: [{name: a, tool: a, colour: 1}]\n",
        snapshot(("owner_tools.0.colour", "unknown key 'colour'")),
        id="unknown-key-in-owner-tool",
    ),
    pytest.param(
        'id: demo\n"\\e[31mred": 1\n',
        snapshot(("'\\x1b[31mred'", "unknown key '\\x1b[31mred'")),
        id="unknown-key-shown-escaped",
    ),
    # ids
    pytest.param("title: no id\n", snapshot(("id", "required")), id="id-missing"),
    pytest.param(
        "id: Calendar\n",
        snapshot(("id", "'Calendar' is not a plugin id (dot-joined words of a-z 0-9 _, at most 64)")),
        id="id-uppercase",
    ),
    pytest.param(
        "id: calendar..book\n",
        snapshot(
            (
                "id",
                "'calendar..book' is not a plugin id (dot-joined words of a-z 0-9 _, at most 64)",
            )
        ),
        id="id-double-dot",
    ),
    pytest.param(
        "id: 1calendar\n",
        snapshot(("id", "'1calendar' is not a plugin id (dot-joined words of a-z 0-9 _, at most 64)")),
        id="id-leading-digit",
    ),
    pytest.param(
        f"id: {'a' * 65}\n",
        snapshot(
            (
                "id",
                "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa… "
                "is not a plugin id (dot-joined words of a-z 0-9 _, at most 64)",
            )
        ),
        id="id-too-long",
    ),
    pytest.param(
        "id: calendar/book\n",
        snapshot(
            (
                "id",
                "'calendar/book' is not a plugin id (dot-joined words of a-z 0-9 _, at most 64)",
            )
        ),
        id="id-slash",
    ),
    pytest.param(
        "id: calendar-book\n",
        snapshot(
            (
                "id",
                "'calendar-book' is not a plugin id (dot-joined words of a-z 0-9 _, at most 64)",
            )
        ),
        id="id-dash",
    ),
    pytest.param("id: 3\n", snapshot(("id", "must be a string")), id="id-not-a-string"),
    # config fields
    pytest.param(
        "id: demo\nconfig: [{key: n, type: int, default: '3'}]\n",
        snapshot(("config.0.default", "must be an integer (type int)")),
        id="default-wrong-type",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: n, type: int, default: true}]\n",
        snapshot(("config.0.default", "must be an integer (type int)")),
        id="default-bool-for-int",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: n, type: int, default: 1.5}]\n",
        snapshot(
            (
                "config.0.default",
                "default must be a string, an integer, true/false, a list of strings or null",
            )
        ),
        id="default-float",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: n, type: int, default: 0, min: 1, max: 5}]\n",
        snapshot(("config.0.default", "0 is below min (1)")),
        id="default-below-min",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: n, type: int, default: 6, min: 1, max: 5}]\n",
        snapshot(("config.0.default", "6 is above max (5)")),
        id="default-above-max",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: n, type: int, min: 5, max: 1}]\n",
        snapshot(("config.0.max", "max (1) is below min (5)")),
        id="min-above-max",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: s, type: string, min: 1}]\n",
        snapshot(("config.0.min", "min applies to int fields only")),
        id="min-on-string",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: t, type: time, default: '25:00'}]\n",
        snapshot(("config.0.default", 'must be a 24-hour time "HH:MM" (type time)')),
        id="time-hour-25",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: t, type: time, default: '9:30'}]\n",
        snapshot(("config.0.default", 'must be a 24-hour time "HH:MM" (type time)')),
        id="time-one-digit",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: t, type: time, default: 930}]\n",
        snapshot(("config.0.default", 'must be a 24-hour time "HH:MM" (type time)')),
        id="time-integer",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: l, type: string_list, default: [1]}]\n",
        snapshot(("config.0.default", "a list default must hold strings only")),
        id="list-of-ints",
    ),
    pytest.param(
        "id: demo\nconfig: [{key: x, type: float}]\n",
        snapshot(("config.0.type", "must be one of 'string', 'int', 'bool', 'time' or 'string_list'")),
        id="unknown-field-type",
    ),
    pytest.param(
        "id: demo\nrole_config: [{key: Max, type: int}]\n",
        snapshot(("role_config.0.key", "'Max' is not a key (a-z 0-9 _, starting with a letter, at most 64)")),
        id="config-key-uppercase",
    ),
    pytest.param(
        "id: demo\ncode_config: [{key: n, type: int}, {key: n, type: string}]\n",
        snapshot(("code_config.1.key", "duplicate config key 'n'")),
        id="config-key-twice",
    ),
    # owner tool schemas
    pytest.param(
        'id: demo\nowner_tools: [{name: a, tool: a, input_schema: \'{"type": "object",\'}]\n',
        snapshot(
            (
                "owner_tools.0.input_schema",
                "is not valid JSON: Expecting property name enclosed in double quotes (line 1, column 19)",
            )
        ),
        id="schema-not-json",
    ),
    pytest.param(
        'id: demo\nowner_tools: [{name: a, tool: a, input_schema: \'{"type": "objekt"}\'}]\n',
        snapshot(
            (
                "owner_tools.0.input_schema",
                "is not a valid JSON Schema at $.type: 'objekt' is not valid under any of the given schemas",
            )
        ),
        id="schema-not-json-schema",
    ),
    pytest.param(
        "id: demo\nowner_tools: [{name: a, tool: a, input_schema: {type: string}}]\n",
        snapshot(("owner_tools.0.input_schema", 'must have "type": "object" at its root')),
        id="schema-root-not-object",
    ),
    pytest.param(
        "id: demo\nowner_tools: [{name: a, tool: a, input_schema: '[1]'}]\n",
        snapshot(("owner_tools.0.input_schema", "must be a JSON object (a mapping or a JSON string of one)")),
        id="schema-json-array",
    ),
    pytest.param(
        "id: demo\nowner_tools:\n- name: a\n  tool: a\n  input_schema:\n    type: object\n"
        "    properties: {x: {$ref: 'https://evil.example/s.json'}}\n",
        snapshot(
            (
                "owner_tools.0.input_schema",
                "$ref 'https://evil.example/s.json' is remote; only local '#…' pointers are allowed",
            )
        ),
        id="schema-remote-ref",
    ),
    pytest.param(
        "id: demo\nowner_tools: [{name: a, tool: a, input_schema: {type: object, $id: 'https://evil.example/'}}]\n",
        snapshot(("owner_tools.0.input_schema", "$id is refused; a tool schema is one local document")),
        id="schema-id",
    ),
    pytest.param(
        f"id: demo\nowner_tools: [{{name: a, tool: a, input_schema: {nested_schema(31)}}}]\n",
        snapshot(("owner_tools.0.input_schema", "nests subschemas deeper than 30")),
        id="schema-over-deep",
    ),
    pytest.param(
        "id: demo\nowner_tools: [{name: a, tool: a, input_schema: "
        + json.dumps(json.dumps({"type": "object", "anyOf": [{"type": "object"}] * 10_000}))
        + "}]\n",
        snapshot(("owner_tools.0.input_schema", "has more than 1000 subschemas")),
        id="schema-10k-anyof",
    ),
    pytest.param(
        'id: demo\nowner_tools: [{name: a, tool: a, input_schema: \'{"type": "object", "type": "x"}\'}]\n',
        snapshot(("owner_tools.0.input_schema", "duplicate key 'type' in the JSON")),
        id="schema-duplicate-json-key",
    ),
    pytest.param(
        'id: demo\nowner_tools: [{name: a, tool: a, input_schema: \'{"type": "object", "maximum": NaN}\'}]\n',
        snapshot(("owner_tools.0.input_schema", "NaN is not JSON")),
        id="schema-nan",
    ),
    pytest.param(
        "id: demo\nowner_tools: [{name: a, tool: a}, {name: a, tool: b}]\n",
        snapshot(("owner_tools.1.name", "duplicate owner tool 'a'")),
        id="owner-tool-name-twice",
    ),
    pytest.param(
        "id: demo\nowner_tools: [{name: Bookings, tool: a}]\n",
        snapshot(("owner_tools.0.name", "'Bookings' is not a name of a-z 0-9 _ . (at most 64)")),
        id="owner-tool-name-uppercase",
    ),
    # YAML itself
    pytest.param("id: demo\nid: other\n", snapshot(("id", "duplicate key 'id' (line 2)")), id="duplicate-yaml-key"),
    pytest.param(
        "id: demo\ntransport:\n  command: python\n  command: node\n",
        snapshot(("transport.command", "duplicate key 'command' (line 4)")),
        id="duplicate-nested-yaml-key",
    ),
    pytest.param(
        "id: demo\ntitle: &t x\nversion: *t\n",
        snapshot(("", "not valid YAML: aliases are not allowed (line 3, column 10)")),
        id="yaml-alias",
    ),
    pytest.param(
        "id: [demo\n",
        snapshot(("", "not valid YAML: expected ',' or ']', but got '<stream end>' (line 2, column 1)")),
        id="yaml-syntax",
    ),
    pytest.param("- id: demo\n", snapshot(("", "must be a mapping of manifest keys")), id="not-a-mapping"),
    pytest.param("", snapshot(("", "must be a mapping of manifest keys")), id="empty-file"),
    pytest.param(
        "id: demo\nvisitor_tools: !!set {a: null, b: null}\n",
        snapshot(("visitor_tools", "tag 'tag:yaml.org,2002:set' is not allowed (line 2)")),
        id="yaml-set-tag",
    ),
    pytest.param(
        "id: demo\ntitle: !!binary aGk=\n",
        snapshot(("title", "tag 'tag:yaml.org,2002:binary' is not allowed (line 2)")),
        id="yaml-binary-tag",
    ),
    pytest.param(
        "id: demo\ntitle: !!python/name:os.system\n",
        snapshot(("title", "tag 'tag:yaml.org,2002:python/name:os.syste… is not allowed (line 2)")),
        id="yaml-python-tag",
    ),
    pytest.param(
        "id: demo\nrequires: [a, {x: 1, x: 2}]\n",
        snapshot(("requires.1.x", "duplicate key 'x' (line 2)")),
        id="duplicate-key-in-list-item",
    ),
    # tool names
    pytest.param(
        "id: demo\nvisitor_tools: [book it]\n",
        snapshot(("visitor_tools.0", "'book it' is not a tool name (A-Z a-z 0-9 _ -, at most 64)")),
        id="tool-name-with-space",
    ),
    pytest.param(
        "id: demo\nvisitor_tools: [bük]\n",
        snapshot(("visitor_tools.0", "'bük' is not a tool name (A-Z a-z 0-9 _ -, at most 64)")),
        id="tool-name-unicode",
    ),
    pytest.param(
        "id: demo\nvisitor_tools: [book, Book]\n",
        snapshot(("visitor_tools.1", "duplicate tool name 'Book'")),
        id="tool-names-differ-by-case",
    ),
    pytest.param(
        f"id: demo\nvisitor_tools: [{'a' * 65}]\n",
        snapshot(
            (
                "visitor_tools.0",
                "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa… is not a tool name (A-Z a-z 0-9 _ -, at most 64)",
            )
        ),
        id="tool-name-too-long",
    ),
    pytest.param(
        "id: demo\nclaim_gate: {tool: 'a.b', phrases: [x]}\n",
        snapshot(("claim_gate.tool", "'a.b' is not a tool name (A-Z a-z 0-9 _ -, at most 64)")),
        id="claim-gate-tool-with-dot",
    ),
    pytest.param(
        "id: demo\nclaim_gate: {tool: a, phrases: []}\n",
        snapshot(("claim_gate.phrases", "must not be empty")),
        id="claim-gate-no-phrases",
    ),
    pytest.param(
        "id: demo\nvisitor_tool_requires: {a: [calendar]}\n",
        snapshot(("visitor_tool_requires.a.0", "'calendar' is not a requirement of the form \"category:action\"")),
        id="requirement-without-action",
    ),
    # hostile text (docs/security.md A11)
    pytest.param(
        'id: demo\ndescription: "safe\\u202Eelif.exe"\n',
        snapshot(("description", "description contains a bidi control (U+202E) at index 4")),
        id="description-bidi-override",
    ),
    pytest.param(
        'id: demo\ndescription: "\\e[2Jcleared"\n',
        snapshot(("description", "description contains a control character (U+001B) at index 0")),
        id="description-escape",
    ),
    pytest.param(
        'id: demo\ndescription: "zero\\u200Bwidth"\n',
        snapshot(("description", "description contains an invisible character (U+200B) at index 4")),
        id="description-zero-width",
    ),
    pytest.param(
        'id: demo\ndescription: "tag\\U000E0041"\n',
        snapshot(("description", "description contains a tag character (U+E0041) at index 3")),
        id="description-tag-character",
    ),
    pytest.param(
        'id: demo\ndescription: "bom\\uFEFF"\n',
        snapshot(("description", "description contains an invisible character (U+FEFF) at index 3")),
        id="description-bom",
    ),
    pytest.param(
        f"id: demo\ndescription: {'x' * 8193}\n",
        snapshot(("description", "description is 8193 bytes long; the limit is 8192")),
        id="description-over-8-kib",
    ),
    pytest.param(
        'id: demo\ntitle: "two\\nlines"\n',
        snapshot(("title", "title contains a control character (U+000A) at index 3")),
        id="title-newline",
    ),
    pytest.param(
        f"id: demo\ntitle: {'t' * 201}\n",
        snapshot(("title", "must have at most 200 characters")),
        id="title-too-long",
    ),
    pytest.param(
        'id: demo\nconfig: [{key: a, type: int, label: "\\u2066x"}]\n',
        snapshot(("config.0.label", "label contains a bidi control (U+2066) at index 0")),
        id="label-bidi-isolate",
    ),
    pytest.param(
        'id: demo\nowner_tools: [{name: a, tool: a, description: "\\x9b31m"}]\n',
        snapshot(("owner_tools.0.description", "description contains a control character (U+009B) at index 0")),
        id="tool-description-c1",
    ),
    # transport (docs/security.md D12)
    pytest.param(
        'id: demo\ntransport: {command: python, args: ["a\\0b"]}\n',
        snapshot(("transport.args.0", "contains NUL")),
        id="nul-in-args",
    ),
    pytest.param(
        'id: demo\ntransport: {command: "py\\0thon"}\n',
        snapshot(("transport.command", "command contains a control character (U+0000) at index 2")),
        id="nul-in-command",
    ),
    pytest.param(
        'id: demo\ntransport: {command: python, env: {A: "x\\0"}}\n',
        snapshot(("transport.env.A", "contains NUL")),
        id="nul-in-env",
    ),
    pytest.param(
        "id: demo\ntransport: {command: --privileged}\n",
        snapshot(("transport.command", "must be a program name or path, not empty and not starting with '-'")),
        id="command-leading-dash",
    ),
    pytest.param(
        "id: demo\ntransport: {command: python, env: {A-B: x}}\n",
        snapshot(("transport.env.A-B", "'A-B' is not an environment variable name")),
        id="env-key-bad",
    ),
    pytest.param(
        "id: demo\ntransport: {command: python, env: {MCP_HOST_SOCKET: /tmp/x}}\n",
        snapshot(("transport.env.MCP_HOST_SOCKET", "'MCP_HOST_SOCKET' is reserved for the host (MCP_HOST_*)")),
        id="env-key-reserved",
    ),
    pytest.param(
        "id: demo\ntransport: {kind: stdio}\n",
        snapshot(("transport.command", "required for a stdio transport")),
        id="stdio-without-command",
    ),
    pytest.param(
        "id: demo\ntransport: {kind: http}\n",
        snapshot(("transport.url", "required for an http transport")),
        id="http-without-url",
    ),
    pytest.param(
        "id: demo\ntransport: {kind: http, url: 'https://x.example', command: python}\n",
        snapshot(("transport.command", "an http transport takes no command")),
        id="http-with-command",
    ),
    pytest.param(
        "id: demo\ntransport: {kind: http, url: 'file:///etc/passwd'}\n",
        snapshot(("transport.url", "must be an http:// or https:// URL without spaces or control characters")),
        id="url-not-http",
    ),
    pytest.param(
        "id: demo\ntransport: {command: python, url: 'https://x.example'}\n",
        snapshot(("transport.url", "only an http transport takes a url")),
        id="stdio-with-url",
    ),
    pytest.param(
        "id: demo\ntransport: {kind: ssh, command: python}\n",
        snapshot(("transport.kind", "must be one of 'stdio' or 'http'")),
        id="transport-kind-unknown",
    ),
    pytest.param(
        "id: demo\ntransport: {command: python, sandbox: {allow_net: 'yes'}}\n",
        snapshot(("transport.sandbox.allow_net", "must be true or false")),
        id="allow-net-string",
    ),
    pytest.param(
        "id: demo\ntransport: {command: python, sandbox: {host_ops: [store.insert, store.insert]}}\n",
        snapshot(("transport.sandbox.host_ops.1", "duplicate host op 'store.insert'")),
        id="host-op-twice",
    ),
    # connector-only fields
    pytest.param(
        "id: demo\ncategory: calendar\n",
        snapshot(("category", "only a connector declares this")),
        id="category-on-capability",
    ),
    pytest.param(
        "id: demo\nverbs: [send]\n",
        snapshot(("verbs", "only a connector declares this")),
        id="verbs-on-capability",
    ),
    pytest.param(
        "id: demo\nkind: connector\nverbs: [send]\nsettings: []\n",
        snapshot(("category", "required when kind is connector")),
        id="connector-no-category",
    ),
    pytest.param(
        "id: demo\nkind: connector\ncategory: mail\nsettings: []\n",
        snapshot(("verbs", "required when kind is connector")),
        id="connector-no-verbs",
    ),
    pytest.param(
        "id: demo\nkind: connector\ncategory: mail\nverbs: []\nsettings: []\n",
        snapshot(("verbs", "must not be empty")),
        id="connector-empty-verbs",
    ),
    pytest.param(
        "id: demo\nkind: connector\ncategory: Mail\nverbs: [send]\nsettings: []\n",
        snapshot(("category", "'Mail' is not a category name (a-z 0-9 _, at most 32)")),
        id="category-bad",
    ),
    pytest.param(
        "id: demo\nkind: plugin\n",
        snapshot(("kind", "must be one of 'capability' or 'connector'")),
        id="kind-unknown",
    ),
    # quota
    pytest.param(
        "id: demo\nconfig: [{key: max_bookings, type: string}]\n"
        "quota: {config_key: max_bookings, collection: bookings, subject_field: subject_id}\n",
        snapshot(("quota.config_key", "'max_bookings' is a string field in config; a quota needs int")),
        id="quota-key-not-int",
    ),
    pytest.param(
        "id: demo\ntransport: {command: python, sandbox: {host_ops: [store.insert, shell.exec]}}\n",
        snapshot(
            (
                "transport.sandbox.host_ops.1",
                "'shell.exec' is not a host op this host offers (config.get, connector.invoke, conversation.read,"
                " inference.generate, owner.meta, parent.invoke, store.claim, store.count, store.delete, store.insert,"
                " store.query, store.release, store.search, store.update)",
            )
        ),
        id="host-op-unknown",
    ),
]


def test_incomplete_quota_loads_with_a_warning_and_gates_nothing(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_text(
        "id: demo\ncode_config: [{key: max_bookings, type: int}]\nquota: {config_key: max_bookings}\n"
    )

    result = read_manifest(tmp_path)

    assert result.manifest is not None and result.manifest.quota_gate() is None
    assert result.warnings == snapshot(("quota: incomplete (missing collection, subject_field); no quota is enforced",))
    assert result.mistakes == ()


@pytest.mark.parametrize(
    "declared",
    [
        pytest.param("", id="nowhere"),
        pytest.param("config: [{key: max_bookings, type: int}]\n", id="owner-config-only"),
        pytest.param("role_config: [{key: max_bookings, type: int}]\n", id="role-config-only"),
    ],
)
def test_quota_key_no_code_or_api_key_can_set_is_a_mistake_and_gates_nothing(tmp_path: Path, declared: str) -> None:
    (tmp_path / MANIFEST_NAME).write_text(
        f"id: demo\n{declared}quota: {{config_key: max_bookings, collection: bookings, subject_field: subject_id}}\n"
    )

    result = read_manifest(tmp_path)

    assert result.manifest is not None and result.manifest.quota_gate() is None
    assert findings(result) == snapshot(
        [
            (
                "quota.config_key",
                "'max_bookings' is not declared in code_config or key_config, where a quota's limit is set;"
                " no quota is enforced",
            )
        ]
    )
    assert result.warnings == ()


@pytest.mark.parametrize("scope", ["code_config", "key_config"])
def test_quota_key_declared_for_codes_or_api_keys_is_the_gate(tmp_path: Path, scope: str) -> None:
    (tmp_path / MANIFEST_NAME).write_text(
        f"id: demo\n{scope}: [{{key: max_bookings, type: int}}]\n"
        "quota: {config_key: max_bookings, collection: bookings, subject_field: subject_id}\n"
    )

    result = read_manifest(tmp_path)

    assert result.manifest is not None and result.manifest.quota_gate() == result.manifest.quota
    assert (result.mistakes, result.warnings) == ((), ())


def test_complete_quota_is_the_gate(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_text(
        "id: demo\ncode_config: [{key: max_bookings, type: int}]\n"
        "quota: {config_key: max_bookings, collection: bookings, subject_field: subject_id}\n"
    )

    manifest = load_manifest(tmp_path)

    assert manifest.quota_gate() == manifest.quota


@pytest.mark.parametrize(("text", "expected"), BAD_MANIFESTS)
def test_bad_manifest_is_refused_naming_file_and_field(tmp_path: Path, text: str, expected: object) -> None:
    assert refusal(tmp_path, text) == expected


def test_missing_manifest_file_is_a_manifest_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path)

    assert caught.value.path == str(tmp_path / MANIFEST_NAME)
    assert caught.value.problem == snapshot("cannot read manifest.yaml: No such file or directory")


def test_manifest_that_is_not_utf8_is_a_manifest_error(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_bytes(b"id: d\xe9mo\n")

    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path)

    assert (caught.value.field, caught.value.problem) == snapshot(("", "not UTF-8 (byte 5)"))


def test_oversized_manifest_is_refused_before_parsing(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_bytes(b"id: demo\n" + b"#" * (1024 * 1024))

    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path)

    assert caught.value.problem == snapshot("larger than 1048576 bytes")


def test_tool_name_grammar_rejects_a_trailing_newline() -> None:
    assert TOOL_NAME_RE.match("book") is not None
    assert TOOL_NAME_RE.match("book\n") is None


def test_manifest_model_validates_without_a_warning_context() -> None:
    manifest = Manifest.model_validate({"id": "demo", "acl": "public"})

    assert manifest.acl == "role_granted"


def test_quota_tools_name_the_tools_that_use_it_up() -> None:
    everything = Quota(config_key="k", collection="c", subject_field="s")
    named = Quota(config_key="k", collection="c", subject_field="s", tools=("book",))
    assert everything.gates("book") and everything.gates("cancel")
    assert named.gates("book") and not named.gates("cancel")


def test_limits_load_each_key_optional(tmp_path: Path) -> None:
    limits = "{memory_mb: 128, cpu_seconds: 60, processes: 8, open_files: 64}"
    text = f"id: demo\ntransport: {{command: node}}\nlimits: {limits}\n"
    result = read_manifest(write_manifest(tmp_path / "demo", text))

    assert result.manifest is not None and (result.errors, result.mistakes, result.warnings) == ((), (), ())
    assert result.manifest.limits == ResourceLimits(memory_mb=128, cpu_seconds=60, processes=8, open_files=64)
    only_memory = load_manifest(
        write_manifest(tmp_path / "one", "id: one\ntransport: {command: node}\nlimits: {memory_mb: 96}\n")
    )
    assert only_memory.limits == ResourceLimits(memory_mb=96)
    assert (only_memory.limits.cpu_seconds, only_memory.limits.processes, only_memory.limits.open_files) == (None,) * 3


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        pytest.param(
            "{memory_mb: 32}",
            ("limits.memory_mb", "Input should be greater than or equal to 64"),
            id="memory-below-the-floor",
        ),
        pytest.param(
            "{processes: 2}",
            ("limits.processes", "Input should be greater than or equal to 4"),
            id="processes-below-the-floor",
        ),
        pytest.param(
            "{open_files: 8}",
            ("limits.open_files", "Input should be greater than or equal to 32"),
            id="files-below-the-floor",
        ),
        pytest.param(
            "{cpu_seconds: 0}", ("limits.cpu_seconds", "Input should be greater than or equal to 1"), id="no-cpu"
        ),
        pytest.param('{memory_mb: "512"}', ("limits.memory_mb", "must be an integer"), id="a-string"),
        pytest.param("{memory_mb: 1.5}", ("limits.memory_mb", "must be an integer"), id="a-float"),
        pytest.param("{swap_mb: 1}", ("limits.swap_mb", "unknown key 'swap_mb'"), id="unknown-key"),
        pytest.param("512", ("limits", "must be a mapping"), id="not-a-mapping"),
    ],
)
def test_bad_limits_are_refused_naming_the_key(tmp_path: Path, limits: str, expected: tuple[str, str]) -> None:
    assert refusal(tmp_path, f"id: demo\ntransport: {{command: node}}\nlimits: {limits}\n") == expected


def test_egress_limits_load_and_refuse_below_one(tmp_path: Path) -> None:
    text = "id: demo\ntransport: {command: node}\nlimits: {egress_connections: 4, egress_mb_per_minute: 20}\n"
    manifest = load_manifest(write_manifest(tmp_path / "demo", text))

    assert manifest.limits == ResourceLimits(egress_connections=4, egress_mb_per_minute=20)
    for key in ("egress_connections", "egress_mb_per_minute"):
        refused = refusal(tmp_path, f"id: demo\ntransport: {{command: node}}\nlimits: {{{key}: 0}}\n")
        assert refused == (f"limits.{key}", "Input should be greater than or equal to 1")


def test_sandbox_egress_and_allow_private_load(tmp_path: Path) -> None:
    sandbox = "{egress: [api.example.com, '*.cdn.example:8443', '127.0.0.1:5432'], allow_private: [db.lan]}"
    text = f"id: demo\ntransport: {{command: node, sandbox: {sandbox}}}\n"
    manifest = load_manifest(write_manifest(tmp_path / "demo", text))

    assert manifest.transport is not None
    assert manifest.transport.sandbox.model_dump(mode="json") == snapshot(
        {
            "host_ops": [],
            "allow_net": False,
            "workspace": False,
            "egress": ["api.example.com", "*.cdn.example:8443", "127.0.0.1:5432"],
            "allow_private": ["db.lan"],
        }
    )


@pytest.mark.parametrize(
    ("sandbox", "expected"),
    [
        pytest.param(
            "{egress: ['*.com']}",
            (
                "transport.sandbox.egress.0",
                "egress entry '*.com': a wildcard names a domain of at least two labels, like *.example.com",
            ),
            id="wildcard-tld",
        ),
        pytest.param(
            "{egress: [ok.example, 'x.example:99999']}",
            ("transport.sandbox.egress.1", "egress entry 'x.example:99999': the port must be 1 to 65535"),
            id="port-out-of-range",
        ),
        pytest.param(
            "{egress: ['http://x.example/']}",
            (
                "transport.sandbox.egress.0",
                "egress entry 'http://x.example/' is not host, host:port, *.domain or *.domain:port",
            ),
            id="a-url",
        ),
        pytest.param(
            "{egress: [a.example, A.example]}",
            ("transport.sandbox.egress.1", "duplicate egress entry 'A.example'"),
            id="twice",
        ),
        pytest.param(
            "{allow_private: ['db lan']}",
            (
                "transport.sandbox.allow_private.0",
                "'db lan' is not a host name (or an IP address, an IPv6 one in [brackets])",
            ),
            id="private-not-a-host",
        ),
    ],
)
def test_bad_egress_entries_are_refused_naming_the_entry(
    tmp_path: Path, sandbox: str, expected: tuple[str, str]
) -> None:
    assert refusal(tmp_path, f"id: demo\ntransport: {{command: node, sandbox: {sandbox}}}\n") == expected


def test_egress_on_an_http_transport_is_refused(tmp_path: Path) -> None:
    text = "id: demo\ntransport: {kind: http, url: 'https://x.example', sandbox: {egress: [x.example]}}\n"
    assert refusal(tmp_path, text) == ("transport.sandbox", "an http transport takes no sandbox")


def test_limits_without_a_stdio_child_load_with_a_warning(tmp_path: Path) -> None:
    text = "id: demo\ntransport: {kind: http, url: 'https://example.org/mcp'}\nlimits: {memory_mb: 128}\n"
    result = read_manifest(write_manifest(tmp_path / "demo", text))

    assert result.manifest is not None and result.mistakes == ()
    assert result.warnings == ("limits: only a stdio child has them; this plugin starts none",)


def test_env_from_config_names_owner_config_keys_and_loads(tmp_path: Path) -> None:
    folder = write_manifest(
        tmp_path / "plugin",
        """\
        id: demo
        config: [{key: token, type: string, secret: true, required: true}, {key: level, type: int}]
        transport: {command: node, env_from_config: {API_TOKEN: token, LEVEL: level}}
        """,
    )
    manifest = load_manifest(folder)
    assert manifest.transport is not None
    assert manifest.transport.env_from_config == {"API_TOKEN": "token", "LEVEL": "level"}
    assert [(f.key, f.secret, f.required) for f in manifest.config] == [("token", True, True), ("level", False, False)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "config: [{key: token, type: string}]\ntransport: {command: node, env_from_config: {TOKEN: nope}}",
            ("transport.env_from_config.TOKEN", "'nope' is not a key declared in config"),
            id="undeclared-key",
        ),
        pytest.param(
            "code_config: [{key: token, type: string}]\ntransport: {command: node, env_from_config: {TOKEN: token}}",
            ("transport.env_from_config.TOKEN", "'token' is not a key declared in config"),
            id="a-code-config-key",
        ),
        pytest.param(
            "config: [{key: token, type: string}]\n"
            "transport: {command: node, env: {TOKEN: x}, env_from_config: {TOKEN: token}}",
            ("transport.env_from_config.TOKEN", "TOKEN is set in env too"),
            id="also-in-env",
        ),
        pytest.param(
            "config: [{key: token, type: string}]\ntransport: {command: node, env_from_config: {MCP_HOST_X: token}}",
            ("transport.env_from_config.MCP_HOST_X", "'MCP_HOST_X' is reserved for the host (MCP_HOST_*)"),
            id="reserved-name",
        ),
        pytest.param(
            "config: [{key: token, type: string}]\n"
            "transport: {kind: http, url: 'https://x.example/mcp', env_from_config: {TOKEN: token}}",
            ("transport.env_from_config", "an http transport takes no env_from_config"),
            id="http",
        ),
        pytest.param(
            "config: [{key: n, type: int, secret: true}]",
            ("config.0.secret", "only a string field may be secret"),
            id="secret-int",
        ),
        pytest.param(
            "config: [{key: token, type: string, secret: true, default: x}]",
            ("config.0.default", "a secret field has no default"),
            id="secret-default",
        ),
        pytest.param(
            "role_config: [{key: token, type: string, required: true}]",
            ("role_config.0.required", "only the owner's config (config) has required fields"),
            id="required-role-config",
        ),
    ],
)
def test_bad_config_env_is_refused_naming_the_field(tmp_path: Path, text: str, expected: tuple[str, str]) -> None:
    assert refusal(tmp_path, f"id: demo\n{text}\n") == expected


def test_an_http_transport_takes_headers_config_headers_a_timeout_and_allowed_hosts(tmp_path: Path) -> None:
    folder = write_manifest(
        tmp_path / "plugin",
        """\
        id: demo
        config: [{key: token, type: string, secret: true}]
        transport:
          kind: http
          url: https://MCP.example.com:8443/mcp
          headers: {X-Client: demo}
          headers_from_config: {Authorization: token}
          timeout_s: 12.5
          allowed_hosts: [mcp.example.com, "[::1]"]
        """,
    )
    transport = load_manifest(folder).transport
    assert transport is not None
    assert (transport.headers, transport.headers_from_config) == ({"X-Client": "demo"}, {"Authorization": "token"})
    assert (transport.timeout_s, transport.allowed_hosts) == (12.5, ("mcp.example.com", "[::1]"))
    assert transport.reachable_hosts() == ("mcp.example.com", "[::1]")
    bare = load_manifest(
        write_manifest(tmp_path / "bare", "id: bare\ntransport: {kind: http, url: 'https://a.example/mcp'}")
    )
    assert bare.transport is not None and bare.transport.reachable_hosts() == ("a.example",)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "transport: {kind: http, url: 'https://evil.example/mcp', allowed_hosts: [good.example]}",
            ("transport.url", "its host 'evil.example' is not in allowed_hosts"),
            id="url-host-not-allowed",
        ),
        pytest.param(
            "transport: {kind: http, url: 'https://a.example/mcp', allowed_hosts: ['a.example/x']}",
            (
                "transport.allowed_hosts.0",
                "'a.example/x' is not a host name (or an IP address, an IPv6 one in [brackets])",
            ),
            id="bad-host",
        ),
        pytest.param(
            "transport: {kind: http, url: 'https://a.example/mcp', headers: {Mcp-Session-Id: x}}",
            ("transport.headers.Mcp-Session-Id", "'Mcp-Session-Id' is set by the host's MCP client, not by a manifest"),
            id="reserved-header",
        ),
        pytest.param(
            "transport: {kind: http, url: 'https://a.example/mcp', headers: {X-A: \"a\\nb\"}}",
            ("transport.headers.X-A", "a header value is printable ASCII without control characters, at most 4096"),
            id="header-value-newline",
        ),
        pytest.param(
            "config: [{key: token, type: string}]\n"
            "transport: {kind: http, url: 'https://a.example/mcp', headers: {authorization: x},"
            " headers_from_config: {Authorization: token}}",
            ("transport.headers_from_config.Authorization", "Authorization is set in headers too"),
            id="header-twice",
        ),
        pytest.param(
            "transport: {kind: http, url: 'https://a.example/mcp', headers_from_config: {Authorization: nope}}",
            ("transport.headers_from_config.Authorization", "'nope' is not a key declared in config"),
            id="undeclared-key",
        ),
        pytest.param(
            "transport: {command: node, timeout_s: 5}",
            ("transport.timeout_s", "only an http transport takes timeout_s"),
            id="stdio-timeout",
        ),
        pytest.param(
            "transport: {kind: http, url: 'https://a.example/mcp', timeout_s: 0}",
            ("transport.timeout_s", "Input should be greater than 0"),
            id="zero-timeout",
        ),
        pytest.param(
            "instances: shared\ntransport: {kind: http, url: 'https://a.example/mcp', sign_in: per_visitor}",
            ("transport.sign_in", "per_visitor needs instances: per_session"),
            id="per-visitor-shared",
        ),
        pytest.param(
            "transport: {command: node, sign_in: per_visitor}",
            ("transport.sign_in", "only an http transport takes sign_in"),
            id="stdio-sign-in",
        ),
    ],
)
def test_bad_http_transport_is_refused_naming_the_field(tmp_path: Path, text: str, expected: tuple[str, str]) -> None:
    assert refusal(tmp_path, f"id: demo\n{text}\n") == expected
