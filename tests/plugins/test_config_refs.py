"""`${config.KEY}` in a manifest's arguments and environment: what loads, what is refused with
the field named, and what one start of a child gets from the owner's values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from inline_snapshot import snapshot

from mcp_host.plugins import ChildConfig, Manifest, config_keys, needs_config, resolve_config
from mcp_host.plugins.manifest import MANIFEST_NAME, read_manifest

CONFIG = [
    {"key": "greeting", "type": "string", "default": "Hello"},
    {"key": "mark", "type": "string"},
    {"key": "count", "type": "int", "default": 3},
    {"key": "loud", "type": "bool", "default": False},
    {"key": "folders", "type": "string_list"},
    {"key": "token", "type": "string", "secret": True},
]


def manifest(transport: dict[str, Any]) -> Manifest:
    return Manifest.model_validate({"id": "demo.refs", "config": CONFIG, "transport": transport})


REFERRING = manifest(
    {
        "command": "node",
        "args": ["server.js", "--mark", "${config.mark}", "--count=${config.count}", "${config.folders}"],
        "env": {"GREETING": "${config.greeting}", "AUTH": "Bearer ${config.token}", "FIXED": "x"},
        "env_from_config": {"LOUD": "loud"},
    }
)


def test_references_name_the_keys_a_start_reads() -> None:
    assert config_keys(REFERRING.transport) == {"mark", "count", "folders", "greeting", "token", "loud"}
    assert needs_config(REFERRING)
    assert not needs_config(manifest({"command": "node", "args": ["${HOME}"]}))


def test_values_are_put_where_the_references_stand() -> None:
    values = {"greeting": "Howdy", "mark": "?", "count": 7, "loud": True, "folders": ["/a", "/b"], "token": "t0k"}
    assert resolve_config(REFERRING.transport, values) == ChildConfig(
        env={"LOUD": "true", "GREETING": "Howdy", "AUTH": "Bearer t0k"},
        args=("server.js", "--mark", "?", "--count=7", "/a", "/b"),
    )


def test_an_unset_value_leaves_a_whole_reference_out_and_a_part_empty() -> None:
    values = {"greeting": None, "mark": None, "count": 3, "loud": None, "folders": None, "token": None}
    assert resolve_config(REFERRING.transport, values) == ChildConfig(
        env={"AUTH": "Bearer "}, args=("server.js", "--mark", "--count=3")
    )


def problems(tmp_path: Path, transport: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, problem) of each error `read_manifest` finds in a manifest with `transport`."""
    body = {"id": "demo.refs", "config": CONFIG, "transport": transport}
    (tmp_path / MANIFEST_NAME).write_text(yaml.safe_dump(body), encoding="utf-8")
    result = read_manifest(tmp_path)
    assert result.manifest is None
    return [(error.field, error.problem) for error in result.errors]


def test_a_reference_the_host_cannot_honour_does_not_load_naming_its_field(tmp_path: Path) -> None:
    found = {
        "undeclared": problems(tmp_path, {"command": "node", "args": ["--key=${config.nope}"]}),
        "secret argument": problems(tmp_path, {"command": "node", "args": ["s.js", "${config.token}"]}),
        "list in env": problems(tmp_path, {"command": "node", "env": {"F": "${config.folders}"}}),
        "list in text": problems(tmp_path, {"command": "node", "args": ["--f=${config.folders}"]}),
        "malformed": problems(tmp_path, {"command": "node", "args": ["${config.Greeting}"]}),
        "command": problems(tmp_path, {"command": "${config.mark}"}),
    }
    assert found == snapshot(
        {
            "undeclared": [("transport.args.0", "${config.nope}: 'nope' is not a key declared in config")],
            "secret argument": [
                ("transport.args.1", "${config.token}: a secret never goes on a command line; pass it in env")
            ],
            "list in env": [("transport.env.F", "${config.folders}: a string_list stands alone as an argument")],
            "list in text": [("transport.args.0", "${config.folders}: a string_list stands alone as an argument")],
            "malformed": [
                ("transport.args.0", "`${config.` opens a reference: ${config.KEY} with KEY a key of config")
            ],
            "command": [("transport.command", "the command is fixed: ${config.KEY} goes in args or env")],
        }
    )
