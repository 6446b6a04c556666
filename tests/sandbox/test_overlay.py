"""The plugin folder, writable through each sandbox's own throwaway layer (`sandbox.overlay`).

A real plugin that writes beside its own code (tests/fixtures/plugins/scribe, a copy per test)
in real bubblewrap under its seccomp filter, spawned by a real `ChildPool` as the host spawns
it. What it writes is read back, never seen by another instance, and never reaches the folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace as dataclass_replace
from pathlib import Path
from typing import Any

import pytest

from mcp_host.children import Child
from mcp_host.children.pool import ChildPool
from mcp_host.plugins.loading import Plugin, load_plugins
from mcp_host.sandbox import overlay
from mcp_host.sandbox.bwrap import Limits, SandboxSpec, build_command, bwrap_arguments
from mcp_host.sandbox.launch import launch_for
from mcp_host.settings import Settings
from tests.hosting import PLUGINS, REPO
from tests.processes import CHILD_LIMITS, needs_bwrap

LIMITS = Limits(memory_bytes=256 << 20, max_processes=32, max_open_files=64, cpu_seconds=30, max_file_bytes=8 << 20)


@pytest.fixture
def scribe(tmp_path: Path) -> Plugin:
    """A copy of the scribe plugin, so its folder on disk is this test's to compare."""
    folder = tmp_path / "plugins" / "scribe"
    shutil.copytree(PLUGINS / "scribe", folder)
    report = load_plugins(None, [folder])
    assert not report.errors
    return report.plugins[0]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data")


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its content."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


async def call(child: Child, tool: str, **arguments: Any) -> Any:
    result = await child.call_tool(tool, arguments, {}, timeout_s=30)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def test_the_layer_can_be_made_on_this_machine() -> None:
    # Every test below relies on it; a machine without it runs plugins read-only (warned).
    assert overlay.available()


@needs_bwrap
@pytest.mark.anyio
async def test_a_child_writes_beside_its_code_and_reads_it_back_and_the_folder_is_unchanged(
    scribe: Plugin, settings: Settings
) -> None:
    before = tree(scribe.folder)
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        child = pool.child("test.scribe", lambda: launch_for(scribe, settings))
        assert await call(child, "write", name="memory.jsonl", text="one\n") == {"written": 4}
        await call(child, "write", name="memory.jsonl", text="two\n", append=True)
        await call(child, "write", name="notes/kept.txt", text="changed\n", append=True)
        await call(child, "write", name="deep/new/file.txt", text="x")
        read = {name: await call(child, "read", name=name) for name in ("memory.jsonl", "notes/kept.txt")}
        listing = await call(child, "listing")
        mountinfo = (await call(child, "read", name="/proc/self/mountinfo"))["text"]
    assert read == {
        "memory.jsonl": {"text": "one\ntwo\n"},
        "notes/kept.txt": {"text": "kept on disk\nchanged\n"},
    }
    assert listing == {"files": ["deep/new/file.txt", "manifest.yaml", "memory.jsonl", "notes/kept.txt", "server.py"]}
    assert tree(scribe.folder) == before
    # The overlay's options name no host path (the lower layer is an fd, the others relative).
    plugin_mount = [line for line in mountinfo.splitlines() if line.split(" ")[4] == "/plugin"]
    assert len(plugin_mount) == 1 and plugin_mount[0].split(" - ")[1].split(" ")[:2] == ["overlay", "mcp-plugin"]
    assert "lowerdir=/proc/self/fd/3,upperdir=upper,workdir=work" in plugin_mount[0]
    assert str(scribe.folder) not in mountinfo and str(settings.data_dir) not in mountinfo
    # The layer was mounted in the sandbox's own mount namespace only: the host's mount point
    # is empty, and nothing was written under the data directory's plugins.
    layer = settings.data_dir / "run" / "plugin-layer"
    assert layer.is_dir() and list(layer.iterdir()) == []
    assert not (settings.data_dir / "plugins").exists()


@needs_bwrap
@pytest.mark.anyio
async def test_the_sandboxs_pid_1_shows_no_host_path_in_its_environment(scribe: Plugin, settings: Settings) -> None:
    # The layer's wrapper shell changes into a folder under the data directory; its PWD and
    # OLDPWD (the host's working directory) once reached bwrap, the sandbox's pid 1.
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        child = pool.child("test.scribe", lambda: launch_for(scribe, settings))
        environ = (await call(child, "read", name="/proc/1/environ"))["text"]
    assert environ == ""


@needs_bwrap
@pytest.mark.anyio
async def test_instances_never_see_each_others_writes(scribe: Plugin, settings: Settings) -> None:
    async with ChildPool(CHILD_LIMITS, max_children=4) as pool:

        def child(session: str) -> Child:
            return pool.child("test.scribe", lambda: launch_for(scribe, settings), session, per_session=True)

        alice, bob = child("alice"), child("bob")
        await call(alice, "write", name="memory.jsonl", text="alice's\n")
        await call(bob, "write", name="memory.jsonl", text="bob's\n")
        await call(bob, "write", name="notes/kept.txt", text="bob was here\n")
        seen = {
            "alice": [await call(alice, "read", name=name) for name in ("memory.jsonl", "notes/kept.txt")],
            "bob": [await call(bob, "read", name=name) for name in ("memory.jsonl", "notes/kept.txt")],
        }
        carol = await call(child("carol"), "read", name="memory.jsonl")
    assert seen == {
        "alice": [{"text": "alice's\n"}, {"text": "kept on disk\n"}],
        "bob": [{"text": "bob's\n"}, {"text": "bob was here\n"}],
    }
    assert carol == {"text": None}
    assert tree(scribe.folder) == tree(PLUGINS / "scribe")


@needs_bwrap
@pytest.mark.anyio
async def test_writes_to_the_plugin_folder_share_the_tmp_cap(scribe: Plugin, tmp_path: Path) -> None:
    # One tmpfs of child_tmp_bytes holds /tmp and the layer: the budget is what it was.
    settings = Settings(data_dir=tmp_path / "data", child_tmp_bytes=8 << 20)
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        child = pool.child("test.scribe", lambda: launch_for(scribe, settings))
        await call(child, "write", name="big.txt", text="x" * (5 << 20))
        more = await child.call_tool("write", {"name": "more.txt", "text": "y" * (5 << 20)}, {}, timeout_s=30)
        assert more.is_error  # ENOSPC (the child's log says so): 10 MiB do not fit in 8
    assert tree(scribe.folder) == tree(PLUGINS / "scribe")


def test_argv_mounts_the_layer_then_execs_bwrap_which_binds_plugin_and_tmp_from_it(tmp_path: Path) -> None:
    layer = tmp_path / "layer"
    spec = SandboxSpec(plugin_dir=Path("/srv/p"), command="node", args=(), env={}, limits=LIMITS, layer_dir=layer)
    argv = build_command(spec, seccomp_fd=5, args_fd=6)
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    at = argv.index(shutil.which("bwrap") or "bwrap") - 2
    assert argv[at : at + 2] == ["/usr/bin/env", "-i"]  # the wrapper's PWD and OLDPWD stay out
    assert argv[:at] == [
        "/usr/bin/unshare",
        *user,
        "--mount",
        "--propagation",
        "private",
        "/bin/sh",
        "-c",
        argv[at - 5],
        "mcp-plugin-layer",
        str(layer),
        "/srv/p",
        str(64 << 20),
    ]
    operations = bwrap_arguments(spec, seccomp_fd=5)
    assert mounts_at(operations, "/tmp") == [["--bind", f"{layer}/tmp", "/tmp"]]
    assert mounts_at(operations, "/plugin") == [["--bind", f"{layer}/plugin", "/plugin"]]
    assert "/srv/p" not in operations  # the lower layer is the wrapper's, opened as an fd
    without = bwrap_arguments(dataclass_replace(spec, layer_dir=None), seccomp_fd=5)
    assert mounts_at(without, "/tmp") == [["--tmpfs", "/tmp"]]  # after "--size", 64 MiB
    assert mounts_at(without, "/plugin") == [["--ro-bind", "/srv/p", "/plugin"]]


def mounts_at(operations: list[str], inside: str) -> list[list[str]]:
    """The mount operations (bind, tmpfs) whose destination is `inside`."""
    found = []
    for at, arg in enumerate(operations):
        if arg in ("--bind", "--ro-bind") and operations[at + 2] == inside:
            found.append(operations[at : at + 3])
        elif arg == "--tmpfs" and operations[at + 1] == inside:
            found.append(operations[at : at + 2])
    return found


def test_the_probe_says_no_where_the_layer_cannot_be_mounted(tmp_path: Path) -> None:
    # The fallback: no layer (here: no mount point), /plugin read-only (`SandboxSpec`'s default,
    # pinned in test_bwrap) and one warning at start (`overlay.available`).
    (tmp_path / "lower").mkdir()
    assert overlay.probe(tmp_path / "missing", tmp_path / "lower") is False
    (tmp_path / "mount").mkdir()
    assert overlay.probe(tmp_path / "mount", tmp_path / "lower") is True
    assert list((tmp_path / "lower").iterdir()) == [] and list((tmp_path / "mount").iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the probe as another, unprivileged user")
def test_a_non_root_host_makes_the_layer_in_a_user_namespace() -> None:
    # What a host running as an ordinary user does: `unshare --user --map-root-user --mount`.
    scratch = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp_path is under a 0700 folder
    scratch.chmod(0o755)
    for name in ("lower", "mount"):
        (scratch / name).mkdir()
        os.chown(scratch / name, 65534, 65534)
    code = (
        "import sys; from pathlib import Path; from mcp_host.sandbox import overlay; "
        "sys.exit(0 if overlay.probe(Path(sys.argv[1]), Path(sys.argv[2])) else 3)"
    )
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code]
        + [str(scratch / "mount"), str(scratch / "lower")],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=30,
        check=False,
    )
    if done.returncode not in (0, 3):
        pytest.skip(f"the unprivileged user cannot run the host's Python here: {done.stderr.decode()[-300:]}")
    try:
        assert done.returncode == 0, done.stderr.decode()
        assert list((scratch / "lower").iterdir()) == []
    finally:
        shutil.rmtree(scratch)


MEMORY = REPO / ".cache" / "ecosystem" / "plugins" / "memory"
MEMORY_DIST = MEMORY / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist"


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.skipif(
    shutil.which("node") is None or not (MEMORY / "manifest.yaml").exists(),
    reason="needs node and scripts/install-ecosystem (server-memory in .cache/ecosystem/plugins/memory)",
)
async def test_server_memory_without_a_memory_file_path_keeps_one_graph_per_instance(settings: Settings) -> None:
    # As `mcp-host plugin add npm:@modelcontextprotocol/server-memory` makes it: no env, so the
    # server writes memory.jsonl beside its dist/index.js, in the instance's own layer.
    report = load_plugins(None, [MEMORY])
    assert not report.errors
    installed = report.plugins[0]
    transport = installed.manifest.transport
    assert transport is not None and transport.env
    manifest = installed.manifest.model_copy(update={"transport": transport.model_copy(update={"env": {}})})
    memory = dataclass_replace(installed, manifest=manifest)
    before = tree(MEMORY_DIST)
    graphs: dict[str, Any] = {}
    async with ChildPool(CHILD_LIMITS, max_children=4) as pool:
        for who in ("Ada", "Bob"):
            child = pool.child("eco.memory", lambda: launch_for(memory, settings), who, per_session=True)
            entities = [{"name": who, "entityType": "person", "observations": [f"{who} was here"]}]
            made = await child.call_tool("create_entities", {"entities": entities}, {}, timeout_s=60)
            assert not made.is_error, made.content
        for who in ("Ada", "Bob"):
            child = pool.child("eco.memory", lambda: launch_for(memory, settings), who, per_session=True)
            read = await child.call_tool("read_graph", {}, {}, timeout_s=60)
            graphs[who] = [entity["name"] for entity in (read.structured_content or {}).get("entities", [])]
    assert graphs == {"Ada": ["Ada"], "Bob": ["Bob"]}
    assert tree(MEMORY_DIST) == before and "memory.jsonl" not in before
