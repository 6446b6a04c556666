"""The command line as a client of the running host's owner door: `mcp-host plugin add|list|
remove|upgrade` call `plugin_add`, `plugins_list`, `plugin_remove` and `plugin_upgrade` there, so
the host takes the change at once instead of at its next start.

Above: `plugin_commands` (what each command prints). Below: `host_file` (where the host of a
data directory listens), the owner token file (`access`), the MCP SDK client over streamable
HTTP (`owner`'s path to the door).

Three outcomes besides an answer, each its own exception so the caller cannot mix them up:
`NoDoor` — nothing answered at the host file's address (a stale file: the caller works offline);
`DoorFailed` — a host was reached but the call did not complete (one sentence); `TokenRefused`,
one of them, when the host refused the owner token (the caller may name the token's file);
`DoorRefused` — the door answered with a refusal (its `{code, message}`).

`mcp-host owner profile` calls the door through here too (`cli`), with a URL it was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mcp_host.access import OWNER_TOKEN_FILE
from mcp_host.errors import HostError, Unavailable
from mcp_host.wire import Refusal, refusal_of

from .host_file import read_host_file

__all__ = ["Door", "DoorFailed", "DoorRefused", "NoDoor", "TokenRefused", "call_door", "find_door"]


class Progress(Protocol):
    """What gets the call's MCP progress notifications (the SDK's progress callback's shape)."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


# A call waits this long between two messages from the host (progress arrives every ~1 s while
# npm or pip runs; listing a new plugin's tools may take up to a minute without one).
_READ_WAIT_S = 300.0
_CONNECT_WAIT_S = 10.0


class NoDoor(Unavailable):
    """Nothing answered at the address the host file names: the host is gone (a stale file)."""

    def __init__(self, message: str = "no host answers at the address its host file names") -> None:
        super().__init__(message)


class DoorFailed(Unavailable):
    """A host was found but the call did not complete; `message` says why in one sentence."""


class TokenRefused(DoorFailed):
    """The host answered 401: the owner token is not this host's (another data directory's, or
    rotated since)."""


class DoorRefused(HostError):
    """The owner door refused the call; `refusal` is its `{code, message}`."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@dataclass(frozen=True)
class Door:
    """The owner door of the host running with a data directory."""

    url: str  # the host's base URL
    pid: int | None  # None: a host named by its URL alone (`owner profile --url`)
    token: str

    @property
    def named(self) -> str:
        """The host as a message names it: its URL, and its pid when known."""
        return self.url if self.pid is None else f"{self.url} (pid {self.pid})"


def find_door(data_dir: Path) -> Door | None:
    """The owner door of the host running with `data_dir`; None when none runs there (no host
    file, or its process is gone). `DoorFailed` when one runs but there is no owner token."""
    record = read_host_file(data_dir)
    if record is None:
        return None
    path = data_dir / OWNER_TOKEN_FILE
    try:
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    if not token:
        raise DoorFailed(
            f"a host runs with data directory {data_dir} (pid {record.pid}) but there is no owner token at {path}:"
            f" `mcp-host owner token --rotate --data-dir {data_dir}` makes one"
        )
    return Door(url=record.url.rstrip("/"), pid=record.pid, token=token)


async def call_door(
    door: Door, tool: str, arguments: dict[str, Any], on_progress: Progress | None = None
) -> dict[str, Any]:
    """Call owner tool `tool` with `arguments`, reporting its progress to `on_progress` (if
    any); its structured answer. Raises `NoDoor`, `DoorFailed` or `DoorRefused` (see the module)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from mcp_host.owner import OWNER_MCP_PATH

    statuses: list[int] = []

    async def note(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    headers = {"Authorization": f"Bearer {door.token}"}
    timeout = httpx2.Timeout(_CONNECT_WAIT_S, read=_READ_WAIT_S)
    try:
        async with httpx2.AsyncClient(
            headers=headers, timeout=timeout, trust_env=False, event_hooks={"response": [note]}
        ) as http:
            transport = streamable_http_client(door.url + OWNER_MCP_PATH, http_client=http)
            async with Client(transport, cache=None) as client:
                result = await client.call_tool(tool, arguments, progress_callback=on_progress)
    except Exception as exc:
        raise _failure(exc, door, statuses) from None
    refusal = refusal_of(result)
    if refusal is not None:
        raise DoorRefused(refusal)
    if result.is_error or not isinstance(result.structured_content, dict):
        raise DoorFailed(f"the owner door at {door.url} gave {tool} no answer it could read")
    return result.structured_content


def _leaves(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    stack = [exc]
    while stack:
        current = stack.pop()
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        else:
            found.append(current)
    return found


def _failure(exc: Exception, door: Door, statuses: list[int]) -> Exception:
    """What a failed call means: nobody there (`NoDoor`), or one sentence (`DoorFailed`)."""
    import httpx2

    leaves = _leaves(exc)
    if not statuses and any(isinstance(leaf, httpx2.ConnectError | ConnectionRefusedError) for leaf in leaves):
        return NoDoor()
    if 401 in statuses:
        return TokenRefused(
            f"the host at {door.url} refused the owner token of this data directory: is it another host's?"
            " (`mcp-host owner token --rotate` issues a new one)"
        )
    if any(isinstance(leaf, httpx2.TimeoutException) for leaf in leaves):
        return DoorFailed(f"the host at {door.named} stopped answering; `plugin list` shows what it did")
    name = type(leaves[0]).__name__ if leaves else "no cause"
    return DoorFailed(f"the owner door at {door.named} did not complete the call ({name})")
