"""Each runtime in its real sandbox: what it can read, that it starts under the default limits,
and the cause it shows when it runs out of memory.

Real bubblewrap, real children spawned by a `ChildPool` from `launch_for`, as the host spawns
them: a Python fixture (tests/fixtures/plugins/hog), a Node one without the SDK
(tests/fixtures/plugins/nodepeek), and the ecosystem's reference servers that
scripts/install-ecosystem puts in .cache/ecosystem (skipped, saying so, where it has not run).
"With a memory cgroup" skips where the host has none; "without" points `cgroup_root` at an
empty directory, as a host without cgroups is.
"""

from __future__ import annotations

import logging
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_host.children import Child
from mcp_host.children.pool import ChildPool
from mcp_host.errors import HostError
from mcp_host.plugins.loading import Plugin, load_plugins
from mcp_host.sandbox.budget import budget_for
from mcp_host.sandbox.launch import host_cgroups, launch_for
from mcp_host.settings import Settings
from tests.hosting import PLUGINS, REPO, wait_until
from tests.processes import CHILD_LIMITS, needs_bwrap, needs_node

ECOSYSTEM = REPO / ".cache" / "ecosystem" / "plugins"
VENV = Path(sys.prefix).resolve()
SITE = Path(sysconfig.get_path("purelib", vars={"base": str(VENV), "platbase": str(VENV)}))
SITE_INSIDE = f"/opt/mcp-host/venv/{SITE.relative_to(VENV)}"
BASE_SITE = Path(sysconfig.get_path("purelib", vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix}))
# What every sandbox's root holds: its own /dev, /proc, /tmp, the /etc files, /usr and the
# plugin folder, and /bin, /lib … as this host has them.
ROOT_LINKS = {name for name in ("bin", "sbin", "lib", "lib64", "lib32", "libx32") if Path("/", name).exists()}
EVERY_ROOT = {"dev", "etc", "plugin", "proc", "tmp", "usr"} | ROOT_LINKS
BASE_ROOT = Path(sys.base_prefix).resolve().parts[1]  # where the base interpreter's tree is bound


def plugin(folder: Path) -> Plugin:
    report = load_plugins(None, [folder])
    assert not report.errors, report.errors
    return report.plugins[0]


def ecosystem(name: str) -> Plugin:
    folder = ECOSYSTEM / name
    if not (folder / "manifest.yaml").is_file():
        pytest.skip(f"{folder} is missing: run scripts/install-ecosystem (needs node and npm)")
    return plugin(folder)


def settings_for(cgroup: bool, tmp_path: Path) -> Settings:
    if not cgroup:
        return Settings(cgroup_root=tmp_path)  # no cgroup file system there: rlimits alone
    groups = host_cgroups(Settings().sandbox.cgroup_root)
    if groups is None or groups.memory is None:
        pytest.skip(
            "no usable memory cgroup here: needs a writable cgroup v1 memory hierarchy at "
            "/sys/fs/cgroup/memory, or cgroup v2 with the memory controller in the root or a delegated cgroup"
        )
    return Settings()


async def call(child: Child, tool: str, **arguments: Any) -> Any:
    result = await child.call_tool(tool, arguments, {}, timeout_s=60)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    content = result.structured_content
    return content["result"] if set(content) == {"result"} else content


# --- starting under the defaults ---------------------------------------------------------


@needs_bwrap
@needs_node
@pytest.mark.anyio
@pytest.mark.parametrize("cgroup", [True, False], ids=["memory-cgroup", "rlimit-data"])
@pytest.mark.parametrize("name", ["everything", "memory", "filesystem"])
async def test_the_node_reference_servers_start_under_default_settings(name: str, cgroup: bool, tmp_path: Path) -> None:
    # RLIMIT_AS at 1 GiB killed V8 at start (exit 134, "JavaScript heap out of memory").
    server = ecosystem(name)
    settings = settings_for(cgroup, tmp_path)
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        child = pool.child(server.manifest.id, lambda: launch_for(server, settings))
        tools = await child.list_tools(timeout_s=30)
    assert len(tools) >= 3
    assert child.health().starts == 1


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("cgroup", [True, False], ids=["memory-cgroup", "rlimit-data"])
async def test_a_python_server_in_its_own_venv_starts_with_its_base_interpreter_reachable(
    cgroup: bool, tmp_path: Path
) -> None:
    # mcp-server-time from PyPI: `command: venv/bin/python`, a symlink to the base interpreter.
    server = ecosystem("time")
    settings = settings_for(cgroup, tmp_path)
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        child = pool.child(server.manifest.id, lambda: launch_for(server, settings))
        names = {tool.name for tool in await child.list_tools(timeout_s=30)}
    assert "get_current_time" in names


# --- out of memory -----------------------------------------------------------------------


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("cgroup", [True, False], ids=["memory-cgroup", "rlimit-data"])
@pytest.mark.parametrize(
    ("name", "limit_mib"),
    [pytest.param("hog", 128, id="python"), pytest.param("nodepeek", 256, id="node", marks=needs_node)],
)
async def test_a_child_past_its_memory_limit_shows_out_of_memory_as_its_cause(
    name: str, limit_mib: int, cgroup: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hog = plugin(PLUGINS / name)
    settings = settings_for(cgroup, tmp_path)
    cause = f"out of memory (limit {limit_mib} MiB)"
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        child = pool.child(hog.manifest.id, lambda: launch_for(hog, settings))
        await child.list_tools(timeout_s=30)
        with pytest.raises(HostError):  # the child died mid-call
            await child.call_tool("hog", {"mib": 4 * limit_mib}, {}, timeout_s=60)
        await wait_until(lambda: child.health().last_exit is not None, within_s=30)
        health = child.health()
    assert health.last_exit is not None and health.last_exit.startswith(f"{cause}; "), health
    assert health.cause is not None and health.cause.startswith(f"{cause}; ")
    logged = [r.getMessage() for r in caplog.records if r.name == "mcp_host.children.lifecycle"]
    assert any(message.startswith(f"{hog.manifest.id}: {cause}; ") for message in logged), logged


@needs_bwrap
@pytest.mark.anyio
async def test_a_crash_that_is_not_about_memory_says_nothing_of_memory() -> None:
    echo = plugin(PLUGINS / "echo")
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        child = pool.child(echo.manifest.id, lambda: launch_for(echo, Settings()))
        await child.list_tools(timeout_s=30)
        with pytest.raises(HostError):
            await child.call_tool("die", {}, {}, timeout_s=30)
        await wait_until(lambda: child.health().last_exit is not None, within_s=30)
    assert "out of memory" not in (child.health().last_exit or "")


# --- what each runtime can read ----------------------------------------------------------


def host_paths(marker: Path) -> list[str]:
    """Host paths no sandbox may read: the venv and its packages, the repo, the host's /tmp."""
    return [str(VENV), str(SITE), str(SITE / "asyncpg"), str(REPO), str(REPO / "mcp_host"), str(marker)]


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = Path("/tmp") / f"mcp-host-test-{tmp_path.name}"
    path.write_text("the host's /tmp")
    yield path
    path.unlink()


@needs_bwrap
@needs_node
@pytest.mark.anyio
async def test_a_node_child_sees_node_and_its_folder_and_nothing_of_the_hosts_python(marker: Path) -> None:
    node = plugin(PLUGINS / "nodepeek")
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        child = pool.child(node.manifest.id, lambda: launch_for(node, Settings()))
        root = (await call(child, "listing", path="/"))["names"]
        opt = (await call(child, "listing", path="/opt"))["names"]
        seen = await call(
            child,
            "readable",
            paths=[*host_paths(marker), "/opt/mcp-host", sys.base_prefix, str(BASE_SITE), "/plugin/server.js"],
        )
    assert set(root) == EVERY_ROOT
    assert opt == []
    assert [path for path, ok in seen.items() if ok] == ["/plugin/server.js"]


@needs_bwrap
@pytest.mark.anyio
async def test_a_python_child_sees_the_sdk_and_the_kit_but_not_the_hosts_packages(marker: Path) -> None:
    hog = plugin(PLUGINS / "hog")
    async with ChildPool(CHILD_LIMITS, max_children=2) as pool:
        child = pool.child(hog.manifest.id, lambda: launch_for(hog, Settings()))
        modules = ["mcp", "yaml", "pydantic", "anyio", "mcp_host_kit", "asyncpg", "mcp_host", "pytest", "psutil"]
        importable = await call(child, "importable", modules=modules)
        root = await call(child, "listing", path="/")
        opt = await call(child, "listing", path="/opt/mcp-host")
        site = await call(child, "listing", path=SITE_INSIDE)
        base_site = await call(child, "listing", path=str(BASE_SITE))
        seen = await call(child, "readable", paths=[*host_paths(marker), f"{SITE_INSIDE}/mcp", "/opt/mcp-host/lib"])
    assert [name for name, ok in importable.items() if ok] == ["mcp", "yaml", "pydantic", "anyio", "mcp_host_kit"]
    assert set(root) == EVERY_ROOT | {"opt"} | {BASE_ROOT}
    assert opt == ["lib", "venv"]
    assert "mcp" in site and not {"asyncpg", "mcp_host", "pytest", "psutil"} & set(site)
    assert not [name for name in site if name.endswith(".pth") and "mcp_host" in name]
    assert base_site == []  # the base interpreter's own packages: hidden
    assert [path for path, ok in seen.items() if ok] == [f"{SITE_INSIDE}/mcp", "/opt/mcp-host/lib"]


def test_the_limit_warnings_name_each_key_above_the_hosts_ceiling(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "greedy"
    folder.mkdir()
    (folder / "manifest.yaml").write_text(
        "id: test.greedy\ntransport: {command: node}\n"
        "limits: {memory_mb: 4096, cpu_seconds: 10, processes: 1000, open_files: 64}\n"
    )
    greedy = plugin(folder)
    budget = budget_for(greedy, Settings().sandbox)
    assert budget.warnings == (
        "test.greedy: limits.memory_mb 4096 is above the host's ceiling (MCP_HOST_CHILD_MEMORY_BYTES); it gets 1024",
        "test.greedy: limits.processes 1000 is above the host's ceiling (MCP_HOST_CHILD_MAX_PROCESSES); it gets 64",
    )
    limits = budget.limits
    assert (limits.memory_bytes, limits.cpu_seconds, limits.max_processes, limits.max_open_files) == (
        1024 << 20,
        10,
        64,
        64,
    )
    caplog.set_level(logging.WARNING, logger="mcp_host.sandbox.launch")
    for _ in range(2):
        launch = launch_for(greedy, Settings(cgroup_root=tmp_path))
        launch.close_passed_fds()
    warned = [r.getMessage() for r in caplog.records if "above the host's ceiling" in r.getMessage()]
    assert warned == list(budget.warnings)  # once per host, not per child


def test_a_smaller_memory_budget_scales_the_tmpfs_and_caps_the_memory_cgroup() -> None:
    budget = budget_for(plugin(PLUGINS / "hog"), Settings().sandbox)  # limits.memory_mb: 128
    limits = budget.limits
    assert (limits.memory_bytes, limits.tmp_bytes, limits.shm_bytes) == (128 << 20, 8 << 20, 2 << 20)
    assert (limits.data_bytes, budget.cgroup_memory_bytes, budget.warnings) == (118 << 20, 128 << 20, ())
    # Without `limits`, the host's settings as they are.
    default = budget_for(plugin(PLUGINS / "echo"), Settings(child_memory_cgroup_bytes=2048 << 20).sandbox)
    assert (default.limits.memory_bytes, default.limits.tmp_bytes, default.cgroup_memory_bytes) == (
        1024 << 20,
        64 << 20,
        2048 << 20,
    )
