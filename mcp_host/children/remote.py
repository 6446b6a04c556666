"""Remote children: a plugin whose manifest says `transport.kind: http` is a remote MCP server
the host reaches as a client over streamable HTTP, behind the same `Child` the stdio children
are (list and call tools, prompts, resources, notifications, server→client requests routed by
the call they are about). Nothing runs locally, so there is no sandbox and no process.

Above: `ChildFactory` (which makes a `RemoteChild` in the pool for an http plugin, with the
`RemoteLink` its manifest and the owner's config give). Below: `mcp_session.Child` (the
session's life and the requests forwarded over it, as for a process), the MCP SDK's
`streamable_http_client` and `httpx2`.

A child's "start" is one MCP client session with the server, kept while calls use it and
closed after the idle time, as a process would be; a per-session plugin has one per visitor
session, so the server's session state is per visitor. The era is the server's: 2026-07-28
when it answers `server/discover` (its questions come inside a call's result and are put to
the call's visitor round by round, its list changes on a `subscriptions/listen` stream), else
the handshake (`initialize`; its requests and notifications routed as a stdio child's are).
Task-augmented calls (`raw_request`) are sent unstamped, so they work in the handshake era only.

The HTTP client carries only the manifest's `headers` and `headers_from_config` (the owner's
values, secrets opened): a visitor's own headers never reach it. Its transport is the guard
(`remote_guard.RemoteGuard`): each request goes only to a host in `allowed_hosts` (absent: the
url's host; the SDK follows no redirect off the url's origin either), resolved once and
connected to the address checked, which is public unless `transport.allow_private` permits it.
A 401 or 403 from the server refuses the start as `unconfigured`, with the cause kept for the
catalogue, and costs no backoff. A server that asks for an OAuth sign-in (a 401 naming its
protected-resource metadata) is signed in by the owner once (`remote_sign_in`); each start then
signs its requests with the host's token (`RemoteLink.sign_in`), refreshed as it nears expiry,
and when the server no longer accepts it the start, and a call in flight, are `unconfigured`
saying the owner must sign in again. A plugin whose manifest says `transport.sign_in:
per_visitor` signs each visitor session's child in as that visitor: a call of a session that
holds no token of its own first asks its visitor, by a URL elicitation (put to the visitor as
any question of a call is, in either era), to open a host link that starts its sign-in, and
waits for it; declined or not completed, the call is `unconfigured` and the server is not
called. Such a child never carries the owner's token.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import anyio
import httpx2
import mcp.types as types
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost, listen
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.subscriptions import event_to_notification
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from mcp_host.errors import TransportFailure, Unavailable, Unconfigured
from mcp_host.plugins import PrivateReach
from mcp_host_kit.contract import REQUEST_ID_KEY

from .call_routing import CALL_KEY
from .lifecycle import ChildLimits, Start
from .mcp_session import Child
from .parent import parent_answer
from .remote_guard import RemoteGuard, Resolver, SystemResolver
from .remote_sign_in import EXPIRED, NEEDS_SIGN_IN, VISITOR_NEEDS, ChildSignIn, SignInLink

__all__ = ["RemoteChild", "RemoteLink"]

logger = logging.getLogger(__name__)

_R = TypeVar("_R", bound=types.Result)


@dataclass(frozen=True)
class RemoteLink:
    """Where and how a remote plugin's server is reached (its manifest's http transport)."""

    url: str
    allowed_hosts: frozenset[str]
    """Lower-cased host names; an IPv6 address in [brackets]."""
    timeout_s: float
    allow_private: frozenset[str] = frozenset()
    """The manifest's `transport.allow_private`: hosts and addresses that may be non-public."""
    resolver: Resolver = field(default_factory=SystemResolver)
    """Where the guard learns a host name's addresses (the machine's; a test gives its own)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    config_headers: Callable[[], Awaitable[Mapping[str, str]]] | None = None
    """The headers from the owner's config, read at each start; raises `ConfigUnset`."""
    on_call: Callable[[str, str], Awaitable[None]] | None = None
    """A node's parent link (`children.parent`): told (tool, request id) before each call, the
    id sent in `_meta["mcp-host/request-id"]`, so both hosts' audits name the call."""
    sign_in: SignInLink | None = None
    """The host's OAuth sign-in to the server (`remote_sign_in`), read at each start; None: the
    host signs in to no remote server (its headers alone)."""


class RemoteChild(Child):
    """A remote MCP server as a child: one MCP client session over streamable HTTP per start."""

    _raw_calls = False  # its requests carry the SDK's headers (and, at 2026-07-28, its envelope)

    def __init__(
        self,
        plugin_id: str,
        launch: object,
        limits: ChildLimits,
        task_group: TaskGroup,
        *,
        link: RemoteLink,
        on_spawn: object = None,
        on_exit: object = None,
        **child: Any,
    ) -> None:
        """Called as `ProcessChild` is (the pool's `ChildMaker`), with the `link` to its server;
        nothing is launched and no process runs, so `launch`, `on_spawn` and `on_exit` go unused.
        `child`: as `Child` takes them."""
        super().__init__(plugin_id, limits, task_group, **child)
        self._link = link
        self._guard: RemoteGuard | None = None
        self._signed = ChildSignIn(None)

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None, meta: dict[str, Any], **kwargs: Any
    ) -> types.CallToolResult:
        """As `Child.call_tool`; to a node's parent, with a request id first told to `on_call`,
        and the parent's refusal made this host's (`parent_answer`). A visitor's own sign-in
        first, where the plugin wants one (`_signed_in_as_visitor`)."""
        sign_in = self._link.sign_in
        if sign_in is not None and sign_in.own:
            await self._signed_in_as_visitor(sign_in, meta)
        if self._link.on_call is None:
            return await super().call_tool(name, arguments, meta, **kwargs)
        if REQUEST_ID_KEY not in meta:
            request_id = "node-" + secrets.token_hex(8)
            meta = {**meta, REQUEST_ID_KEY: request_id}
            await self._link.on_call(name, request_id)
        return parent_answer(await super().call_tool(name, arguments, meta, **kwargs))

    async def _signed_in_as_visitor(self, sign_in: SignInLink, meta: dict[str, Any]) -> None:
        """Return once this child's visitor holds its own token: asked, when it holds none, to
        open the host's link that starts its sign-in (a URL elicitation), then waited for.
        Raises Unconfigured when the visitor declines or does not finish (the server is never
        called without the visitor's own token)."""
        if await sign_in.held():
            return
        link = sign_in.visitor_link()
        if link is None:
            raise Unavailable("the host's sign-ins are not open yet; try again")
        call_id = meta.get(CALL_KEY)
        params = types.ElicitRequestURLParams(
            message=f"{self.plugin_id} needs you to sign in to its server with your own account",
            url=link,
            elicitation_id=secrets.token_hex(16),
        )
        named = {CALL_KEY: call_id} if isinstance(call_id, str) else {}
        answer = await self.router.elicit(cast(Any, None), _with_meta(params, named))
        if not isinstance(answer, types.ElicitResult) or answer.action != "accept" or not await sign_in.wait():
            raise Unconfigured(VISITOR_NEEDS)

    async def _run(self, start: Start) -> None:
        started_at = time.monotonic()
        headers = await self._prepared(start, started_at, self._headers, "connection")
        if headers is None:
            return
        link = self._link
        signed = self._signed = await link.sign_in.start() if link.sign_in is not None else ChildSignIn(None)
        allowed = link.allowed_hosts | signed.hosts
        guard = self._guard = RemoteGuard(allowed, PrivateReach.of(link.allow_private), link.resolver)
        self._starts += 1
        reason: str | None = None
        try:
            try:
                reason = await self._connect(guard, headers, start, signed)
            except Exception:
                # A connection failure may leave the SDK's transport by its task group (a
                # sign-in the server now wants, among others).
                logger.info("%s: the connection to the remote server failed", self.plugin_id, exc_info=True)
                reason = "could not reach the remote server"
            if link.sign_in is not None and guard.challenged and not signed.asked and signed.cause is None:
                await link.sign_in.needed(NEEDS_SIGN_IN)
        finally:
            self._closed()
            if reason is None:  # cancelled: the host is shutting down
                reason = "stopped"
            if (guard.denied is not None or signed.asked) and reason not in ("stopped", "idle"):
                self._refused_credentials(start, self._refusal(guard, signed), started_at)
            else:
                refused = guard.refused
                self._ended(start, reason, started_at, lambda why: f"{why}: {refused}" if refused else why)

    async def _headers(self) -> dict[str, str]:
        """The manifest's headers and the owner's (read at each start; raises `ConfigUnset`)."""
        headers = dict(self._link.headers)
        if self._link.config_headers is not None:
            headers.update(await self._link.config_headers())
        return headers

    def _refusal(self, guard: RemoteGuard, signed: ChildSignIn) -> str:
        """Why the server refused the host: the owner's sign-in it wants (`remote_sign_in`), or
        the credentials the owner sets in config."""
        if self._link.sign_in is not None and self._link.sign_in.own and (signed.asked or guard.challenged):
            return VISITOR_NEEDS
        if self._link.sign_in is not None and signed.asked:
            return EXPIRED
        if self._link.sign_in is not None and guard.challenged:
            return signed.cause or NEEDS_SIGN_IN
        status = guard.denied
        return f"the remote server refused the host's credentials (HTTP {status}); the owner sets them with config_set"

    def _refused_credentials(self, start: Start, cause: str, started_at: float) -> None:
        """The server refused the host's credentials: the owner must set them, not a failure."""
        self._run_of.refused(cause)
        if not start.done.is_set():
            start.refusal = Unconfigured(cause)
        self._finish(start, cause, started_at, crashed=False)

    async def _connect(
        self, guard: RemoteGuard, headers: dict[str, str], start: Start, signed: ChildSignIn
    ) -> str | None:
        link = self._link
        timeout = httpx2.Timeout(link.timeout_s, read=None)
        async with (
            httpx2.AsyncClient(
                headers=headers, timeout=timeout, transport=guard, auth=signed.auth, trust_env=False
            ) as http,
            streamable_http_client(link.url, http_client=http) as (read, write),
            self._client_session(read, write) as session,
        ):
            refused = await self._initialized(
                session, start, "the remote server refused to start a session", negotiate=_negotiate, refusals=_REFUSALS
            )
            if refused is not None:
                return refused
            logger.info("%s: connected to its remote server (%s)", self.plugin_id, session.protocol_version)
            if not _modern(session):
                return await self._supervise(None)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._listen, session)
                ended = await self._supervise(None)
                tg.cancel_scope.cancel()
            return ended

    async def _listen(self, session: ClientSession) -> None:
        """At 2026-07-28 a server's list changes come on a `subscriptions/listen` stream; each
        is handled as the notification a handshake-era server sends."""
        try:
            async with listen(
                session, tools_list_changed=True, prompts_list_changed=True, resources_list_changed=True
            ) as subscription:
                async for event in subscription:
                    await self._on_message(event_to_notification(event, {}))
        except (MCPError, SubscriptionLost, ListenNotSupportedError, TimeoutError):
            # Changes then show at the next start, which lists again.
            logger.info("%s: the remote server's change stream ended", self.plugin_id)

    async def _send(
        self,
        session: ClientSession,
        request: types.ClientRequest,
        result_type: type[_R],
        timeout_s: float | None,
        progress: ProgressFnT | None,
    ) -> _R:
        if not (isinstance(request, types.CallToolRequest) and _modern(session)):
            return await super()._send(session, request, result_type, timeout_s, progress)
        # 2026-07-28: the server asks for input in its result; each round's requests go to the
        # call's visitor (routed by the call's id, as a handshake-era server's requests are).
        params = request.params
        call_id = (params.meta or {}).get(CALL_KEY)
        for _ in range(self._limits.input_budget + 1):
            answer: Any = await super()._send(session, request, cast(Any, _CALL_OR_INPUT), timeout_s, progress)
            if not isinstance(answer, types.InputRequiredResult):
                return cast(_R, answer)
            asked = (answer.input_requests or {}).items()
            responses = {key: await self._answer(one, call_id) for key, one in asked}
            params = params.model_copy(update={"input_responses": responses, "request_state": answer.request_state})
            request = types.CallToolRequest(params=params)
        raise TransportFailure(f"the capability asked for input more than {self._limits.input_budget} times")

    async def _answer(self, asked: types.InputRequest, call_id: object) -> types.InputResponse:
        meta = {CALL_KEY: call_id} if isinstance(call_id, str) else {}
        context = cast(Any, None)  # the router's callbacks read the request, not the context
        if isinstance(asked, types.ElicitRequest):
            got: Any = await self.router.elicit(context, _with_meta(asked.params, meta))
        elif isinstance(asked, types.CreateMessageRequest):
            got = await self.router.sample(context, _with_meta(asked.params, meta))
        else:
            got = await self.router.list_roots(context)
        if isinstance(got, types.ErrorData):
            raise TransportFailure("the visitor's client could not answer the capability's question")
        return cast(types.InputResponse, got)

    def _map_error(self, exc: MCPError, method: str, timeout_s: float | None) -> Exception:
        guard = self._guard
        if guard is not None and (guard.denied is not None or self._signed.asked):
            # The credentials stopped working while connected: the next use starts again.
            self.stop()
            return Unconfigured(self._refusal(guard, self._signed))
        return super()._map_error(exc, method, timeout_s)


_REFUSALS = (MCPError, RuntimeError, ValidationError)
"""How a server that will not start a session says so, in either era."""
_CALL_OR_INPUT: TypeAdapter[types.CallToolResult | types.InputRequiredResult] = TypeAdapter(
    types.CallToolResult | types.InputRequiredResult
)


def _modern(session: ClientSession) -> bool:
    return session.protocol_version in MODERN_PROTOCOL_VERSIONS


async def _negotiate(session: ClientSession) -> None:
    """Speak the era the server offers: 2026-07-28 when it answers `server/discover`, else the
    handshake (`initialize`)."""
    try:
        await session.discover()
    except (MCPError, RuntimeError, ValidationError):
        await session.initialize()


def _with_meta(params: Any, meta: dict[str, Any]) -> Any:
    """`params` whose `_meta` also names the call (`CALL_KEY`), so the router finds its visitor."""
    if not meta:
        return params
    return params.model_copy(update={"meta": {**(params.meta or {}), **meta}})
