"""Finding plugin folders, loading builtins and extras, linting with `check_paths`."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot

from mcp_host.errors import ManifestError
from mcp_host.plugins.loading import (
    CheckReport,
    LoadReport,
    check_paths,
    declared_collisions,
    load_plugins,
    plugin_folders,
)
from mcp_host.plugins.manifest import MANIFEST_NAME
from tests.hosting import PLUGINS

BAD = PLUGINS / "bad"


def write_plugin(folder: Path, plugin_id: str, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST_NAME).write_text(f"id: {plugin_id}\n{extra}", encoding="utf-8")
    return folder


def ids(report: LoadReport) -> list[str]:
    return [plugin.manifest.id for plugin in report.plugins]


def problems(errors: tuple[ManifestError, ...] | list[ManifestError], base: Path) -> list[tuple[str, str, str]]:
    """Errors as (path relative to `base`, field, problem), for snapshots."""
    shown = str(base.resolve())
    return [
        (
            Path(e.path).resolve().relative_to(base.resolve()).as_posix(),
            e.field,
            e.problem.replace(shown, "<base>"),
        )
        for e in errors
    ]


def test_capabilities_like_root_lists_each_plugin_subfolder(tmp_path: Path) -> None:
    write_plugin(tmp_path / "b_plugin", "b")
    write_plugin(tmp_path / "a_plugin", "a")
    write_plugin(tmp_path / ".hidden", "hidden")
    (tmp_path / "notes").mkdir()
    (tmp_path / "README.md").write_text("not a plugin\n", encoding="utf-8")

    assert plugin_folders(tmp_path) == [(tmp_path / "a_plugin").resolve(), (tmp_path / "b_plugin").resolve()]


def test_folder_holding_a_manifest_is_a_single_plugin(tmp_path: Path) -> None:
    write_plugin(tmp_path, "outer")
    write_plugin(tmp_path / "inner", "inner")

    assert plugin_folders(tmp_path) == [tmp_path.resolve()]


def test_missing_root_has_no_plugin_folders(tmp_path: Path) -> None:
    assert plugin_folders(tmp_path / "nowhere") == []


def test_builtins_and_extras_load_sorted_by_id_with_resolved_folders(tmp_path: Path) -> None:
    write_plugin(tmp_path / "builtin" / "zeta", "zeta")
    write_plugin(tmp_path / "extra" / "alpha", "alpha", "acl: public\n")
    single = write_plugin(tmp_path / "single", "mid")
    (tmp_path / "x").mkdir()

    report = load_plugins(tmp_path / "builtin", [tmp_path / "extra", tmp_path / "x" / ".." / "single"])

    assert report.errors == ()
    assert [(p.manifest.id, p.builtin, p.folder, [m.message for m in p.mistakes]) for p in report.plugins] == [
        (
            "alpha",
            False,
            (tmp_path / "extra" / "alpha").resolve(),
            [
                f"{(tmp_path / 'extra' / 'alpha').resolve() / MANIFEST_NAME}: acl:"
                " unknown value 'public' (always or role_granted); read as role_granted"
            ],
        ),
        ("mid", False, single.resolve(), []),
        ("zeta", True, (tmp_path / "builtin" / "zeta").resolve(), []),
    ]


def test_broken_extra_plugin_is_skipped_and_reported_while_good_ones_load(tmp_path: Path) -> None:
    write_plugin(tmp_path / "extra" / "good", "good")
    write_plugin(tmp_path / "extra" / "broken", "broken", "colour: red\nvisitor_tools: [book it]\n")

    report = load_plugins(None, [tmp_path / "extra"])

    assert ids(report) == ["good"]
    assert problems(report.errors, tmp_path) == snapshot(
        [
            (
                "extra/broken/manifest.yaml",
                "visitor_tools.0",
                "'book it' is not a tool name (A-Z a-z 0-9 _ -, at most 64)",
            ),
            ("extra/broken/manifest.yaml", "colour", "unknown key 'colour'"),
        ]
    )


def test_broken_builtin_stops_the_load(tmp_path: Path) -> None:
    write_plugin(tmp_path / "builtin" / "good", "good")
    write_plugin(tmp_path / "builtin" / "broken", "Broken")

    with pytest.raises(ManifestError) as caught:
        load_plugins(tmp_path / "builtin", [])

    assert (caught.value.path, caught.value.field) == (
        str((tmp_path / "builtin" / "broken" / MANIFEST_NAME).resolve()),
        "id",
    )


def test_missing_builtin_root_stops_the_load(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        load_plugins(tmp_path / "nowhere", [])

    assert caught.value.path == str(tmp_path / "nowhere")


def test_two_builtins_with_one_id_stop_the_load(tmp_path: Path) -> None:
    write_plugin(tmp_path / "builtin" / "one", "same")
    write_plugin(tmp_path / "builtin" / "two", "same")

    with pytest.raises(ManifestError) as caught:
        load_plugins(tmp_path / "builtin", [])

    assert caught.value.field == "id"
    assert caught.value.path == str((tmp_path / "builtin" / "two" / MANIFEST_NAME).resolve())


def test_extra_plugin_with_a_builtin_id_is_skipped_and_the_builtin_wins(tmp_path: Path) -> None:
    write_plugin(tmp_path / "builtin" / "ask", "ask")
    write_plugin(tmp_path / "extra" / "ask_copy", "ask")

    report = load_plugins(tmp_path / "builtin", [tmp_path / "extra"])

    assert [(p.manifest.id, p.builtin) for p in report.plugins] == [("ask", True)]
    assert [(e.path, e.field) for e in report.errors] == [(str(tmp_path / "extra" / "ask_copy" / MANIFEST_NAME), "id")]
    assert "is the id of the builtin plugin" in report.errors[0].problem


def test_two_extras_with_one_id_are_both_skipped(tmp_path: Path) -> None:
    write_plugin(tmp_path / "one" / "p", "twin")
    write_plugin(tmp_path / "two" / "p", "twin")
    write_plugin(tmp_path / "two" / "other", "other")

    report = load_plugins(None, [tmp_path / "one", tmp_path / "two"])

    assert ids(report) == ["other"]
    assert problems(report.errors, tmp_path) == snapshot(
        [
            (
                "one/p/manifest.yaml",
                "id",
                "'twin' is also the id of <base>/two/p",
            ),
            (
                "two/p/manifest.yaml",
                "id",
                "'twin' is also the id of <base>/one/p",
            ),
        ]
    )


def test_same_folder_given_twice_loads_once(tmp_path: Path) -> None:
    write_plugin(tmp_path / "extra" / "p", "p")

    report = load_plugins(None, [tmp_path / "extra", tmp_path / "extra" / "p"])

    assert (ids(report), report.errors) == (["p"], ())


def test_builtin_root_given_again_as_an_extra_root_is_not_a_duplicate(tmp_path: Path) -> None:
    write_plugin(tmp_path / "builtin" / "p", "p")

    report = load_plugins(tmp_path / "builtin", [tmp_path / "builtin"])

    assert ([(p.manifest.id, p.builtin) for p in report.plugins], report.errors) == ([("p", True)], ())


def test_missing_or_empty_extra_root_is_an_error_entry_not_an_exception(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x", encoding="utf-8")
    write_plugin(tmp_path / "extra" / "p", "p")

    report = load_plugins(None, [tmp_path / "nowhere", tmp_path / "empty", tmp_path / "file.txt", tmp_path / "extra"])

    assert ids(report) == ["p"]
    assert problems(report.errors, tmp_path) == snapshot(
        [
            ("nowhere", "", "no such folder"),
            ("empty", "", "no plugin folders (no manifest.yaml here or one level down)"),
            ("file.txt", "", "not a folder"),
        ]
    )


def test_check_paths_reports_every_problem_across_folders() -> None:
    errors = check_paths([BAD]).errors

    assert problems(errors, BAD) == snapshot(
        [
            ("hostile_title/manifest.yaml", "title", "title contains a bidi control (U+202E) at index 8"),
            (
                "hostile_title/manifest.yaml",
                "description",
                "description contains a control character (U+001B) at index 0",
            ),
            (
                "remote_ref/manifest.yaml",
                "owner_tools.0.input_schema",
                "$ref 'https://schemas.example/filter.json' is remote; only local '#…' pointers are allowed",
            ),
            ("unknown_key/manifest.yaml", "colour", "unknown key 'colour'"),
        ]
    )


def test_check_paths_reports_duplicate_ids_and_paths_without_plugins(tmp_path: Path) -> None:
    write_plugin(tmp_path / "one", "twin")
    write_plugin(tmp_path / "two", "twin")

    errors = check_paths([tmp_path / "one", tmp_path / "two", tmp_path / "nowhere"]).errors

    assert problems(errors, tmp_path) == snapshot(
        [
            ("nowhere", "", "no such folder"),
            (
                "one/manifest.yaml",
                "id",
                "'twin' is also the id of <base>/two",
            ),
            (
                "two/manifest.yaml",
                "id",
                "'twin' is also the id of <base>/one",
            ),
        ]
    )


def test_check_paths_is_empty_for_clean_folders(tmp_path: Path) -> None:
    write_plugin(tmp_path / "plugins" / "a", "a", "transport: {command: python, args: [-u, src/server.py]}\n")
    (tmp_path / "plugins" / "a" / "src").mkdir()
    (tmp_path / "plugins" / "a" / "src" / "server.py").write_text("", encoding="utf-8")
    write_plugin(tmp_path / "plugins" / "b", "b", "transport: {command: python, args: [-m, b_server]}\n")
    write_plugin(tmp_path / "plugins" / "c", "c", "transport: {command: node, args: [whatever.js]}\n")

    assert check_paths([tmp_path / "plugins"]) == CheckReport((), ())


def test_check_paths_checks_a_builtin_folder_it_is_given(tmp_path: Path) -> None:
    builtin = write_plugin(tmp_path / "builtin" / "a", "a", "acl: public\n")
    write_plugin(tmp_path / "builtin" / "b", "b")
    write_plugin(tmp_path / "extra" / "b", "b")

    report = check_paths([builtin, tmp_path / "extra"], builtin_root=tmp_path / "builtin")

    assert problems(report.errors, tmp_path) == snapshot(
        [
            ("builtin/a/manifest.yaml", "acl", "unknown value 'public' (always or role_granted); read as role_granted"),
            ("extra/b/manifest.yaml", "id", "'b' is the id of the builtin plugin <base>/builtin/b"),
        ]
    )


def test_tool_names_declared_by_two_plugins_load_and_are_listed_as_collisions(tmp_path: Path) -> None:
    write_plugin(tmp_path / "a", "a", "visitor_tools: [book, list_slots, only_a]\n")
    write_plugin(tmp_path / "b", "b", "visitor_tools: [book, List_Slots]\n")
    write_plugin(tmp_path / "c", "c", "visitor_tools: [book, only_c, list-slots]\n")

    report = load_plugins(None, [tmp_path])

    assert ids(report) == ["a", "b", "c"]
    assert declared_collisions(report.plugins) == snapshot(
        {
            "List_Slots": ["a", "b", "c"],
            "book": ["a", "b", "c"],
            "list-slots": ["a", "b", "c"],
            "list_slots": ["a", "b", "c"],
        }
    )


def test_no_collisions_when_every_name_is_declared_once(tmp_path: Path) -> None:
    write_plugin(tmp_path / "a", "a", "visitor_tools: [book, Book_2]\n")
    write_plugin(tmp_path / "b", "b", "visitor_tools: [cancel]\n")

    assert declared_collisions(load_plugins(None, [tmp_path]).plugins) == {}
