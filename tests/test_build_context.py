"""The container image's build context: Containerfile, .containerignore and .dockerignore.

There is no container engine here, so this stands in for the build. The context is computed
from the ignore file with the rules podman/buildah and docker apply (Docker's `.dockerignore`
semantics, below), installed into a fresh virtual environment the way the Containerfile's
`pip install /src` does, and every builtin is started from that install the way `serve` starts
it, with MCP_HOST_BUILTIN_DIR on a copy of the context's capabilities/ (the image's
/app/capabilities). The MCP SDK and the other dependencies come from this test's environment
(a .pth file), so nothing is downloaded but the build backend; when that cannot be had, the
test skips saying "offline".
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcp_host.plugins.loading import load_plugins
from tests.hosting import REPO

IGNORE_FILES = (".containerignore", ".dockerignore")


# --- Docker's ignore-file rules (moby/patternmatcher and its ignorefile reader) -------------


@dataclass(frozen=True)
class Pattern:
    """One line of an ignore file: `text` cleaned and relative to the context's root;
    `exception` for a `!` line (it lets matching paths back in)."""

    text: str
    exception: bool

    def matches(self, path: str) -> bool:
        return _compile(self.text)(path)


def read_ignore_file(path: Path) -> list[Pattern]:
    """The patterns of an ignore file, in order: `#` lines and blank lines dropped, each pattern
    trimmed, cleaned (`.`/`..` elements, repeated and trailing `/`) and made relative."""
    patterns = []
    for raw in path.read_text(encoding="utf-8-sig").splitlines():
        if raw.startswith("#"):
            continue
        text = raw.strip()
        if not text:
            continue
        exception = text.startswith("!")
        if exception:
            text = text[1:].strip()
        text = posixpath.normpath(text)
        if len(text) > 1 and text.startswith("/"):
            text = text.lstrip("/")
        patterns.append(Pattern(text, exception))
    return patterns


@functools.cache
def _compile(pattern: str) -> Callable[[str], bool]:
    """Docker's translation of a pattern: `**` any number of directories (`**/` zero or more),
    `*` and `?` within one path element, `[...]` a character class, `\\` escapes. Patterns
    without wildcards compare exactly; `x**` is a prefix and `**x` a suffix, as there."""
    out, kind, i, step = "^", "exact", 0, 0
    while i < len(pattern):
        ch = pattern[i]
        i += 1
        if ch == "*" and pattern[i : i + 1] == "*":
            i += 1
            if pattern[i : i + 1] == "/":
                i += 1
            if i == len(pattern):
                kind = "prefix" if kind == "exact" else "regexp"
                out += ".*"
            else:
                kind = "regexp"
                out += "(.*/)?"
            if step == 0:
                kind = "suffix"
        elif ch == "*":
            out, kind = out + "[^/]*", "regexp"
        elif ch == "?":
            out, kind = out + "[^/]", "regexp"
        elif ch == "\\" and i < len(pattern):
            out, kind = out + re.escape(pattern[i]), "regexp"
            i += 1
        elif ch in "[]":
            out, kind = out + ch, "regexp"
        else:
            out += re.escape(ch)
        step += 1
    if kind == "exact":
        return lambda path: path == pattern
    if kind == "prefix":
        return lambda path: path.startswith(pattern[:-2])
    if kind == "suffix":
        suffix = pattern[2:]
        return lambda path: path.endswith(suffix) or (suffix.startswith("/") and path == suffix[1:])
    compiled = re.compile(out + "$")
    return lambda path: compiled.match(path) is not None


def excluded(path: str, patterns: list[Pattern]) -> bool:
    """Whether `path` (relative, `/`-separated) stays out of the context: the last pattern that
    matches it or one of its parent directories decides."""
    matched = False
    parents = posixpath.dirname(path).split("/") if "/" in path else []
    for pattern in patterns:
        if pattern.exception != matched:
            continue
        hit = pattern.matches(path) or any(pattern.matches("/".join(parents[: n + 1])) for n in range(len(parents)))
        if hit:
            matched = not pattern.exception
    return matched


def build_context(root: Path, patterns: list[Pattern]) -> list[str]:
    """Every file the engine sends as the context of `root`, sorted. An excluded directory is
    not entered unless an exception pattern names something inside it (Docker's walk)."""
    files: list[str] = []
    for directory, dirnames, filenames in os.walk(root):
        rel = Path(directory).relative_to(root).as_posix()
        rel = "" if rel == "." else rel + "/"
        entered = []
        for name in dirnames:
            path = rel + name
            if (root / path).is_symlink():
                filenames.append(name)
            elif not excluded(path, patterns) or any(
                p.exception and (p.text + "/").startswith(path + "/") for p in patterns
            ):
                entered.append(name)
        dirnames[:] = entered
        files.extend(rel + name for name in filenames if not excluded(rel + name, patterns))
    return sorted(files)


def copy_context(root: Path, files: list[str], target: Path) -> None:
    for name in files:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target / name, follow_symlinks=False)


# --- the rules themselves, on Docker's documented examples ------------------------------------


@pytest.mark.parametrize(
    ("lines", "path", "out"),
    [
        (["*/temp*"], "somedir/temporary.txt", True),
        (["*/temp*"], "somedir/temp", True),
        (["*/temp*"], "temp", False),
        (["*/*/temp*"], "somedir/subdir/temporary.txt", True),
        (["temp?"], "tempa", True),
        (["temp?"], "temp", False),
        (["**/*.go"], "main.go", True),
        (["**/*.go"], "a/b/main.go", True),
        (["*.md", "!README.md"], "README.md", False),
        (["*.md", "!README.md"], "CHANGES.md", True),
        (["*.md", "!README*.md", "README-secret.md"], "README-secret.md", True),
        (["*.md", "!README*.md", "README-secret.md"], "README-public.md", False),
        (["*.md", "README-secret.md", "!README*.md"], "README-secret.md", False),
        (["*", "!pkg"], "pkg/sub/mod.py", False),  # a pattern matches what is below a match
        (["*", "!pkg"], "other/mod.py", True),
        (["*", "!pkg", "**/__pycache__"], "pkg/sub/__pycache__/m.pyc", True),
        (["/abs/./x/../dir/"], "abs/dir/f", True),  # cleaned, made relative
    ],
)
def test_ignore_rules_follow_dockers_documented_examples(
    tmp_path: Path, lines: list[str], path: str, out: bool
) -> None:
    ignore = tmp_path / "ignore"
    ignore.write_text("# a comment\n\n" + "\n".join(f"  {line}  " for line in lines) + "\n")
    assert excluded(path, read_ignore_file(ignore)) is out


# --- the project's ignore file ------------------------------------------------------------------


def test_podman_and_docker_read_the_same_ignore_file() -> None:
    # podman/buildah read .containerignore, docker .dockerignore: one content, two names.
    # Two regular files rather than a symlink, which not every builder follows.
    contents = {name: (REPO / name).read_bytes() for name in IGNORE_FILES}
    assert contents[".containerignore"] == contents[".dockerignore"]
    assert not any((REPO / name).is_symlink() for name in IGNORE_FILES)


def test_the_context_holds_the_packages_and_builtins_and_no_development_state(tmp_path: Path) -> None:
    tree = [
        "pyproject.toml",
        "README.md",
        "Containerfile",
        "scripts/run",
        "mcp_host/__init__.py",
        "mcp_host/migrations/001.sql",
        "mcp_host/__pycache__/app.cpython-311.pyc",
        "mcp_host_kit/__init__.py",
        "mcp_host_kit/README.md",
        "owner_facade/__init__.py",
        "owner_console/__init__.py",
        "owner_console/static/console.js",
        "capabilities/mail_send/manifest.yaml",
        "capabilities/mail_send/server.py",
        "capabilities/mail_send/server.pyc",
        "capabilities/calendar_book/__pycache__/server.cpython-311.pyc",
        "mcp_host.egg-info/PKG-INFO",
        ".data/owner-token",
        ".data/postgres/PG_VERSION",
        ".venv/bin/python",
        ".git/HEAD",
        "tests/test_app.py",
        "bench-results/run.json",
    ]
    for name in tree:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")

    assert build_context(tmp_path, read_ignore_file(REPO / ".containerignore")) == [
        "capabilities/mail_send/manifest.yaml",
        "capabilities/mail_send/server.py",
        "mcp_host/__init__.py",
        "mcp_host/migrations/001.sql",
        "mcp_host_kit/README.md",
        "mcp_host_kit/__init__.py",
        "owner_console/__init__.py",
        "owner_console/static/console.js",
        "owner_facade/__init__.py",
        "pyproject.toml",
    ]


# --- the stand-in for the build -----------------------------------------------------------------

# Run by the fresh environment's python, outside the checkout: load the builtins from
# MCP_HOST_BUILTIN_DIR and start each one's child as the host does (launch_for, ChildPool), which
# runs its initialize and tools/list. Prints where each package was imported from and each
# builtin's tools, or why it did not start.
PROBE = """
import importlib.util
import json

import anyio

from mcp_host.children.lifecycle import ChildLimits
from mcp_host.children.pool import ChildPool
from mcp_host.sandbox.launch import launch_for
from mcp_host.plugins.loading import load_plugins
from mcp_host.settings import Settings


async def main():
    settings = Settings()
    report = load_plugins(settings.builtin_dir, settings.plugins)
    limits = ChildLimits(
        start_timeout_s=60, idle_timeout_s=300, max_line_bytes=settings.children.max_line_bytes,
        stderr_lines_per_s=settings.child_logs.stderr_lines_per_s,
        stderr_line_bytes=settings.child_logs.stderr_line_bytes,
        backoff_max_s=1, crash_loop_threshold=1, timeouts_before_recycle=1,
    )
    tools = {}

    async def start(plugin, child):
        try:
            tools[plugin.manifest.id] = sorted(t.name for t in await child.list_tools(timeout_s=60))
        except Exception as exc:
            tools[plugin.manifest.id] = f"did not start: {exc!r}"

    async with ChildPool(limits, max_children=len(report.plugins) or 1) as pool:
        async with anyio.create_task_group() as tg:
            for plugin in report.plugins:
                child = pool.child(plugin.manifest.id, lambda plugin=plugin: launch_for(plugin, settings))
                tg.start_soon(start, plugin, child)
    print(json.dumps({
        "imported_from": {
            name: getattr(importlib.util.find_spec(name), "origin", None)
            for name in ("mcp_host", "mcp_host_kit", "owner_facade", "owner_console")
        },
        "errors": [str(e) for e in report.errors],
        "tools": tools,
    }))


anyio.run(main)
"""

_OFFLINE_SIGNS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Name or service not known",
    "Temporary failure in name resolution",
    "No matching distribution found",
    "Network is unreachable",
)


def _environment() -> dict[str, str]:
    """This process's environment without what would point a python back at the checkout."""
    drop = ("PYTHON", "MCP_HOST_", "COV_CORE_", "COVERAGE_", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def test_the_containerfile_installs_the_context_and_points_the_host_at_its_capabilities() -> None:
    # What the stand-in below mirrors; if the Containerfile changes these, change both.
    text = (REPO / "Containerfile").read_text()
    assert (
        "RUN --mount=type=bind,target=/src,rw \\\n    pip install --no-cache-dir --disable-pip-version-check /src"
        in text
    )
    assert "cp -R /src/capabilities /app/capabilities" in text
    assert "MCP_HOST_BUILTIN_DIR=/app/capabilities" in text
    assert 'ENTRYPOINT ["mcp-host", "serve"]' in text


@pytest.mark.e2e  # installs with npm or pip
def test_an_install_from_the_build_context_starts_every_builtin(tmp_path: Path) -> None:
    src, app, venv = tmp_path / "src", tmp_path / "app", tmp_path / "venv"
    copy_context(REPO, build_context(REPO, read_ignore_file(REPO / ".containerignore")), src)
    shutil.copytree(src / "capabilities", app / "capabilities")  # the image's /app/capabilities

    env = _environment()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=env, timeout=60)
    python = venv / "bin" / "python"
    site_packages = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    ).stdout.strip()
    # Dependencies (and pip) from this environment; its .pth files (an editable install of the
    # checkout among them) are not read from a path a .pth adds.
    ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (Path(site_packages) / "dependencies.pth").write_text("".join(f"{path}\n" for path in ours))

    installed = subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-input", "--disable-pip-version-check", str(src)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    output = installed.stdout + installed.stderr
    if installed.returncode != 0 and any(sign in output for sign in _OFFLINE_SIGNS):
        pytest.skip("offline: pip could not fetch the build backend (setuptools) from the registry")
    assert installed.returncode == 0, output

    (tmp_path / "probe.py").write_text(PROBE)
    env |= {
        "MCP_HOST_BUILTIN_DIR": str(app / "capabilities"),
        "MCP_HOST_SANDBOX": "off",
        "MCP_HOST_DATA_DIR": str(tmp_path / "data"),
    }
    probed = subprocess.run([python, "probe.py"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240)
    assert probed.returncode == 0, probed.stderr[-4000:]
    result = json.loads(probed.stdout.splitlines()[-1])

    assert all(f and Path(f).is_relative_to(site_packages) for f in result["imported_from"].values()), result
    assert result["errors"] == []
    builtins = load_plugins(REPO / "capabilities", []).plugins
    assert sorted(result["tools"]) == sorted(p.manifest.id for p in builtins)
    for plugin in builtins:
        started = result["tools"][plugin.manifest.id]
        assert isinstance(started, list), started
        assert set(plugin.manifest.visitor_tools) <= set(started), (plugin.manifest.id, started)
