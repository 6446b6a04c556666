"""The plugin guide (`mcp_host_kit/README.md`) runs as written: its example plugins are written
out from its code blocks, linted with `mcp-host check`, run standalone as stdio children (and
the minimal one under a real host), its commands are run, and its manifest table names every
field of the manifest model."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import TextContent, TextResourceContents
from pydantic import BaseModel

import mcp_host_kit
from mcp_host.plugins.manifest import Manifest, read_manifest
from tests.hosting import REPO, host_settings, running_host

pytestmark = pytest.mark.anyio

ROOT = REPO
GUIDE = ROOT / "mcp_host_kit" / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r"<!-- (.*) -->")


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    marker: str | None  # the HTML comment right above the fence, if any
    line: int


def blocks() -> list[Block]:
    guide = GUIDE.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(guide):
        above = _MARKER.fullmatch(guide[: match.start()].rstrip().splitlines()[-1])
        marker = above.group(1) if above else None
        found.append(Block(match.group(1), match.group(2), marker, guide.count("\n", 0, match.start()) + 1))
    return found


def files() -> dict[str, str]:
    """The example plugins' files, by the path the guide saves them at."""
    return {b.marker.removeprefix("file: "): b.text for b in blocks() if b.marker and b.marker.startswith("file: ")}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A stand-in for the repository's root: the guide's files written out, and `.venv`."""
    for relative, text in files().items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text, encoding="utf-8")
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    return tmp_path


def standalone(folder: Path) -> StdioServerParameters:
    # The SDK passes an allow-listed environment only: no MCP_HOST_SOCKET, so the kit emulates.
    kit_root = str(Path(mcp_host_kit.__file__).resolve().parent.parent)
    return StdioServerParameters(command=sys.executable, args=["server.py"], cwd=folder, env={"PYTHONPATH": kit_root})


def test_every_code_block_of_the_guide_is_an_example_file_or_a_command_that_says_whether_it_runs() -> None:
    found = blocks()
    untested = [
        (b.line, b.lang, b.marker)
        for b in found
        if not (
            (b.lang in ("python", "yaml", "html") and b.marker and b.marker.startswith("file: "))
            or (b.lang == "sh" and b.marker and (b.marker == "test: run" or b.marker.startswith("test: not run (")))
            or (b.lang == "" and b.marker is None)  # a folder listing
        )
    ]
    assert untested == []
    assert sorted(files()) == snapshot(
        [
            "my-plugins/guestbook/manifest.yaml",
            "my-plugins/guestbook/server.py",
            "my-plugins/hello_card/card.html",
            "my-plugins/hello_card/manifest.yaml",
            "my-plugins/hello_card/server.py",
            "my-plugins/notes/manifest.yaml",
            "my-plugins/notes/server.py",
            "my-plugins/tiny_calendar/manifest.yaml",
            "my-plugins/tiny_calendar/server.py",
        ]
    )


def test_the_example_plugins_pass_check_without_a_mistake_or_a_warning(tree: Path) -> None:
    done = subprocess.run(
        [".venv/bin/mcp-host", "check", "my-plugins"], cwd=tree, capture_output=True, text=True, timeout=60
    )

    assert (done.returncode, done.stdout, done.stderr) == (0, "ok: my-plugins\n", "")
    for folder in sorted((tree / "my-plugins").iterdir()):
        result = read_manifest(folder)
        assert (result.errors, result.mistakes, result.warnings) == ((), (), ()), folder.name


def test_the_example_servers_compile_and_import_only_what_a_plugin_has() -> None:
    allowed = {"typing", "pathlib", "mcp", "mcp_host_kit"}
    for relative, text in files().items():
        if relative.endswith(".py"):
            compile(text, relative, "exec")
            imported = {m.split(".")[0] for m in re.findall(r"^(?:from|import) ([\w.]+)", text, re.MULTILINE)}
            assert imported <= allowed, relative


@pytest.mark.parametrize("block", [b for b in blocks() if b.marker == "test: run"], ids=lambda b: f"line{b.line}")
def test_the_commands_the_guide_runs_work_as_written(tree: Path, block: Block) -> None:
    for command in block.text.splitlines():
        if command.startswith("npx ") and shutil.which("npx") is None:
            pytest.skip("Node.js (npx) is not installed")
        done = subprocess.run(["bash", "-c", command], cwd=tree, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        if "inspector --cli" in command and "tools/call" in command:
            answer = json.loads(done.stdout)
            assert answer["isError"] is False
            assert re.fullmatch(r"[0-9a-f-]{36}", answer["structuredContent"]["id"])


async def test_the_minimal_plugin_runs_standalone(tree: Path) -> None:
    async with Client(standalone(tree / "my-plugins" / "notes"), read_timeout_seconds=30) as client:
        added = await client.call_tool("note_add", {"text": "hello"})
        counted = await client.call_tool("note_count", {})
        mistyped = await client.call_tool("note_add", {})

    assert (added.is_error, counted.structured_content) == (False, {"count": 1})
    assert (mistyped.is_error, mistyped.structured_content) == snapshot(
        (True, {"code": "invalid_arguments", "message": "missing or mistyped: text"})
    )


async def test_the_owner_tool_example_hides_its_tool_and_answers_the_owner_alone(tree: Path) -> None:
    owner = {mcp_host_kit.SESSION_KEY: {"owner_id": "test-owner", "session_id": None, "mode": "owner"}}
    async with Client(standalone(tree / "my-plugins" / "guestbook"), read_timeout_seconds=30) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        await client.call_tool("guestbook_sign", {"message": "lovely place"})
        refused = await client.call_tool("guestbook_read", {})
        read = await client.call_tool("guestbook_read", {"limit": 5}, meta=owner)  # type: ignore[arg-type]

    assert listed == ["guestbook_sign"]
    assert (refused.is_error, refused.structured_content) == snapshot(
        (True, {"code": "denied", "message": "the guestbook is the owner's to read"})
    )
    assert read.is_error is False and read.structured_content is not None
    assert [{k: v for k, v in e.items() if k != "at"} for e in read.structured_content["entries"]] == [
        {"message": "lovely place", "name": None}
    ]


async def test_the_connector_example_reads_the_connection_of_the_call(tree: Path) -> None:
    connection = {
        mcp_host_kit.CONNECTION_KEY: {
            "owner_id": "test-owner",
            "category": "calendar",
            "settings": {"url": "https://calendar.example/", "password": "s3cret"},
        }
    }
    async with Client(standalone(tree / "my-plugins" / "tiny_calendar"), read_timeout_seconds=30) as client:
        bare = await client.call_tool("list_events", {"start": "2026-12-01", "end": "2026-12-02"})
        events = await client.call_tool(
            "list_events",
            {"start": "2026-12-01", "end": "2026-12-02"},
            meta=connection,  # type: ignore[arg-type]
        )
        checked = await client.call_tool("connected", {}, meta=connection)  # type: ignore[arg-type]

    assert (bare.is_error, (bare.structured_content or {}).get("code")) == (True, "unconfigured")
    assert (events.is_error, events.structured_content) == (False, {"events": []})
    assert checked.structured_content == {"ok": True, "detail": "calendar at https://calendar.example/"}


async def test_the_app_example_serves_its_card_and_the_card_calls_greet(tree: Path) -> None:
    folder = tree / "my-plugins" / "hello_card"
    async with Client(standalone(folder), read_timeout_seconds=30) as client:
        metas = {tool.name: tool.meta for tool in (await client.list_tools()).tools}
        (content,) = (await client.read_resource("ui://hello.card/card.html")).contents
        greeted = await client.call_tool("greet", {"name": "Ada"})  # what the card sends
    html = (folder / "card.html").read_text(encoding="utf-8")

    card = {"ui": {"resourceUri": "ui://hello.card/card.html"}}
    assert metas == {"show_card": card, "greet": card}
    assert isinstance(content, TextResourceContents) and content.mime_type == mcp_host_kit.APP_MIME_TYPE
    assert content.text == html
    assert 'request("tools/call", { name: "greet", arguments: { name } })' in html
    assert greeted.content == [TextContent(type="text", text="Hello, Ada!")]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: it checks the card's script")
def test_the_app_examples_script_parses(tmp_path: Path) -> None:
    (script,) = re.findall(r"<script>(.*?)</script>", files()["my-plugins/hello_card/card.html"], re.DOTALL)
    (tmp_path / "card.js").write_text(script, encoding="utf-8")
    done = subprocess.run(["node", "--check", str(tmp_path / "card.js")], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr[-2000:]


async def test_the_minimal_plugin_runs_under_a_real_host(tree: Path, tmp_path: Path, database_url: str) -> None:
    settings = host_settings(tmp_path, database_url, [str(tree / "my-plugins" / "notes")])  # an absolute path
    async with running_host(settings) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            added = await client.call_tool("note_add", {"text": "hello"})
            counted = await client.call_tool("note_count", {})

    assert added.is_error is False
    assert counted.structured_content == {"count": 1}


def _rows(section: str) -> list[list[str]]:
    """The cells of the first table under the `## section` heading of the guide."""
    guide = GUIDE.read_text(encoding="utf-8")
    body = guide[guide.index(f"## {section}\n") :]
    body = body[: body.index("\n## ", 1)]
    rows = [line for line in body.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows[1:]]


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model inside a field's annotation, and whether it is a list of them."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_of(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            model, listed = _model_of(arg)
            if model is not None:
                return model, listed
        return None, False
    if origin is tuple:
        model, _ = _model_of(typing.get_args(annotation)[0])
        return model, True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def _fields(model: type[BaseModel], prefix: str, seen: set[type[BaseModel]]) -> list[str]:
    """Every dotted key of `model` (a list's items as `key[].field`); a model used under several
    keys (the four config lists) is documented once, under the first."""
    keys = []
    for name, field in model.model_fields.items():
        keys.append(f"{prefix}{name}")
        inner, listed = _model_of(field.annotation)
        if inner is not None and inner not in seen:
            seen.add(inner)
            keys += _fields(inner, f"{prefix}{name}{'[]' if listed else ''}.", seen)
    return keys


def test_the_manifest_table_lists_every_field_of_the_manifest_model_with_its_type_and_an_example() -> None:
    rows = _rows("The manifest")
    documented = [name for row in rows for name in re.findall(r"`([^`]+)`", row[0])]

    assert [key for key in _fields(Manifest, "", set()) if key not in documented] == []
    assert [row[0] for row in rows if len(row) != 4 or not all(row)] == []  # a type, an example, a meaning
    assert len(documented) == len(set(documented))


def test_the_api_table_names_what_a_plugin_builds_or_decorates_with() -> None:
    names = " ".join(row[0] for row in _rows("The API"))

    missing = [
        name for name in ("Kit(", "PluginServer(", "mcp.app(", "@tool_errors", "error_result(") if name not in names
    ]
    assert missing == []


def test_the_guide_says_that_public_sessions_are_never_counted_against_a_quota() -> None:
    assert "**A public session is never counted against a quota**" in GUIDE.read_text(encoding="utf-8")
