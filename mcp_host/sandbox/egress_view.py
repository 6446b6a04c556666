"""What a sandbox with egress gets beyond an offline one: the host's proxy socket, the bridge that
carries the child's TCP connections to it, the proxy variables, the Node preload and the CA files.

The child keeps its own network namespace (loopback only). Its command runs behind the bridge
(`mcp_host/egress/bridge.py`, stdlib only, run by the host's base interpreter with `-I -S`),
which listens on `PROXY_URL`'s port inside, forks a process that carries each connection to the
proxy's unix socket bound at `SOCKET_INSIDE`, and execs the command. Every HTTP client that
reads the proxy variables goes through it (Python's urllib, httpx, requests; curl; Node >= 24
with NODE_USE_ENV_PROXY; Node 20's fetch through the preload); raw TCP by a CONNECT or SOCKS5 on
the same port. The proxy resolves names: no resolver file is bound.

Above: `bwrap`, which adds these to its argv when `SandboxSpec.egress_socket` is set. Below:
`interpreter` (the base Python) and the two files in `mcp_host/egress/`, found by path (they run
inside, nothing here imports them). Pure: no file opened, no process.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .interpreter import base_executable, base_trees, hidden_in

__all__ = [
    "BRIDGE_INSIDE",
    "CA_FILES",
    "PRELOAD_INSIDE",
    "PROXY_URL",
    "SOCKET_INSIDE",
    "bridge_argv",
    "egress_env",
    "file_binds",
    "interpreter_hidden",
    "interpreter_trees",
]

SOCKET_INSIDE = "/run/mcp-host/egress.sock"
BRIDGE_INSIDE = "/run/mcp-host/egress-bridge.py"
PRELOAD_INSIDE = "/run/mcp-host/egress-node.cjs"
_LISTEN = "127.0.0.1:3128"
PROXY_URL = f"http://{_LISTEN}"
# TLS trust, exactly these (never all of /etc/ssl: its private/ holds keys the sandbox's root
# could read); the certs folder's links point into /usr/share, bound whole.
CA_FILES = ("/etc/ssl/certs", "/etc/ssl/openssl.cnf")

_EGRESS_DIR = Path(__file__).resolve().parent.parent / "egress"
_BRIDGE = _EGRESS_DIR / "bridge.py"
_PRELOAD = _EGRESS_DIR / "node_preload.cjs"
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def file_binds(egress_socket: Path) -> tuple[tuple[tuple[Path, str], ...], tuple[Path, str]]:
    """((the bridge, the preload) read-only binds, the socket's read-write bind)."""
    return ((_BRIDGE, BRIDGE_INSIDE), (_PRELOAD, PRELOAD_INSIDE)), (egress_socket, SOCKET_INSIDE)


def interpreter_trees() -> tuple[Path, ...]:
    """The base interpreter's trees, bound read-only at their own paths (none under /usr)."""
    return tuple(sorted(tree for tree in base_trees() if not tree.is_relative_to("/usr")))


def interpreter_hidden() -> tuple[str, ...]:
    """The base interpreter's own site-packages: the bridge needs only the standard library."""
    return hidden_in(interpreter_trees())


def bridge_argv() -> list[str]:
    """What runs before the command (after prlimit, so the bridge is inside the limits)."""
    python = str(base_executable())
    return [python, "-I", "-S", BRIDGE_INSIDE, "--listen", _LISTEN, "--socket", SOCKET_INSIDE, "--"]


def egress_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the proxy variables (set over any of the manifest's: the proxy is the only way
    out), NO_PROXY empty, and the Node preload appended to its NODE_OPTIONS."""
    out = dict(env)
    out.update(dict.fromkeys(_PROXY_VARIABLES, PROXY_URL))
    out.update({"NO_PROXY": "", "no_proxy": "", "NODE_USE_ENV_PROXY": "1"})
    own = env.get("NODE_OPTIONS", "").strip()
    out["NODE_OPTIONS"] = f"{own} --require {PRELOAD_INSIDE}".strip()
    return out
