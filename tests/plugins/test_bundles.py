"""MCP Bundles: the manifest model, `${…}` resolution, and extraction that refuses every hostile
archive with one sentence before writing anything."""

from __future__ import annotations

import json
import stat
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import (
    BundleCaps,
    Launch,
    extract_bundle,
    parse_bundle_manifest,
    resolve_launch,
)


def manifest(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "manifest_version": "0.3",
        "name": "hello",
        "display_name": "Hello",
        "version": "1.2.0",
        "description": "Says hello.",
        "author": {"name": "Ann", "email": "ann@example.org"},
        "icon": "icon.png",
        "_meta": {"com.example": {"x": 1}},
        "server": {
            "type": "node",
            "entry_point": "server/index.js",
            "mcp_config": {
                "command": "node",
                "args": ["${__dirname}/server/index.js", "--dirs", "${user_config.dirs}", "--v=${user_config.verbose}"],
                "env": {"API_KEY": "${user_config.api_key}", "SEP": "a${/}b${pathSeparator}c"},
            },
        },
        "user_config": {
            "api_key": {
                "type": "string",
                "title": "API key",
                "description": "Key",
                "required": True,
                "sensitive": True,
            },
            "dirs": {"type": "directory", "title": "Folders", "description": "Where", "multiple": True},
            "verbose": {"type": "boolean", "title": "Verbose", "description": "Talk", "default": False},
        },
        "tools": [{"name": "hello", "description": "Say hello"}],
    }
    document.update(changes)
    return document


def server(**changes: Any) -> dict[str, Any]:
    return {**manifest()["server"], **changes}


def member(name: str, mode: int | None = None) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    if mode is not None:
        info.external_attr = mode << 16
    return info


def make_bundle(
    path: Path, members: Sequence[tuple[zipfile.ZipInfo | str, bytes]] = (), document: object = None
) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("manifest.json", json.dumps(manifest() if document is None else document))
        archive.writestr(member("server/index.js", stat.S_IFREG | 0o755), b"console.log('hi')\n")
        for name, data in members:
            archive.writestr(name, data)
    return path


def refusal(tmp_path: Path, bundle: Path, caps: BundleCaps | None = None) -> str:
    dest = tmp_path / "out" / "hello"
    dest.parent.mkdir(exist_ok=True)
    with pytest.raises(InvalidArguments) as caught:
        extract_bundle(bundle, dest, caps)
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []  # no staging folder left behind either
    return caught.value.message


def test_valid_bundle_extracts_and_returns_its_manifest(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b.mcpb", [("README.md", b"# hi\n"), ("lib/", b"")])
    dest = tmp_path / "plugin"

    got = extract_bundle(bundle, dest)

    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == snapshot(
        ["README.md", "lib", "manifest.json", "server", "server/index.js"]
    )
    assert (dest / "server/index.js").stat().st_mode & 0o777 == 0o755
    assert (dest / "README.md").stat().st_mode & 0o777 == 0o644
    assert got.model_dump(exclude={"user_config"}) == snapshot(
        {
            "manifest_version": "0.3",
            "name": "hello",
            "display_name": "Hello",
            "version": "1.2.0",
            "description": "Says hello.",
            "author": {"name": "Ann"},
            "server": {
                "type": "node",
                "entry_point": "server/index.js",
                "mcp_config": {
                    "command": "node",
                    "args": [
                        "${__dirname}/server/index.js",
                        "--dirs",
                        "${user_config.dirs}",
                        "--v=${user_config.verbose}",
                    ],
                    "env": {"API_KEY": "${user_config.api_key}", "SEP": "a${/}b${pathSeparator}c"},
                },
            },
            "tools": [{"name": "hello", "description": "Say hello"}],
        }
    )
    assert got.user_config["api_key"].sensitive and got.user_config["api_key"].required


def test_resolve_launch_substitutes_dirname_settings_and_defaults() -> None:
    parsed = parse_bundle_manifest(json.dumps(manifest()).encode())

    launch = resolve_launch(parsed, {"api_key": "s3cret", "dirs": ["/data/a", "/data/b"]})

    assert launch == Launch(
        command="node",
        args=("/plugin/server/index.js", "--dirs", "/data/a", "/data/b", "--v=false"),
        env={"API_KEY": "s3cret", "SEP": "a/b/c"},
    )


def test_resolve_launch_drops_an_unset_optional_whole_argument() -> None:
    parsed = parse_bundle_manifest(json.dumps(manifest()).encode())
    assert resolve_launch(parsed, {"api_key": "k"}, install_dir="/x").args == (
        "/x/server/index.js",
        "--dirs",
        "--v=false",
    )


@pytest.mark.parametrize(
    ("document", "values", "message"),
    [
        (manifest(), {}, "the bundle's setting 'api_key' is required and has no value."),
        (
            manifest(server=server(mcp_config={"command": "node", "args": ["${HOME}/x"]})),
            {},
            "the bundle uses the variable '${HOME}', which the host does not provide.",
        ),
        (
            manifest(server=server(mcp_config={"command": "node", "args": ["${user_config.nope}"]})),
            {},
            "the bundle's mcp_config uses the setting 'nope', which its user_config lacks.",
        ),
        (
            manifest(server=server(mcp_config={"command": "node", "args": ["a${b"]})),
            {},
            "the bundle has a `${` that does not open a variable the host knows.",
        ),
        (
            manifest(server=server(mcp_config={"command": "node", "env": {"D": "${user_config.dirs}"}})),
            {"api_key": "k", "dirs": ["/a", "/b"]},
            "the setting 'dirs' has several values, which can only stand alone as an argument.",
        ),
        (
            manifest(server={"type": "uv", "entry_point": "server/index.js"}),
            {},
            "the bundle declares no mcp_config to start its server with.",
        ),
    ],
)
def test_resolve_launch_refuses(document: dict[str, Any], values: dict[str, Any], message: str) -> None:
    parsed = parse_bundle_manifest(json.dumps(document).encode())
    with pytest.raises(InvalidArguments) as caught:
        resolve_launch(parsed, values)
    assert caught.value.message == message


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            manifest(server=server(type="deno")),
            "the bundle's manifest.json is invalid at server.type: Input should be 'node', 'python', 'binary' or 'uv'.",
        ),
        (
            manifest(server={"type": "node", "entry_point": "server/index.js"}),
            "the bundle's manifest.json has no server.mcp_config, which a node server needs.",
        ),
        (
            manifest(server=server(entry_point="../outside.js")),
            "the bundle's manifest.json is invalid at server.entry_point: "
            "Value error, the path '../outside.js' has an empty, `.` or `..` part.",
        ),
        (manifest(version=None), "the bundle's manifest.json is invalid at version: Input should be a valid string."),
        ([1], "the bundle's manifest.json is not a JSON object."),
    ],
)
def test_invalid_manifest_is_refused(tmp_path: Path, document: object, message: str) -> None:
    assert refusal(tmp_path, make_bundle(tmp_path / "b.mcpb", document=document)) == message


def test_duplicate_keys_in_manifest_are_refused() -> None:
    with pytest.raises(InvalidArguments) as caught:
        parse_bundle_manifest(b'{"name": "a", "name": "b"}')
    assert caught.value.message == "the bundle's manifest.json is not usable: it repeats the key 'name'."


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("/etc/passwd", b"x")], "the bundle's member '/etc/passwd' is absolute."),
        ([("../evil", b"x")], "the bundle's member '../evil' has an empty, `.` or `..` part."),
        ([("lib/../../evil", b"x")], "the bundle's member 'lib/../../evil' has an empty, `.` or `..` part."),
        ([("lib\\..\\evil", b"x")], "the bundle's member 'lib\\\\..\\\\evil' contains a backslash."),
        ([("C:/evil", b"x")], "the bundle's member 'C:/evil' starts with a drive letter."),
        ([("a\x01b", b"x")], "the bundle's member 'a\\x01b' contains a control character."),
        ([(member("link", stat.S_IFLNK | 0o777), b"/etc")], "the bundle's member 'link' is a symbolic link."),
        ([(member("dev", stat.S_IFCHR | 0o600), b"")], "the bundle's member 'dev' is a device, pipe or socket."),
        ([(member("fifo", stat.S_IFIFO | 0o600), b"")], "the bundle's member 'fifo' is a device, pipe or socket."),
        ([("README.md", b"a"), ("README.md", b"b")], "the bundle has the name 'README.md' twice."),
        ([("lib", b"a"), ("lib/x.js", b"b")], "the bundle's member 'lib/x.js' sits under a file."),
    ],
)
def test_hostile_member_is_refused_before_anything_is_written(
    tmp_path: Path, members: list[tuple[zipfile.ZipInfo | str, bytes]], message: str
) -> None:
    with pytest.warns(UserWarning, match="Duplicate name") if message.endswith("twice.") else _nothing():
        bundle = make_bundle(tmp_path / "b.mcpb", members)
    assert refusal(tmp_path, bundle) == message


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _patched(path: Path, placeholder: bytes, raw: bytes) -> Path:
    data = path.read_bytes()
    assert data.count(placeholder) == 2  # the local header and the central directory
    path.write_bytes(data.replace(placeholder, raw))
    return path


def test_name_with_nul_is_refused(tmp_path: Path) -> None:
    bundle = _patched(make_bundle(tmp_path / "b.mcpb", [("aXb.js", b"x")]), b"aXb.js", b"a\x00b.js")
    assert refusal(tmp_path, bundle) == "the bundle's member 'a\\x00b.js' contains a control character."


def test_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    bundle = _patched(make_bundle(tmp_path / "b.mcpb", [("XXXX", b"x")]), b"XXXX", b"\xff\xfe\xfd\xfc")
    assert refusal(tmp_path, bundle) == "the bundle has a file name that is not valid UTF-8: '\\xa0■²ⁿ'."


def test_flagged_utf8_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    bundle = _patched(make_bundle(tmp_path / "b.mcpb", [("é.js", b"x")]), "é".encode(), b"\xff\xfe")
    assert refusal(tmp_path, bundle) == "the bundle has a file name that is not valid UTF-8."


@pytest.mark.parametrize(
    ("caps", "members", "message"),
    [
        (BundleCaps(max_members=3), [("a", b""), ("b", b"")], "the bundle has 4 members; the limit is 3."),
        (
            BundleCaps(max_file_bytes=1000),
            [("big", b"x" * 1001)],
            "the bundle's member 'big' is 1001 bytes; the limit is 1000.",
        ),
        (
            BundleCaps(max_total_bytes=1500),
            [("a", b"x" * 800), ("b", b"y" * 800)],
            "the bundle unpacks to 2501 bytes; the limit is 1500.",
        ),
        (
            BundleCaps(max_ratio=100, ratio_floor=1024),
            [("bomb", b"\0" * 1_000_000)],
            "the bundle's member 'bomb' is compressed beyond 100 to 1.",
        ),
    ],
)
def test_caps_are_enforced(tmp_path: Path, caps: BundleCaps, members: list[tuple[str, bytes]], message: str) -> None:
    assert refusal(tmp_path, make_bundle(tmp_path / "b.mcpb", members), caps) == message


def test_member_whose_sizes_lie_is_refused_and_the_partial_folder_removed(tmp_path: Path) -> None:
    bundle = tmp_path / "b.mcpb"
    with zipfile.ZipFile(bundle, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("manifest.json", json.dumps(manifest()))
        archive.writestr("server/index.js", b"A" * 64)
    data = bytearray(bundle.read_bytes())
    # Shrink the declared size of server/index.js in the central directory (stored: sizes at +20, +24).
    central = data.rfind(b"PK\x01\x02")
    data[central + 20 : central + 28] = (8).to_bytes(4, "little") * 2
    bundle.write_bytes(bytes(data))
    # zipfile reads only the declared bytes, so the checksum fails after the file was begun.
    assert refusal(tmp_path, bundle) == "the bundle is not a readable zip archive."


def test_missing_manifest_entry_point_and_non_zip_are_refused(tmp_path: Path) -> None:
    no_manifest = tmp_path / "none.mcpb"
    with zipfile.ZipFile(no_manifest, "w") as archive:
        archive.writestr("server/index.js", b"")
    assert refusal(tmp_path, no_manifest) == "the bundle has no manifest.json at its root."

    elsewhere = make_bundle(tmp_path / "e.mcpb", document=manifest(server=server(entry_point="server/main.js")))
    assert refusal(tmp_path, elsewhere) == "the bundle's entry_point 'server/main.js' is not a file in the bundle."

    (tmp_path / "junk.mcpb").write_bytes(b"not a zip")
    assert refusal(tmp_path, tmp_path / "junk.mcpb") == "the bundle is not a readable zip archive."
    assert refusal(tmp_path, tmp_path / "absent.mcpb") == "the bundle 'absent.mcpb' is not a file."


def test_existing_destination_is_left_alone(tmp_path: Path) -> None:
    dest = tmp_path / "plugin"
    dest.mkdir()
    (dest / "keep").write_text("mine")
    with pytest.raises(InvalidArguments) as caught:
        extract_bundle(make_bundle(tmp_path / "b.mcpb"), dest)
    assert caught.value.message == "the folder 'plugin' exists already."
    assert [p.name for p in dest.iterdir()] == ["keep"]
