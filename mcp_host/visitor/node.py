"""The node endpoint: `/v1/node/mcp` (and `/v1/node/mcp/{capability}`), where a node — another
host holding a node grant's token as bearer — lists and calls the capabilities lent to it.

Above: the composition root (routes and the SDK's session manager). Below: `policy.NodeGrants`
(the decision at call time: genuine, live, names the capability, the owner's rules and holds,
one call of the budget spent exactly), `bindings` (the tools as the owner approved them),
`children` (the forwarded call, in owner context: the parent's own instance), `grants` (the
host-op token of a plugin that named host ops), `wire` (the forwarded `_meta`).

Names: a tool is listed under the name the parent's visitor sessions see (its plugin's own
name), not prefixed. The capability it belongs to rides its `_meta["mcp-host/capability"]`,
and `/v1/node/mcp/{capability}` lists and calls that one capability only: the node makes one
remote capability of each (its own pins, ACL and quota apply to each), so a prefix would only
rename the tools its visitors and plugins already know.

A bearer that is no grant's token gets 401 at the HTTP edge; a revoked, expired or spent
grant's passes, lists nothing, and each call is answered `denied`. A call is decided when it
is made: any refusal is the tool result `denied` and nothing more (the parent's audit, row
`node_call`, says why, with the node's request id from `_meta["mcp-host/request-id"]`, else a
node host's call id `mcp-host/call`); a held call is `held` (the parent's owner decides; the node
calls again). The call then runs as an owner-context call (scope: the owner; the grant named
in the audit), through the same `Child.call_tool` and `_meta` shaping the visitor door uses.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import mcp.types as types
from mcp.server import Server, ServerRequestContext
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_host.backchannel import CallScope, GrantBook, named_ops
from mcp_host.children import ChildSource
from mcp_host.edge import Unauthorized, authenticated, rest_response
from mcp_host.errors import UnknownTool, at_boundary, tool_error
from mcp_host.observe import untraced
from mcp_host.plugins import Plugin, Registry
from mcp_host.policy import NodeGrant, NodeGrants
from mcp_host.wire import forwarded_meta, without_host_keys
from mcp_host_kit.contract import CALL_KEY, CAPABILITY_KEY, REQUEST_ID_KEY

from .bindings import Bindings
from .http import bearer_token

__all__ = ["NODE_PATH", "NodeDoor", "NodeMCPEndpoint", "build_node_server"]

logger = logging.getLogger(__name__)

NODE_PATH = "/v1/node/mcp"
_SCOPE_KEY = "mcp_host.node"


def request_id_of(meta: Any) -> str:
    """The node's request id from a call's `_meta` (a short printable string): its
    `mcp-host/request-id`, else the id a node host's forwarded call carries (`mcp-host/call`,
    which the node's child routing names the call by); else a new one."""
    for key in (REQUEST_ID_KEY, CALL_KEY):
        given = meta.get(key) if isinstance(meta, dict) else None
        if isinstance(given, str) and 0 < len(given) <= 100 and given.isprintable():
            return given
    return "parent-" + secrets.token_hex(8)


class NodeDoor:
    """What a node may list and call under its grant."""

    def __init__(
        self,
        plugins: Registry,
        bindings: Bindings,
        child_of: ChildSource,
        *,
        grants: GrantBook,
        node_grants: NodeGrants,
        call_timeout_s: float,
    ) -> None:
        self._plugins = plugins
        self._bindings = bindings
        self._child_of = child_of
        self._grants = grants
        self._node_grants = node_grants
        self._call_timeout_s = call_timeout_s

    @property
    def grants(self) -> NodeGrants:
        return self._node_grants

    def _lent(self, grant: NodeGrant, only: str | None) -> list[Plugin]:
        names = set(grant.capabilities) if only is None else set(grant.capabilities) & {only}
        return [p for p in self._plugins.capabilities if p.manifest.id in names]

    async def list_tools(self, grant: NodeGrant, only: str | None) -> list[types.Tool]:
        """The lent tools (none once the grant is revoked, expired or spent)."""
        if not grant.live() or grant.used >= grant.calls:
            return []
        toolset = await self._bindings.assemble(self._lent(grant, only), fresh=True)
        return [
            b.tool.model_copy(update={"meta": {**(b.tool.meta or {}), CAPABILITY_KEY: b.capability}})
            for b in toolset.tools.values()
        ]

    async def call_tool(
        self, token: str, only: str | None, name: str, arguments: dict[str, Any] | None, meta: Any
    ) -> types.CallToolResult:
        """The boundary of a node's call: every error becomes `{code, message}` (never its text)."""
        request_id = request_id_of(meta)
        try:
            return await self._call(token, only, name, arguments, request_id)
        except Exception as exc:
            known = at_boundary(exc, logger, "node call %s (request %s)", name[:80], request_id)
            return tool_error(known or exc, structured=False)

    async def _call(
        self, token: str, only: str | None, name: str, arguments: dict[str, Any] | None, request_id: str
    ) -> types.CallToolResult:
        known = await self._node_grants.genuine(token)  # live or not: `admit` decides, and audits why
        lent = self._lent(known, only) if known is not None else []
        binding = (await self._bindings.assemble(lent, fresh=False)).tools.get(name) if lent else None
        if binding is None:
            logger.info("node call %s (request %s): no such tool under the grant", name[:80], request_id)
            raise UnknownTool(f"no tool named {name[:80]!r} is available to this node")
        hints = (
            binding.tool.annotations.model_dump(by_alias=True, exclude_none=True) if binding.tool.annotations else {}
        )
        grant = await self._node_grants.admit(token, binding.capability, name, hints, arguments, request_id)
        plugin = self._plugins.get(binding.capability, "capability")
        if plugin is None:
            raise UnknownTool(f"no tool named {name[:80]!r} is available to this node")
        child = self._child_of(plugin, None)  # owner context: the parent's own instance
        scope = CallScope(grant.owner_id)
        kept = {REQUEST_ID_KEY: request_id}
        with child.router.serving(None) as call:
            if not named_ops(plugin):
                result = await child.call_tool(
                    name, arguments, forwarded_meta(kept, scope.wire()), timeout_s=self._call_timeout_s, call=call
                )
            else:
                with self._grants.issue(plugin.manifest.id, scope, name, call) as (host_ops, _):
                    meta_out = forwarded_meta(kept, scope.wire(), host_ops)
                    result = await child.call_tool(name, arguments, meta_out, timeout_s=self._call_timeout_s, call=call)
        return without_host_keys(result)


def _node_of(ctx: ServerRequestContext[Any, Any]) -> tuple[str, NodeGrant, str | None]:
    request = ctx.request
    found = request.scope.get(_SCOPE_KEY) if request is not None else None
    if not isinstance(found, tuple):  # the endpoint always sets it; fail closed if not
        raise PermissionError("request reached the node server without a grant")
    return found


def build_node_server(door: NodeDoor) -> Server[Any]:
    """The MCP server behind `/v1/node/mcp`."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        _, grant, only = _node_of(ctx)
        return types.ListToolsResult(tools=await door.list_tools(grant, only))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        token, _, only = _node_of(ctx)
        meta = dict(params.meta) if params.meta is not None else None
        return await door.call_tool(token, only, params.name, params.arguments, meta)

    server: Server[Any] = Server("mcp-host-parent", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)
    return untraced(server)


class NodeMCPEndpoint:
    """ASGI endpoint of `/v1/node/mcp[/{capability}]`: a grant's token, then the SDK. A revoked
    or expired grant's token still passes here, so its node's next call is answered `denied`
    (decided at call time, audited) rather than an HTTP error."""

    def __init__(self, grants: NodeGrants, mcp_app: ASGIApp) -> None:
        self._grants = grants
        self._mcp_app = mcp_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = bearer_token(scope)
        grant = await self._grants.genuine(token) if token else None
        if token is None or grant is None:
            await rest_response(Unauthorized("the node endpoint needs a grant's token", realm="mcp-host-node"))(
                scope, receive, send
            )
            return
        only = scope.get("path_params", {}).get("capability")
        scope[_SCOPE_KEY] = (token, grant, only if isinstance(only, str) else None)
        authenticated(scope, f"node:{grant.id}")
        await self._mcp_app(scope, receive, send)
