"""The clients nobody here wrote, as the sign-in proofs run them against a real host: the
TypeScript SDK's auth provider (1.x and 2.x, tests/oauth/js/sign_in.mjs) and Claude Code, each
opening the authorize URL with the headless browser (`headless.py`) as its `BROWSER`; and the
owner's side of a host whose doors they sign in to (an access code, the sessions they opened).

What they need comes from scripts/install-ecosystem (the TypeScript SDKs) and
scripts/install-oauth-clients (Claude Code); without it each test skips, saying which to run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from tests.ecosystem.support import CLIENTS, owner_call, owner_client
from tests.hosting import REPO, RunningHost
from tests.oauth.headless import DeskAnswers, write_browser_program

TS_SDK = CLIENTS / "@modelcontextprotocol" / "sdk"  # 1.32.2: 2025-11-25 only
TS_CLIENT = CLIENTS / "@modelcontextprotocol" / "client"  # 2.3.1: 2025-11-25, and 2026-07-28 by probing
CLAUDE = REPO / ".cache" / "oauth-clients" / "node_modules" / ".bin" / "claude"
JS = Path(__file__).resolve().parent / "js"

# The TypeScript SDKs the sign-in script runs (`sign_in.mjs`'s first argument), and the protocol
# version each ends up speaking with the host.
TYPESCRIPT = {
    "sdk-1.x": (f"v1:{TS_SDK}", "2025-11-25"),
    "client-2.x-legacy": (f"v2-legacy:{TS_CLIENT}", "2025-11-25"),
    "client-2.x-auto": (f"v2-auto:{TS_CLIENT}", "2026-07-28"),
}


def missing_typescript() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (install Node.js 20+)"
    absent = [p for p in (TS_SDK / "package.json", TS_CLIENT / "package.json") if not p.exists()]
    return f"run scripts/install-ecosystem first (missing: {absent[0].relative_to(REPO)})" if absent else None


def missing_claude_code() -> str | None:
    if not CLAUDE.exists():
        return "run scripts/install-oauth-clients first (Claude Code is not in .cache/oauth-clients)"
    if shutil.which("script") is None:
        return "`script` (util-linux) is missing: `claude mcp login` signs in only on a terminal"
    return None


# -- the person at the desk -------------------------------------------------------------------


@dataclass(frozen=True)
class Desk:
    """The headless browser a client is given: its program, the answers it types (in the
    environment) and the log of its visits."""

    program: Path
    log: Path

    @classmethod
    def in_folder(cls, folder: Path) -> Desk:
        folder.mkdir(parents=True, exist_ok=True)
        return cls(write_browser_program(folder / "browser", sys.executable, REPO), folder / "desk.log")

    def environment(self, answers: DeskAnswers) -> dict[str, str]:
        typed = {
            "MCP_DESK_NAME": answers.name,
            "MCP_DESK_EMAIL": answers.email,
            "MCP_DESK_CODE": answers.code,
            "MCP_DESK_OWNER_TOKEN": answers.owner_token,
        }
        found = {key: value for key, value in typed.items() if value is not None}
        return {
            "BROWSER": str(self.program),
            "MCP_DESK_LOG": str(self.log),
            "MCP_DESK_DECISION": answers.decision,
            **found,
        }

    def visits(self) -> list[dict[str, Any]]:
        """What the browser did, one entry per URL it was given (`headless.main`)."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


# -- the clients ------------------------------------------------------------------------------


async def typescript_sign_in(sdk: str, door: str, calls: list[dict[str, Any]], desk: Desk, answers: DeskAnswers) -> Any:
    """Run tests/oauth/js/sign_in.mjs: the JSON document it prints (see its header)."""
    argv = ["node", str(JS / "sign_in.mjs"), sdk, door, json.dumps(calls)]
    env = {**os.environ, **desk.environment(answers)}  # noqa: TID251 - a child's environment
    with anyio.fail_after(90):
        done = await anyio.run_process(argv, env=env, check=False)
    stderr = done.stderr.decode()
    assert done.returncode == 0, f"the TypeScript client failed ({done.returncode}): {stderr[-2000:]}"
    return json.loads(done.stdout)


_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\]8;[^\x07\x1b]*(\x07|\x1b\\)|\r")


@dataclass(frozen=True)
class ClaudeCode:
    """Claude Code with a throwaway HOME (its settings, the servers added, their tokens), run
    in `home`, reaching nothing but loopback: no API key, and every background call it can be
    told not to make turned off."""

    home: Path
    desk: Desk

    def environment(self, answers: DeskAnswers) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),  # noqa: TID251 - a child's environment
            "HOME": str(self.home),
            "TERM": "dumb",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            **self.desk.environment(answers),
        }

    async def run(
        self, *arguments: str, answers: DeskAnswers | None = None, terminal: bool = False, within_s: float = 120
    ) -> str:
        """`claude ARGUMENTS`: what it printed (stdout and stderr, terminal codes removed);
        `terminal`: on a pseudo-terminal (`script`), which `claude mcp login` needs; TimeoutError
        (the process killed) when it has not ended within `within_s`."""
        argv = [str(CLAUDE), *arguments]
        if terminal:
            argv = ["script", "-qec", shlex.join(argv), "/dev/null"]
        with anyio.fail_after(within_s):
            done = await anyio.run_process(
                argv, env=self.environment(answers or DeskAnswers()), cwd=self.home, check=False, input=b""
            )
        printed = _TERMINAL_CODES.sub("", done.stdout.decode() + done.stderr.decode())
        assert done.returncode == 0, f"claude {' '.join(arguments)} exited {done.returncode}: {printed[-2000:]}"
        return printed


# -- the owner --------------------------------------------------------------------------------


async def access_code(running: RunningHost, role: str) -> str:
    """A new access code for `role` (made, granting nothing, if there is none)."""
    async with owner_client(running) as owner:
        failed, answer = await owner_call(owner, "role_put", id=role, capabilities=[])
        assert not failed, answer
        failed, answer = await owner_call(owner, "code_create", role=role)
    assert not failed, answer
    return str(answer["code"])


async def session_of(running: RunningHost, name: str) -> dict[str, Any]:
    """The one live visitor session whose visitor gave `name` at the desk (`sessions_list`)."""
    async with owner_client(running) as owner:
        failed, answer = await owner_call(owner, "sessions_list")
    assert not failed, answer
    found = [s for s in answer["sessions"] if (s.get("visitor") or {}).get("name") == name]
    assert len(found) == 1, answer
    return dict(found[0])
