"""`mcp-host check` catches the mistakes plugin authors make: every one, in one run, as an error
naming the file and the dotted field; what is only suspect stays a warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from inline_snapshot import snapshot

from mcp_host.app.cli import main
from mcp_host.plugins.loading import load_plugins
from mcp_host.plugins.manifest import MANIFEST_NAME, read_manifest
from tests.hosting import PLUGINS, REPO

MISTAKES = PLUGINS / "mistakes"
MCP_HOST = str(REPO / ".venv" / "bin" / "mcp-host")


def lines(out: str, base: Path) -> list[tuple[str, ...]]:
    """Printed lines as (severity, file relative to `base`, what follows)."""
    return [tuple(line.replace(f"{base.resolve()}/", "").split(": ", 2)) for line in out.splitlines()]


def test_check_lists_every_mistake_of_every_manifest_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(MISTAKES)]) == 1

    out, err = capsys.readouterr()
    assert lines(out, MISTAKES) == snapshot(
        [
            (
                "error",
                "all_five/manifest.yaml",
                "acl: unknown value 'public' (always or role_granted); read as role_granted",
            ),
            (
                "error",
                "all_five/manifest.yaml",
                "quota.tools.1: 'note_purge' is not in visitor_tools; it uses up no quota",
            ),
            (
                "error",
                "all_five/manifest.yaml",
                "quota.config_key: 'max_notes' is not declared in code_config or key_config, where a quota's limit is"
                " set; no quota is enforced",
            ),
            (
                "error",
                "all_five/manifest.yaml",
                "visitor_tool_requires.note_purge: 'note_purge' is not in visitor_tools",
            ),
            ("error", "all_five/manifest.yaml", "transport.args.1: 'srv.py' is not a file inside the plugin folder"),
            (
                "error",
                "command_path/manifest.yaml",
                "transport.command: './bin/serve' is not a file inside the plugin folder",
            ),
            ("error", "load_error/manifest.yaml", "colour: unknown key 'colour'"),
            (
                "error",
                "load_error/manifest.yaml",
                "acl: unknown value 'everyone' (always or role_granted); read as role_granted",
            ),
            (
                "error",
                "outside/manifest.yaml",
                "transport.args.0: '../README.md' is not a file inside the plugin folder",
            ),
            ("warning", "all_five/manifest.yaml", "claim_gate: 'note_send' is not in visitor_tools"),
        ]
    )
    assert err == ""


def test_the_mistakes_load_under_the_host_read_fail_closed() -> None:
    result = read_manifest(MISTAKES / "all_five")

    assert result.manifest is not None
    assert result.manifest.acl == "role_granted"
    assert result.manifest.quota_gate() is None
    assert len(result.mistakes) == 4  # the script is `check`'s to find: loading reads no other file


def test_warnings_alone_stay_warnings_and_check_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "warned"
    folder.mkdir()
    (folder / MANIFEST_NAME).write_text(
        "id: warned\nacl: always\nvisitor_tools: [book]\nrequires: [calendar]\n"
        'visitor_tool_requires: {book: ["mail:send"]}\n'
        "code_config: [{key: max_books, type: int}]\nquota: {config_key: max_books, collection: books}\n"
        "claim_gate: {tool: rebook, phrases: [booked]}\n"
        "transport: {command: python, args: [server.py]}\n",
        encoding="utf-8",
    )
    (folder / "server.py").write_text("", encoding="utf-8")

    assert main(["check", str(folder)]) == 0

    out, _ = capsys.readouterr()
    assert lines(out, tmp_path) == snapshot(
        [
            ("warning", "warned/manifest.yaml", "visitor_tool_requires: 'book' needs 'mail', not in requires"),
            ("warning", "warned/manifest.yaml", "claim_gate: 'rebook' is not in visitor_tools"),
            ("warning", "warned/manifest.yaml", "quota: incomplete (missing subject_field); no quota is enforced"),
            ("ok", "warned"),
        ]
    )


def test_a_script_reached_through_a_link_out_of_the_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "elsewhere.py").write_text("", encoding="utf-8")
    folder = tmp_path / "linked"
    folder.mkdir()
    (folder / "server.py").symlink_to(tmp_path / "elsewhere.py")
    (folder / MANIFEST_NAME).write_text(
        "id: linked\ntransport: {command: python, args: [server.py]}\n", encoding="utf-8"
    )

    assert main(["check", str(folder)]) == 1

    out, _ = capsys.readouterr()
    assert lines(out, tmp_path) == snapshot(
        [("error", "linked/manifest.yaml", "transport.args.0: 'server.py' is not a file inside the plugin folder")]
    )


def test_check_as_a_command_exits_1_listing_every_error() -> None:
    done = subprocess.run([MCP_HOST, "check", str(MISTAKES)], capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 1
    assert [line.split(": ", 1)[0] for line in done.stdout.splitlines()] == ["error"] * 9 + ["warning"]
    assert done.stderr == ""


def linked_venv(folder: Path, target: Path, *, whole: bool = False) -> Path:
    """A plugin folder whose command is `venv/bin/python`, a link to `target` (a plugin venv's
    interpreter); `whole`: the `venv` folder itself is a link out of the plugin folder."""
    folder.mkdir()
    if whole:
        (folder.parent / "elsewhere" / "bin").mkdir(parents=True)
        (folder.parent / "elsewhere" / "bin" / "python").symlink_to(target)
        (folder / "venv").symlink_to(folder.parent / "elsewhere")
    else:
        (folder / "venv" / "bin").mkdir(parents=True)
        (folder / "venv" / "bin" / "python").symlink_to(target)
    (folder / MANIFEST_NAME).write_text(
        f"id: {folder.name}\ntransport: {{command: venv/bin/python, args: [-m, server]}}\n", encoding="utf-8"
    )
    return folder


def test_check_and_loading_agree_on_a_program_linked_out_of_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = Path(sys.executable).resolve()  # outside the folder, as a plugin venv's base interpreter
    own = linked_venv(tmp_path / "own", python)
    borrowed = linked_venv(tmp_path / "borrowed", python, whole=True)

    codes = [main(["check", str(own)]), main(["check", str(borrowed)])]
    loaded = {p.manifest.id: [m.message for m in p.mistakes] for p in load_plugins(None, [own, borrowed]).plugins}

    out, _ = capsys.readouterr()
    assert codes == [0, 1]
    refusal = f"{borrowed}/{MANIFEST_NAME}: transport.command: 'venv/bin/python' is not a file inside the plugin folder"
    assert out.splitlines() == [f"ok: {own}", f"error: {refusal}"]
    assert loaded == {"own": [], "borrowed": [refusal]}  # the host logs at start what check reports
