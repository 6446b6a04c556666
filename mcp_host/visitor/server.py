"""The MCP server behind every visitor session's endpoint: one low-level `Server`, per-session answers.

Above: `visitor_http` (authenticates the bearer token and puts the `Session` in the ASGI
scope, then hands the request to the SDK's session manager serving this server). Below:
`visitor_door` (tools and what a session may reach), `listings` (prompts and resources),
`input_rounds` (2026-07-28 calls waiting for the visitor's input), `change_feed` (list
changes), `visitor_client` (the client a child's requests reach).

Everything a child can do in MCP reaches the session's client and back:
- tools (lists assembled per session), prompts, resources, resource templates, completion;
- during a call: progress (when the client asked for it with a progress token), log messages
  (at the level the client set with `logging/setLevel`), and the child's elicitation,
  sampling and roots requests — as server→client requests on the call's own stream for a
  2025-11-25 client, as `InputRequiredResult` rounds for a 2026-07-28 client;
- cancellation: a cancelled call is cancelled in the child (`notifications/cancelled`);
- list changes: as classic notifications to 2025-11-25 clients, on `subscriptions/listen`
  streams for 2026-07-28 clients, only for sessions that see the child.
A child never speaks for the host: every result a child gave (tool results, lists, prompts,
resources, completions) passes `meta.without_host_keys` here before it is answered, so a child's
`mcp-host/quota`, `mcp-host/session` or reserved protocol keys (`io.modelcontextprotocol/…`,
its `serverInfo` stamp included) do not reach the visitor; `call_routing` does the same for
what a child sends unasked (log messages, requests). The host's own `_meta` (the quota
figures on `tools/list`) is written after. Lists are per session, so they are marked
`cacheScope: private` with no TTL (SECURITY.md E18).
"""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import mcp.types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.caching import CacheHint
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import trace

from mcp_host.access import Session
from mcp_host.backchannel import CallScope
from mcp_host.errors import HostError, InvalidArguments
from mcp_host.store import as_unavailable
from mcp_host.wire import MetaCaps, PushClient, error_result, forwarded_meta, log_sink, visitor_meta, without_host_keys

from .change_feed import ChangeFeed
from .door import VisitorDoor
from .input_rounds import InputRounds
from .listings import Surface, UnknownItem

__all__ = ["SCOPE_KEY", "SERVER_NAME", "SERVER_VERSION", "build_visitor_server"]

logger = logging.getLogger(__name__)

SCOPE_KEY = "mcp_host.session"
SERVER_NAME = "mcp-host"
SERVER_VERSION = "0.1.0"
RESOURCE_NOT_FOUND = -32002
_PRIVATE = CacheHint(ttl_ms=0, scope="private")
# Resource URIs one subscriptions/listen request may ask updates of.
_MAX_LISTEN_URIS = 32
# Log levels set with logging/setLevel, kept for this many sessions (the oldest are forgotten).
_MAX_LOG_LEVELS = 10_000


def session_of(ctx: ServerRequestContext[Any, Any]) -> Session:
    request = ctx.request
    session = request.scope.get(SCOPE_KEY) if request is not None else None
    if not isinstance(session, Session):  # the endpoint always sets it; fail closed if not
        raise PermissionError("request reached the visitor server without a session")
    return session


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


class _VisitorServer(Server[Any]):
    """Announces list changes to 2025-11-25 clients (the session manager's default options
    would not)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        options = notification_options or NotificationOptions(
            prompts_changed=True, resources_changed=True, tools_changed=True
        )
        return super().create_initialization_options(options, experimental_capabilities, extensions)


class _LogLevels:
    def __init__(self) -> None:
        self._levels: OrderedDict[str, types.LoggingLevel] = OrderedDict()

    def set(self, session_id: str, level: types.LoggingLevel) -> None:
        self._levels[session_id] = level
        self._levels.move_to_end(session_id)
        while len(self._levels) > _MAX_LOG_LEVELS:
            self._levels.popitem(last=False)

    def get(self, session_id: str) -> types.LoggingLevel | None:
        return self._levels.get(session_id)


def _as_mcp_error(exc: Exception, what: str) -> MCPError:
    if isinstance(exc, UnknownItem):
        code = RESOURCE_NOT_FOUND if what == "resources/read" else types.INVALID_PARAMS
        return MCPError(code=code, message=exc.message)
    if isinstance(exc, InvalidArguments):
        return MCPError(code=types.INVALID_PARAMS, message=exc.message)
    if isinstance(exc, HostError):
        return MCPError(code=types.INTERNAL_ERROR, message=exc.message)
    if (outage := as_unavailable(exc)) is not None:  # the database watch logs the outage, once
        return MCPError(code=types.INTERNAL_ERROR, message=outage.message)
    logger.error("%s failed unexpectedly", what, exc_info=exc)
    return MCPError(code=types.INTERNAL_ERROR, message=f"{what} failed inside the host")


def build_visitor_server(
    door: VisitorDoor,
    input_schema: Callable[[str], Mapping[str, Any] | None],
    *,
    rounds: InputRounds,
    feed: ChangeFeed,
    meta_caps: MetaCaps,
) -> Server[Any]:
    """The MCP server behind every visitor endpoint.

    `input_schema` answers the SDK's `Mcp-Param-*` header check (2026-07-28) from the last
    real lists; without it the SDK would run our whole `tools/list` before every call.
    """
    log_levels = _LogLevels()

    def remember(ctx: ServerRequestContext[Any, Any], session: Session) -> None:
        """A 2025-11-25 connection is told of list changes on its standalone stream."""
        request = ctx.request
        connection = request.headers.get("mcp-session-id") if request is not None else None
        if connection and not _modern(ctx):
            feed.keep_connection(session, connection, ctx.session)

    def item_meta(ctx: ServerRequestContext[Any, Any], session: Session) -> dict[str, Any]:
        kept = visitor_meta(dict(ctx.meta or {}), meta_caps)
        return forwarded_meta(kept, CallScope(session.owner_id, session).wire())

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        session = session_of(ctx)
        remember(ctx, session)
        listed = await door.list_tools(session)
        return types.ListToolsResult(tools=without_host_keys(listed.tools), _meta=listed.meta())

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        session = session_of(ctx)
        remember(ctx, session)
        meta = dict(ctx.meta or {})

        async def relay(progress: float, total: float | None, message: str | None) -> None:
            try:
                await ctx.session.report_progress(progress, total, message)
            except Exception:  # the visitor's stream ended (e.g. a call parked between rounds)
                logger.debug("session %s: a progress notice could not be passed on", session.id)

        asked = meta.get("progress_token", meta.get("progressToken")) is not None
        relay_progress = relay if asked else None
        if _modern(ctx):
            try:
                return without_host_keys(
                    await rounds.call(
                        session.id,
                        ctx.session.client_capabilities,
                        params,
                        lambda client: door.call_tool(
                            session, params.name, params.arguments, meta, relay_progress, client
                        ),
                        log_sink(ctx, None),
                    )
                )
            except HostError as exc:
                return error_result(exc.code, exc.message)
        client = PushClient(ctx, session.id, log_levels.get(session.id))
        result = await door.call_tool(session, params.name, params.arguments, meta, relay_progress, client)
        return without_host_keys(result)

    async def set_level(ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        log_levels.set(session_of(ctx).id, params.level)
        return types.EmptyResult()

    async def surface(ctx: ServerRequestContext[Any, Any], *, fresh: bool = True) -> tuple[Session, Surface]:
        session = session_of(ctx)
        remember(ctx, session)
        return session, await door.surface(session, fresh=fresh)

    async def owner_of(ctx: ServerRequestContext[Any, Any], pick: Callable[[Surface], str]) -> tuple[Session, str]:
        """The session, and the capability `pick` finds in its surface: from the children's last
        lists, and listed afresh when those do not have it (a prompt or resource added since)."""
        session, found = await surface(ctx, fresh=False)
        try:
            return session, pick(found)
        except UnknownItem:
            _, found = await surface(ctx)
            return session, pick(found)

    async def list_prompts(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        _, found = await surface(ctx)
        return types.ListPromptsResult(prompts=without_host_keys([p for _, p in found.prompts.values()]))

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        try:
            session, owner = await owner_of(ctx, lambda found: door.listings.prompt_owner(found, params.name))
            child = door.child_for(owner)
            forwarded = params.model_copy(update={"meta": item_meta(ctx, session)})
            result = await child.forward(
                types.GetPromptRequest(params=forwarded), types.GetPromptResult, timeout_s=door.call_timeout_s
            )
        except Exception as exc:
            raise _as_mcp_error(exc, "prompts/get") from None
        return without_host_keys(result)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        _, found = await surface(ctx)
        return types.ListResourcesResult(resources=without_host_keys([r for _, r in found.resources.values()]))

    async def list_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        _, found = await surface(ctx)
        return types.ListResourceTemplatesResult(resource_templates=without_host_keys([t for _, t in found.templates]))

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        try:
            session, owner = await owner_of(ctx, lambda found: door.listings.resource_owner(found, str(params.uri)))
            child = door.child_for(owner)
            forwarded = params.model_copy(update={"meta": item_meta(ctx, session)})
            result = await child.forward(
                types.ReadResourceRequest(params=forwarded), types.ReadResourceResult, timeout_s=door.call_timeout_s
            )
        except Exception as exc:
            raise _as_mcp_error(exc, "resources/read") from None
        return without_host_keys(result)

    async def subscribe_child(session: Session, uri: str) -> None:
        """Ask the child that serves `uri` for its updates (one subscription serves every session)."""
        found = await door.surface(session, fresh=False)
        child = door.child_for(door.listings.resource_owner(found, uri))
        served = (await child.capabilities()).resources
        if served is None or not served.subscribe:
            return  # the child sends its updates unasked, or never: the session still listens
        await child.forward(
            types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)),
            types.EmptyResult,
            timeout_s=door.call_timeout_s,
        )

    async def subscribe(ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
        session = session_of(ctx)
        remember(ctx, session)
        uri = str(params.uri)
        try:
            await subscribe_child(session, uri)
        except Exception as exc:
            raise _as_mcp_error(exc, "resources/subscribe") from None
        feed.subscribe_uri(session, uri)
        return types.EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        # The child keeps its subscription (other sessions may hold one); this session stops hearing.
        feed.unsubscribe_uri(session_of(ctx), str(params.uri))
        return types.EmptyResult()

    async def complete(
        ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        try:
            ref = params.ref
            if isinstance(ref, types.PromptReference):
                session, owner = await owner_of(ctx, lambda found: door.listings.prompt_owner(found, ref.name))
            else:
                session, owner = await owner_of(ctx, lambda found: door.listings.template_owner(found, ref.uri))
            forwarded = params.model_copy(update={"meta": item_meta(ctx, session)})
            result = await door.child_for(owner).forward(
                types.CompleteRequest(params=forwarded), types.CompleteResult, timeout_s=door.call_timeout_s
            )
        except Exception as exc:
            raise _as_mcp_error(exc, "completion/complete") from None
        return without_host_keys(result)

    async def listen(
        ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        session = session_of(ctx)
        try:
            for uri in (params.notifications.resource_subscriptions or [])[:_MAX_LISTEN_URIS]:
                await subscribe_child(session, str(uri))
        except Exception as exc:
            raise _as_mcp_error(exc, "resources/read") from None  # an unknown URI: not found
        try:
            return await ListenHandler(feed.bus(session))(ctx, params)
        except OverflowError as exc:  # raised when subscribing, before the stream starts
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None

    with warnings.catch_warnings():
        # logging/setLevel is deprecated at 2026-07-28 but is 2025-11-25's: both eras are served.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = _VisitorServer(
            SERVER_NAME,
            version=SERVER_VERSION,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_prompts=list_prompts,
            on_get_prompt=get_prompt,
            on_list_resources=list_resources,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
            on_subscribe_resource=subscribe,
            on_unsubscribe_resource=unsubscribe,
            on_completion=complete,
            on_set_logging_level=set_level,
            on_subscriptions_listen=listen,
            get_tool_input_schema=input_schema,
            cache_hints={
                "tools/list": _PRIVATE,
                "prompts/list": _PRIVATE,
                "resources/list": _PRIVATE,
                "resources/templates/list": _PRIVATE,
                "resources/read": _PRIVATE,
            },
        )
    if _no_tracing_configured():
        # The SDK's OpenTelemetry middleware builds a span per message even when nothing
        # records it: ~5% of the host's CPU per call. Keep it only when tracing is set up.
        server.middleware = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]
    return server


def _no_tracing_configured() -> bool:
    return isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
