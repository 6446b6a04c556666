"""The MCP server behind every visitor session's endpoint: one low-level `Server`, per-session answers.

Above: `visitor.http` (authenticates the bearer token and puts the `Session` in the ASGI
scope, then hands the request to the SDK's session manager serving this server). Below:
`visitor.door` (tools and what a session may reach), `listings` (prompts and resources),
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
  streams for 2026-07-28 clients, only for sessions that see the child; the change a
  2025-11-25 client's `find_tools` makes to its own list rides that call's stream, before
  the result (`ChangeFeed.answering`);
- MCP tasks (2025-11-25, `visitor.tasks`): task status notifications to the connection that
  made the task, a task's elicitation and sampling on the stream of its `tasks/result`; a
  2026-07-28 session is neither offered nor let call a task-required tool.
A child never speaks for the host: every result a child gave (lists, prompts, resources,
completions here; tool results in `visitor.door`, before the host writes its own refusal's
`mcp-host/error`) passes `meta.without_host_keys` before it is answered, so a child's
`mcp-host/quota`, `mcp-host/session` or reserved protocol keys (`io.modelcontextprotocol/…`,
its `serverInfo` stamp included) do not reach the visitor; `call_routing` does the same for
what a child sends unasked (log messages, requests). The host's own `_meta` (the quota
figures on `tools/list`) is written after. Lists are per session, so they are marked
`cacheScope: private` with no TTL (docs/security.md E18).
"""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, TypeVar

import mcp.types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_host.access import Session
from mcp_host.backchannel import CallScope
from mcp_host.errors import (
    INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
    HostError,
    Unavailable,
    at_boundary,
    rpc_error,
    tool_error,
)
from mcp_host.observe import untraced
from mcp_host.wire import APPS_SETTINGS, MetaCaps, PushClient, forwarded_meta, log_sink, visitor_meta, without_host_keys

from .change_feed import ChangeFeed
from .door import VisitorDoor
from .input_rounds import InputRounds
from .listings import Surface, UnknownItem
from .tasks import TaskBook, VisitorTasks, hidden_for_modern, offered_in_modern
from .tool_search import FIND_TOOLS

__all__ = ["PRIVATE_HINT", "SCOPE_KEY", "SERVER_NAME", "SERVER_VERSION", "VisitorServer", "build_visitor_server"]

logger = logging.getLogger(__name__)

SCOPE_KEY = "mcp_host.session"
SERVER_NAME = "mcp-host"
SERVER_VERSION = "0.1.0"
PRIVATE_HINT = CacheHint(ttl_ms=0, scope="private")
"""The cache hint of the per-session answers (lists, reads): private, no TTL (docs/security.md E18)."""
# Resource URIs one subscriptions/listen request may ask updates of.
_MAX_LISTEN_URIS = 32
# What a listen request is told when no more listen streams can be opened.
_LISTENERS_FULL = "no more listen streams can be opened now; close one or try again later"
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


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The 2025-11-25 connection (`Mcp-Session-Id`) the request came on; None at 2026-07-28."""
    request = ctx.request
    connection = request.headers.get("mcp-session-id") if request is not None else None
    return connection if connection and not _modern(ctx) else None


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

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        """The SDK's capabilities with MCP Apps (`wire.apps`: the host carries them, whichever
        child serves one), plus task-augmented `tools/call` (with `tasks/list` and
        `tasks/cancel`) for the handshake era: `visitor.tasks` passes them to the child."""
        extensions = {**(extensions or self.extensions), **APPS_SETTINGS}
        found = super().get_capabilities(
            notification_options, experimental_capabilities, extensions, protocol_version=protocol_version
        )
        if protocol_version in MODERN_PROTOCOL_VERSIONS:
            return found
        return found.model_copy(update={"tasks": _TASKS})


_TASKS = types.ServerTasksCapability(
    list=types.TasksListCapability(),
    cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())),
)


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


P = TypeVar("P", bound=types.RequestParams)
R = TypeVar("R", bound=types.Result)


class VisitorServer:
    """The MCP server behind every visitor endpoint: one method per MCP method, and `server`,
    the SDK's low-level `Server` that calls them.

    This is the visitor face's boundary for the methods other than `tools/call` (whose
    boundary is `VisitorDoor.call_tool`): `_rpc_error` turns an exception into a JSON-RPC
    error with `errors.rpc_error`, after logging with its traceback what is neither a
    `HostError` nor a database outage, or is an `InternalError`.
    """

    def __init__(
        self,
        door: VisitorDoor,
        input_schema: Callable[[str], Mapping[str, Any] | None],
        *,
        rounds: InputRounds,
        feed: ChangeFeed,
        meta_caps: MetaCaps,
        tasks: TaskBook | None = None,
    ) -> None:
        """`input_schema` answers the SDK's `Mcp-Param-*` header check (2026-07-28) from the last
        real lists; without it the SDK would run our whole `tools/list` before every call.
        `tasks`: where the sessions' MCP tasks are remembered (None: a book of the defaults'
        own, whose tasks are forgotten at their ttl but cancelled only by its `keep`)."""
        self._door = door
        self._rounds = rounds
        self._feed = feed
        self._meta_caps = meta_caps
        self._log_levels = _LogLevels()
        self._tasks = VisitorTasks(door, meta_caps, tasks)
        with warnings.catch_warnings():
            # logging/setLevel is deprecated at 2026-07-28 but is 2025-11-25's: both eras are served.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            server: Server[Any] = _VisitorServer(
                SERVER_NAME,
                version=SERVER_VERSION,
                on_list_tools=self.list_tools,
                on_list_prompts=self.list_prompts,
                on_get_prompt=self.get_prompt,
                on_list_resources=self.list_resources,
                on_list_resource_templates=self.list_templates,
                on_read_resource=self.read_resource,
                on_subscribe_resource=self.subscribe,
                on_unsubscribe_resource=self.unsubscribe,
                on_completion=self.complete,
                on_set_logging_level=self.set_level,
                on_subscriptions_listen=self.listen,
                get_tool_input_schema=input_schema,
                cache_hints={
                    "tools/list": PRIVATE_HINT,
                    "prompts/list": PRIVATE_HINT,
                    "resources/list": PRIVATE_HINT,
                    "resources/templates/list": PRIVATE_HINT,
                    "resources/read": PRIVATE_HINT,
                },
            )
        # Registered as a plain handler: a 2025-11-25 call may answer the child's plain result as a
        # dict (`_handshake_call`), which `on_call_tool`'s type does not name.
        server.add_request_handler("tools/call", types.CallToolRequestParams, self.call_tool)
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self.get_task)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self.task_result)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self.cancel_task)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self.list_tasks)
        server.middleware.append(self._task_calls)
        self.server = untraced(server)
        """The SDK's server; its OpenTelemetry middleware is kept only when tracing is set up."""

    # -- tools ---------------------------------------------------------------------------------

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        session = self._session(ctx)
        listed = await self._door.list_tools(session)
        tools = hidden_for_modern(listed.tools) if _modern(ctx) else listed.tools
        return types.ListToolsResult(tools=without_host_keys(tools), _meta=listed.meta())

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
        session = self._session(ctx)
        meta = dict(ctx.meta or {})

        async def relay(progress: float, total: float | None, message: str | None) -> None:
            try:
                await ctx.session.report_progress(progress, total, message)
            except Exception:  # the visitor's stream ended (e.g. a call parked between rounds)
                logger.debug("session %s: a progress notice could not be passed on", session.id)

        asked = meta.get("progress_token", meta.get("progressToken")) is not None
        relay_progress = relay if asked else None
        # The door drops what a child's result says for the host (`without_host_keys`) and adds
        # its own refusal's `_meta`: its answer is passed on as it is.
        if _modern(ctx):
            try:
                return await self._rounds.call(
                    session.id,
                    ctx.session.client_capabilities,
                    params,
                    lambda client: self._door.call_tool(
                        session, params.name, params.arguments, meta, relay_progress, client, offered=offered_in_modern
                    ),
                    log_sink(ctx, None),
                )
            except HostError as exc:  # a requestState that is not this call's; the call itself never raises
                return tool_error(exc, structured=False)  # the tool is not resolved: it may declare an outputSchema
        client = PushClient(ctx, session.id, self._log_levels.get(session.id))
        connection = _connection_of(ctx)
        if params.name != FIND_TOOLS or connection is None:
            return await self._handshake_call(session, params, meta, relay_progress, client)
        # find_tools grows the session's working set: the list change rides this call's stream,
        # before its result, rather than the standalone stream after it (`ChangeFeed.answering`).
        with self._feed.answering(session.id, connection) as answering:
            result = await self._handshake_call(session, params, meta, relay_progress, client)
        if answering.tools_changed:
            try:
                changed = types.ToolListChangedNotification()
                await ctx.session.send_notification(changed, related_request_id=ctx.request_id)
            except Exception:  # the visitor's stream ended; the result cannot reach it either
                logger.debug("session %s: a change notice could not be sent", session.id, exc_info=True)
        return result

    async def _handshake_call(
        self,
        session: Session,
        params: types.CallToolRequestParams,
        meta: dict[str, Any],
        progress: ProgressFnT | None,
        client: PushClient,
    ) -> types.CallToolResult | dict[str, Any]:
        """A 2025-11-25 call: with no progress asked for, the child is asked with a raw request
        and its plain answer passed on as a dict (`VisitorDoor.call_tool_raw`), which the SDK
        checks and dumps as it does the model; with progress, through the SDK's client."""
        if progress is None:
            return await self._door.call_tool_raw(client, session, params.name, params.arguments, meta)
        return await self._door.call_tool(session, params.name, params.arguments, meta, progress, client)

    # -- tasks (2025-11-25; see visitor.tasks) ---------------------------------------------------

    async def _task_calls(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: a task-augmented `tools/call` of a 2025-11-25 client is answered here
        with the child's `CreateTaskResult` (the SDK's handler chain would check it as a
        `CallToolResult`); every other request goes on."""
        params = ctx.params
        if ctx.method != "tools/call" or _modern(ctx) or not isinstance(params, Mapping) or params.get("task") is None:
            return await call_next(ctx)
        session = self._session(ctx)
        try:
            return await self._tasks.create(session, params, ctx.session)
        except MCPError:
            raise
        except Exception as exc:
            known = at_boundary(exc, logger, "session %s: a task-augmented call", session.id, refusals=False)
            return tool_error(known or exc).model_dump(by_alias=True, mode="json", exclude_none=True)

    async def get_task(self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> types.Result:
        return await self._task_op(ctx, "tasks/get", lambda s: self._tasks.get(s, params.task_id))

    async def task_result(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
    ) -> types.Result:
        # The child's requests about the task reach the visitor on this request's stream.
        return await self._task_op(
            ctx,
            "tasks/result",
            lambda s: self._tasks.result(s, params.task_id, PushClient(ctx, s.id, self._log_levels.get(s.id))),
        )

    async def cancel_task(
        self, ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> types.Result:
        return await self._task_op(ctx, "tasks/cancel", lambda s: self._tasks.cancel(s, params.task_id))

    async def list_tasks(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> types.Result:
        return await self._task_op(ctx, "tasks/list", self._tasks.listed)

    async def _task_op(
        self, ctx: ServerRequestContext[Any, Any], what: str, op: Callable[[Session], Awaitable[types.Result]]
    ) -> types.Result:
        if _modern(ctx):  # 2026-07-28 has no core tasks; the SDK serves no tasks extension
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", data=what)
        session = self._session(ctx)
        try:
            return await op(session)
        except MCPError:
            raise
        except Exception as exc:
            raise _rpc_error(exc, what) from None

    async def set_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        self._log_levels.set(session_of(ctx).id, params.level)
        return types.EmptyResult()

    # -- prompts, resources, completion ----------------------------------------------------------

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        _, found = await self._surface(ctx)
        return types.ListPromptsResult(prompts=without_host_keys([p for _, p in found.prompts.values()]))

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        listings = self._door.listings
        return await self._forward(
            ctx,
            "prompts/get",
            lambda found: listings.prompt_owner(found, params.name),
            params,
            lambda forwarded: types.GetPromptRequest(params=forwarded),
            types.GetPromptResult,
        )

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        _, found = await self._surface(ctx)
        return types.ListResourcesResult(resources=without_host_keys([r for _, r in found.resources.values()]))

    async def list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        _, found = await self._surface(ctx)
        return types.ListResourceTemplatesResult(resource_templates=without_host_keys([t for _, t in found.templates]))

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        listings = self._door.listings
        uri = str(params.uri)

        async def named(session: Session, owner: str) -> None:
            await self._door.app_named(session, owner, uri)  # an app no visible tool names is not read

        async def check(session: Session, owner: str, read: types.ReadResourceResult) -> None:
            await self._door.check_app(session, owner, uri, read)  # an app goes out only as approved

        return await self._forward(
            ctx,
            "resources/read",
            lambda found: listings.resource_owner(found, uri),
            params,
            lambda forwarded: types.ReadResourceRequest(params=forwarded),
            types.ReadResourceResult,
            not_found=RESOURCE_NOT_FOUND,
            before=named,
            check=check,
        )

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        session = self._session(ctx)
        uri = str(params.uri)
        try:
            await self._subscribe_child(session, uri)
        except Exception as exc:
            raise _rpc_error(exc, "resources/subscribe") from None
        self._feed.subscribe_uri(session, uri)
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        # The child keeps its subscription (other sessions may hold one); this session stops hearing.
        self._feed.unsubscribe_uri(session_of(ctx), str(params.uri))
        return types.EmptyResult()

    async def complete(
        self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        listings, ref = self._door.listings, params.ref
        pick: Callable[[Surface], str] = (
            partial(listings.prompt_owner, name=ref.name)
            if isinstance(ref, types.PromptReference)
            else partial(listings.template_owner, template=ref.uri)
        )
        return await self._forward(
            ctx,
            "completion/complete",
            pick,
            params,
            lambda forwarded: types.CompleteRequest(params=forwarded),
            types.CompleteResult,
        )

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        session = session_of(ctx)
        try:
            for uri in (params.notifications.resource_subscriptions or [])[:_MAX_LISTEN_URIS]:
                await self._subscribe_child(session, str(uri))
        except Exception as exc:
            raise _rpc_error(exc, "subscriptions/listen", not_found=RESOURCE_NOT_FOUND) from None
        try:
            return await ListenHandler(self._feed.bus(session))(ctx, params)
        except OverflowError:  # raised when subscribing, before the stream starts
            raise rpc_error(Unavailable(_LISTENERS_FULL), _LISTENERS_FULL) from None

    # -- helpers -------------------------------------------------------------------------------

    async def _forward(
        self,
        ctx: ServerRequestContext[Any, Any],
        what: str,
        pick: Callable[[Surface], str],
        params: P,
        request: Callable[[P], types.ClientRequest],
        result_type: type[R],
        *,
        not_found: int = INVALID_PARAMS,
        before: Callable[[Session, str], Awaitable[None]] | None = None,
        check: Callable[[Session, str, R], Awaitable[None]] | None = None,
    ) -> R:
        """Forward a prompt, resource or completion request to the child that `pick` finds in the
        session's surface, with the session's `_meta`; its result without the child's host keys.
        Any failure is answered as a JSON-RPC error (`_rpc_error`); `not_found`: the code of an
        item the session cannot reach; `before` may refuse the request before the child is asked,
        `check` the child's result (they raise)."""
        try:
            session, owner = await self._owner_of(ctx, pick)
            if before is not None:
                await before(session, owner)
            forwarded = params.model_copy(update={"meta": self._item_meta(ctx, session)})
            result = await self._door.child_for(owner, session.id).forward(
                request(forwarded), result_type, timeout_s=self._door.call_timeout_s
            )
            if check is not None:
                await check(session, owner, result)
        except Exception as exc:
            raise _rpc_error(exc, what, not_found=not_found) from None
        return without_host_keys(result)

    def _session(self, ctx: ServerRequestContext[Any, Any]) -> Session:
        """The request's session; a 2025-11-25 connection is remembered, to be told of list
        changes on its standalone stream."""
        session = session_of(ctx)
        connection = _connection_of(ctx)
        if connection is not None:
            self._feed.keep_connection(session, connection, ctx.session)
        return session

    def _item_meta(self, ctx: ServerRequestContext[Any, Any], session: Session) -> dict[str, Any]:
        kept = visitor_meta(dict(ctx.meta or {}), self._meta_caps)
        return forwarded_meta(kept, CallScope(session.owner_id, session).wire())

    async def _surface(self, ctx: ServerRequestContext[Any, Any], *, fresh: bool = True) -> tuple[Session, Surface]:
        session = self._session(ctx)
        return session, await self._door.surface(session, fresh=fresh)

    async def _owner_of(
        self, ctx: ServerRequestContext[Any, Any], pick: Callable[[Surface], str]
    ) -> tuple[Session, str]:
        """The session, and the capability `pick` finds in its surface: from the children's last
        lists, and listed afresh when those do not have it (a prompt or resource added since)."""
        session, found = await self._surface(ctx, fresh=False)
        try:
            return session, pick(found)
        except UnknownItem:
            _, found = await self._surface(ctx)
            return session, pick(found)

    async def _subscribe_child(self, session: Session, uri: str) -> None:
        """Ask the child that serves `uri` for its updates (one subscription serves every session)."""
        door = self._door
        found = await door.surface(session, fresh=False)
        child = door.child_for(door.listings.resource_owner(found, uri), session.id)
        served = (await child.capabilities()).resources
        if served is None or not served.subscribe:
            return  # the child sends its updates unasked, or never: the session still listens
        await child.forward(
            types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)),
            types.EmptyResult,
            timeout_s=door.call_timeout_s,
        )


def _rpc_error(exc: Exception, what: str, *, not_found: int = INVALID_PARAMS) -> MCPError:
    """`exc`, met while answering `what`, as a JSON-RPC error (`errors.at_boundary` logs it)."""
    known = at_boundary(exc, logger, "%s", what, refusals=False)
    return rpc_error(known or exc, f"{what} failed inside the host", not_found=not_found)


def build_visitor_server(
    door: VisitorDoor,
    input_schema: Callable[[str], Mapping[str, Any] | None],
    *,
    rounds: InputRounds,
    feed: ChangeFeed,
    meta_caps: MetaCaps,
    tasks: TaskBook | None = None,
) -> Server[Any]:
    """The SDK server of a `VisitorServer` (see there)."""
    return VisitorServer(door, input_schema, rounds=rounds, feed=feed, meta_caps=meta_caps, tasks=tasks).server
