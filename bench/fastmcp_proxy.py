"""FastMCP's proxy in front of the bench echo child, served over streamable HTTP (leg f).

Run by the FastMCP virtual environment's python (not the host's):
`python fastmcp_proxy.py PORT CHILD_PYTHON CHILD_SERVER_PY`. The child is the same SDK-v2 echo
server the other legs use, started over stdio by FastMCP (kept alive between requests, FastMCP's
default) with the host's python. The endpoint is `http://127.0.0.1:PORT/mcp`.
"""

import sys
from pathlib import Path

from fastmcp.client.transports import StdioTransport
from fastmcp.server import create_proxy


def main(port: int, child_python: str, child_server: str) -> None:
    backend = StdioTransport(
        command=child_python,
        args=[child_server],
        env={"ECHO_TOOL_NAME": "echo"},
        cwd=str(Path(child_server).parent),
    )
    proxy = create_proxy(backend, name="fastmcp-proxy")
    proxy.run(transport="http", host="127.0.0.1", port=port, show_banner=False, log_level="WARNING")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
