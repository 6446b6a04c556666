"""The remote-servers slice of the owner tool table: signing the host in to a remote plugin's
server that asks for OAuth (`remote_connect` returns the URL the owner opens; the browser comes
back to the host's `/oauth/callback`, which finishes it), how that sign-in stands
(`remote_status`), and signing out (`remote_disconnect`: revoked at the server, deleted here).

Above: `tools` (the one table), and the console's Connect link (`owner_console`). Below:
`services` (`mcp_host.children.RemoteSignIns`).
"""

from __future__ import annotations

from typing import Any

from mcp_host.children import RemoteSignIns
from mcp_host.errors import InvalidArguments

from .models import RemoteCapability
from .owner_tool import Answer, OwnerTool, loaded_capability
from .services import OwnerServices

__all__ = ["REMOTE_TOOLS"]


def _sign_ins(s: OwnerServices) -> RemoteSignIns:
    if s.sign_ins is None:
        raise InvalidArguments("this host signs in to no remote server")
    return s.sign_ins


async def _remote_connect(s: OwnerServices, owner_id: str, a: RemoteCapability) -> Answer:
    plugin = loaded_capability(s, a.capability)
    sign_ins = _sign_ins(s)
    url = await sign_ins.connect(plugin)
    return {
        "capability": plugin.manifest.id,
        "url": url,
        "callback": sign_ins.callback_url,
        "next": "Open the url in a browser and sign in; the server sends the browser back to the host, "
        "which finishes the sign-in. remote_status tells how it ended.",
    }


async def _remote_status(s: OwnerServices, owner_id: str, a: RemoteCapability) -> Answer:
    plugin = loaded_capability(s, a.capability)
    return await _sign_ins(s).status(plugin.manifest.id)


async def _remote_disconnect(s: OwnerServices, owner_id: str, a: RemoteCapability) -> Answer:
    plugin = loaded_capability(s, a.capability)
    had = await _sign_ins(s).forget(plugin)
    if s.admin is not None:
        s.admin.children.stop_plugin(plugin.manifest.id)  # its running sessions held the token
    return {"capability": plugin.manifest.id, "signed_out": had}


REMOTE_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "remote_connect",
        "Sign the host in to a remote plugin's server that asks for a sign-in (OAuth): returns the url "
        "the owner opens in a browser. When the server sends the browser back, the host finishes the "
        "sign-in; every visitor who may see the plugin then uses it. remote_status tells how it ended.",
        RemoteCapability,
        _remote_connect,
    ),
    OwnerTool(
        "remote_status",
        "A remote plugin's sign-in: connected, expired or needs_sign_in (with why), whether a started "
        "sign-in waits for the browser (and its url), and how the last one ended.",
        RemoteCapability,
        _remote_status,
    ),
    OwnerTool(
        "remote_disconnect",
        "Sign the host out of a remote plugin's server: its tokens are revoked at the server (when it "
        "can revoke) and deleted here; calls then need a new sign-in.",
        RemoteCapability,
        _remote_disconnect,
    ),
]
