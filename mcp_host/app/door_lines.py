"""What the `plugin` commands share: their settings, reaching the owner door of the host running
with the data directory (or saying in one line that none answers, so the command works without
it), the host's values and progress printed as safe lines, and a refusal or failure as one line
on stderr.

Above: `plugin_commands` (`plugin add|list|remove|upgrade`, `tools approve`) and
`egress_commands` (`plugin allow|disallow`). Below: `door_client` (the owner door) and
`host_file` (where a running host says it listens).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from mcp_host.settings import Settings

from .door_client import Door, DoorFailed, DoorRefused, NoDoor, call_door, find_door
from .host_file import HOST_FILE

__all__ = ["cli_command", "cli_settings", "offline", "one_line", "progress_said", "said", "shown", "through_host"]

_SHOWN_MAX = 300  # characters of one value from the host printed to the terminal


def cli_settings(args: argparse.Namespace) -> Settings:
    return Settings(data_dir=args.data_dir) if args.data_dir is not None else Settings()


def shown(value: object, limit: int = _SHOWN_MAX) -> str:
    """`value` as one printable line (the host's answers name a plugin's own tools and texts)."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def progress_said(progress: float, total: float | None, message: str | None) -> None:
    """The host's MCP progress of a long call, said on stderr."""
    done = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    said(shown(message) if message else done)


def said(line: str) -> None:
    """An installer's line, or the host's progress, on stderr as it comes."""
    print(f"  … {line}", file=sys.stderr, flush=True)


def cli_command() -> str:
    """This environment's console script, as a line to copy names it (else the bare name)."""
    beside = Path(sys.executable).parent / "mcp-host"
    return shlex.quote(str(beside)) if beside.exists() else "mcp-host"


def through_host(
    settings: Settings, tool: str, arguments: dict[str, Any], *, alone: str = "the plugin folders"
) -> tuple[Door, dict[str, Any]] | None:
    """Call `tool` on the owner door of the host running with the data directory: that host
    and its answer; None, having said so in one line (working on `alone` instead), when no host
    answers there."""
    data_dir = settings.data_dir
    door = find_door(data_dir)
    if door is None:
        offline(f"no host runs with data directory {data_dir}", alone)
        return None
    try:
        return door, anyio.run(call_door, door, tool, arguments, progress_said)
    except NoDoor:
        offline(f"the host in {data_dir / HOST_FILE} (pid {door.pid}) does not answer at {door.url}", alone)
        return None


def offline(why: str, alone: str = "the plugin folders") -> None:
    print(f"(offline: {why}; working on {alone} alone)", file=sys.stderr)


def one_line(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`run`, with the running host's refusal (exit 2) or failure (exit 1) as one line on stderr."""

    def guarded(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except DoorRefused as exc:
            print(f"mcp-host: {shown(exc.refusal.message)}", file=sys.stderr)
            return 2
        except DoorFailed as exc:
            print(f"mcp-host: {exc.message}", file=sys.stderr)
            return 1

    return guarded
