"""Where the MCP conformance suite lives and how to get it: `scripts/install-conformance`.

Below: Node.js and the npm package `@modelcontextprotocol/conformance`, installed (pinned) into
`.cache/conformance` by that script. Above: `runner.py`, which runs the CLI found here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "Suite", "find_suite"]

ROOT = Path(__file__).resolve().parents[2]
INSTALLER = ROOT / "scripts" / "install-conformance"
PACKAGE_DIR = ROOT / ".cache" / "conformance" / "node_modules" / "@modelcontextprotocol" / "conformance"


@dataclass(frozen=True)
class Suite:
    """The installed suite: run `[node, cli, ...]`."""

    node: str
    cli: Path
    version: str


def find_suite() -> Suite | str:
    """The installed suite, installing it first if needed; or why it cannot be run."""
    node = shutil.which("node")
    if node is None or shutil.which("npm") is None:
        return "Node.js (node and npm) is not installed: the MCP conformance suite needs it"
    installed = subprocess.run([str(INSTALLER)], capture_output=True, text=True, timeout=300, check=False)
    cli = PACKAGE_DIR / "dist" / "index.js"
    if installed.returncode != 0 or not cli.is_file():
        return f"the MCP conformance suite could not be installed: {installed.stderr.strip() or 'no CLI found'}"
    version = str(json.loads((PACKAGE_DIR / "package.json").read_text())["version"])
    return Suite(node=node, cli=cli, version=version)
