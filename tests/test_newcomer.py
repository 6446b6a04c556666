"""What a newcomer meets in the first hour: the start's output, the README's commands, the demo.

The host is started as `scripts/run` starts it (`mcp-host serve`, embedded PostgreSQL in the
data directory); the README and the scripts are read as files.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shlex
import sys
import tomllib
from pathlib import Path

import anyio
import pytest
from packaging.requirements import Requirement

from mcp_host.app import cli
from tests.hosting import PLUGINS, REPO, free_port, wait_serving

MCP_HOST = Path(sys.executable).parent / "mcp-host"


@pytest.mark.anyio
async def test_serve_prints_no_runtime_dir_warning_when_xdg_runtime_dir_is_unset(postgres_dir: Path) -> None:
    # A root shell, a container or CI has no XDG_RUNTIME_DIR; pgserver looks a runtime dir up
    # at import, and platformdirs warned about its fallback at every start.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_HOST_", "PYTHONWARNINGS"))}
    env.pop("XDG_RUNTIME_DIR", None)
    env |= {"MCP_HOST_BUILTIN_DIR": str(PLUGINS / "echo"), "MCP_HOST_PRESTART_CHILDREN": "false"}
    env |= {"MCP_HOST_SANDBOX": "off"}
    port = free_port()
    log = postgres_dir / "serve.log"
    argv = [str(MCP_HOST), "serve", "--port", str(port), "--data-dir", str(postgres_dir / "data")]
    with log.open("wb") as out:
        process = await anyio.open_process(argv, env=env, stdout=out, stderr=out)
    try:
        await wait_serving(f"http://127.0.0.1:{port}", lambda: process.returncode is None, within_s=90)
    finally:
        process.terminate()
        with anyio.fail_after(30):
            await process.wait()
        await process.aclose()

    printed = log.read_text()
    assert "embedded PostgreSQL" in printed  # the start that used to warn did run
    assert not re.search(r"RuntimeDirWarning|XDG_RUNTIME_DIR", printed), printed


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_closure(requirements: list[str]) -> set[str]:
    """The distributions `pip install` of `requirements` brings in: each, and what each
    requires in turn (markers evaluated, no extras of dependencies), from installed metadata."""
    seen: set[str] = set()
    todo = [Requirement(text) for text in requirements]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = _normalized(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        todo.extend(Requirement(text) for text in importlib.metadata.distribution(name).requires or ())
    return seen


def _imported_top_level(script: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__"}


def test_scripts_demo_needs_only_what_scripts_run_installed() -> None:
    def mode(script: str) -> str:
        found = re.search(
            r'^source "\$\(dirname "\$0"\)/_bootstrap\.sh" (\w+)$', (REPO / "scripts" / script).read_text(), re.M
        )
        assert found is not None, script
        return found.group(1)

    assert mode("demo") == mode("run")
    bootstrap = (REPO / "scripts" / "_bootstrap.sh").read_text()
    extras = re.search(rf"^  {mode('run')}\) extras=(\w+) ;;$", bootstrap, re.M)
    assert extras is not None and '-e ".[$extras]"' in bootstrap
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"][extras.group(1)]]
    installed = _installed_closure(wanted) | {_normalized(project["name"])}  # the project itself

    providers = importlib.metadata.packages_distributions()
    imported = _imported_top_level(REPO / "scripts" / "visitor_demo.py")
    missing = {name for name in imported if not {_normalized(d) for d in providers.get(name, [])} & installed}
    assert imported >= {"anyio", "mcp", "caldav", "radicale"}  # the parser sees the lazy imports too
    assert missing == set()


def _readme_command_lines() -> list[list[str]]:
    """Every command line of the README's `sh` blocks that runs `mcp-host` or `scripts/run`,
    as the shell splits it, from the program on; `$(…)` substitutions count as lines too."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S):
        block = block.replace("\\\n", " ")
        for line in [*block.splitlines(), *re.findall(r"\$\(([^)]*)\)", block)]:
            words = shlex.split(line, comments=True)
            # The program: a path to mcp-host or scripts/run, or `mcp-host` first (not `claude mcp add mcp-host`).
            programs = (
                n
                for n, w in enumerate(words)
                if w.endswith(("/mcp-host", "scripts/run")) or w == words[0] == "mcp-host"
            )
            at = next(programs, None)
            if at is not None:
                lines.append(words[at:])
    return lines


def test_every_mcp_host_command_the_readme_shows_parses_with_the_options_it_names() -> None:
    lines = _readme_command_lines()
    parser = cli._parser()
    for words in lines:
        args = ["serve", *words[1:]] if words[0].endswith("scripts/run") else words[1:]
        try:
            parser.parse_args(args)
        except SystemExit as exc:
            raise AssertionError(f"the README's `{shlex.join(words)}` does not parse") from exc

    def shown(*needed: str) -> bool:
        return any(all(n in words for n in needed) for words in lines)

    # The newcomer's next questions: redeeming an access code, and another host name.
    assert shown("session", "new", "--code") and shown("--allowed-host")
    readme = (REPO / "README.md").read_text()
    assert re.search(r"curl -s -X POST http://127\.0\.0\.1:8765/v1/sessions [^`]*\\\"code\\\"", readme)
    assert "MCP_HOST_ALLOWED_HOSTS" in readme and "MCP_HOST_PUBLIC_URL" in readme
