"""A hostile test capability written by hand (no SDK): on `flood` it writes 64 MiB to stdout
with no newline, and floods stderr, to prove the host caps what it reads."""

import json
import sys

out = sys.stdout.buffer


def send(message: dict) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


for line in sys.stdin.buffer:
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {
                    "protocolVersion": request["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "flood", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {"tools": [{"name": "flood", "inputSchema": {"type": "object"}}]},
            }
        )
    elif method == "tools/call":
        chunk = b"x" * (1 << 20)
        for _ in range(64):
            sys.stderr.buffer.write(b"e" * 4096 + b"\n")
            out.write(chunk)
        out.flush()
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}})
