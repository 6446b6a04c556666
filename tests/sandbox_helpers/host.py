"""A stand-in host for tests/test_sandbox.py: the process whose SIGKILL a sandbox must not outlive.

Usage: host.py ARGV_JSON. Spawns ARGV (a `build_command` argv running the escape plugin)
through the MCP SDK's stdio client, asks the child to start a detached daemon, writes the
daemon's pid (as the sandbox sees it) as one line to stdout, then waits to be killed.
"""

from __future__ import annotations

import json
import sys

import anyio
from mcp import Client, StdioServerParameters


async def main(argv: list[str]) -> None:
    params = StdioServerParameters(command=argv[0], args=argv[1:], env={})
    async with Client(params, read_timeout_seconds=20) as client:
        result = await client.call_tool("spawn_daemon", {"path": "/tmp/heartbeat"})
        assert not result.is_error, result.content
        sys.stdout.write(json.dumps(result.structured_content) + "\n")
        sys.stdout.flush()
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]))
