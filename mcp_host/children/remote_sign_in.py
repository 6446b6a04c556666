"""The host's sign-ins to remote plugins' servers (`RemoteSignIns`): the owner's connect flow,
the sign-in each remote child's start uses, what the catalogue shows, and revocation when a
plugin goes.

Above: the owner door's `remote_*` tools, the host's `/oauth/callback` and `/oauth/client.json`
routes (`app`), `ChildFactory` (a `SignInLink` in each remote plugin's `RemoteLink`).
Below: `remote_auth` (the SDK's OAuth client over the host's storage), `remote_guard` (every
request of a sign-in goes out through it, at addresses the plugin's manifest permits),
`store.SignInStore`.

One sign-in per plugin serves every visitor who may see it, unless its manifest says
`transport.sign_in: per_visitor`: then each visitor session signs in with its own account
(`visitor_link`, `start_visitor`), kept in a row of its own (`visitor_key`) that only that
session's child reads and that goes when the session ends (`forget_session`); the owner's
sign-in then serves the owner's context only. Connecting runs the SDK's flow in
the host's task group: `connect` returns the server's authorization URL once discovery and
registration are done (a client ID metadata document at `{base_url}/oauth/client.json` where
the server supports one and the host is on https, else dynamic registration); the flow then
waits for the browser to come back to `{base_url}/oauth/callback`, whose `finish` hands it the
code and waits for the exchange. The flow lives on the replica that started it: a callback
that reaches another replica is told to start again. A child's start signs its requests with
the stored token (refreshed before it expires); when the server no longer accepts it and the
refresh fails, the plugin needs a sign-in: the start is refused `unconfigured`, saying so.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
from anyio.abc import TaskGroup
from mcp.client.auth import OAuthFlowError, OAuthRegistrationError, OAuthTokenError
from mcp.client.auth.oauth2 import OAuthContext
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata
from pydantic import AnyHttpUrl, AnyUrl, BaseModel, ConfigDict, ValidationError

from mcp_host.errors import InvalidArguments, Unavailable, Unconfigured
from mcp_host.plugins import Plugin, PrivateReach
from mcp_host.store import SignInState, SignInStore

from .remote_auth import HostOAuthProvider, PluginTokens
from .remote_guard import RemoteGuard, Resolver, SystemResolver

__all__ = [
    "CALLBACK_PATH",
    "CLIENT_DOCUMENT_PATH",
    "VISITOR_NEEDS",
    "VISITOR_PATH",
    "ChildSignIn",
    "RemoteSignIns",
    "SignInLink",
    "SignInOutcome",
    "visitor_key",
]

logger = logging.getLogger(__name__)

CALLBACK_PATH = "/oauth/callback"
CLIENT_DOCUMENT_PATH = "/oauth/client.json"
VISITOR_PATH = "/oauth/visitor"
VISITOR_NEEDS = "this capability's server needs your own sign-in: accept the sign-in the host offers, then call again"
_VISITOR = "#visitor:"  # a visitor session's own row: `{plugin_id}#visitor:{session_id}`
_TICKET_S = 600.0  # how long a visitor's sign-in link may wait to be opened
_VISITOR_WAIT_S = 300.0  # how long an accepted sign-in holds its call, waiting for the browser
NEEDS_SIGN_IN = "the remote server needs the owner's sign-in: connect it with the owner tool remote_connect"
EXPIRED = "the remote server's sign-in expired or was refused: the owner signs in again with remote_connect"
_ERROR_CODE = re.compile(r"[a-z_]{1,40}")
_REQUEST_TIMEOUT_S = 15.0
_FINISH_WAIT_S = 30.0  # how long the callback page waits for the code exchange


class SignInOutcome(BaseModel):
    """How an owner's sign-in ended, as the callback page and `remote_status` tell it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capability: str | None
    connected: bool
    cause: str | None = None


class _NeedsSignIn(Unconfigured):  # noqa: N818 - a signal inside the SDK's flow, never raised past RemoteChild
    """A child's start met a server that wants a sign-in the host cannot do on its own."""

    def __init__(self, message: str = "the server wants a sign-in") -> None:
        super().__init__(message)


class _Abandoned(Unconfigured):  # noqa: N818 - a signal inside the SDK's flow
    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


@dataclass
class ChildSignIn:
    """One remote child's start: its requests' auth (None: the host holds no token), the hosts
    its sign-in's requests may reach beyond the manifest's (the authorization server's), and
    whether the server asked for a new sign-in during the start."""

    auth: HostOAuthProvider | None
    hosts: frozenset[str] = frozenset()
    asked: bool = False
    cause: str | None = None
    """Why the plugin needs a sign-in, as stored (None: it was not known to need one)."""


def visitor_key(plugin_id: str, session_id: str) -> str:
    """The store key of `session_id`'s own sign-in to `plugin_id`'s server."""
    return f"{plugin_id}{_VISITOR}{session_id}"


@dataclass(frozen=True)
class _Ticket:
    """A visitor's sign-in link, not yet opened: whose sign-in it starts, and to which server."""

    plugin_id: str
    key: str
    url: str
    reach: PrivateReach
    expires: float


@dataclass
class _Flow:
    plugin_id: str
    key: str
    """Where its tokens go: the plugin id (the owner's sign-in) or a `visitor_key`."""
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    url: str | None = None
    state: str | None = None
    opened: anyio.Event = field(default_factory=anyio.Event)
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: AuthorizationCodeResult | str | None = None
    """The browser's code, or why it brought none (the server's error)."""
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: SignInOutcome | None = None


def _hosts(metadata: Mapping[str, Any]) -> frozenset[str]:
    """The hosts of the authorization server's endpoints a signed-in child may call (refresh)."""
    server = metadata.get("server") or {}
    urls = [server.get(k) for k in ("issuer", "token_endpoint", "revocation_endpoint")]
    out = set()
    for url in urls:
        host = urlparse(url).hostname if isinstance(url, str) else None
        if host:
            out.add(f"[{host}]" if ":" in host else host.casefold())
    return frozenset(out)


class RemoteSignIns:
    """The host's sign-ins to its remote plugins' servers, kept in `store`."""

    def __init__(
        self,
        store: SignInStore,
        base_url: str,
        task_group: TaskGroup,
        *,
        resolver: Resolver | None = None,
        flow_timeout_s: float = 600.0,
        on_connected: Callable[[str], None] = lambda plugin_id: None,
    ) -> None:
        """`base_url`: the host's public URL (the callback and the client document are under it).
        `flow_timeout_s`: how long a started sign-in waits for the browser. `on_connected`: told
        the plugin id when a sign-in completes (its children restart with the token)."""
        self._store = store
        self._base = base_url.rstrip("/")
        self._tg = task_group
        self._resolver: Resolver = resolver if resolver is not None else SystemResolver()
        self._timeout_s = flow_timeout_s
        self._on_connected = on_connected
        self._flows: dict[str, _Flow] = {}  # by key (plugin id or visitor key): the sign-in each waits for
        self._tickets: dict[str, _Ticket] = {}
        self._signed: dict[str, anyio.Event] = {}  # by visitor key: set when its sign-in completes here
        self._outcomes: dict[str, SignInOutcome] = {}
        self._states: dict[str, SignInState] = {}

    @property
    def callback_url(self) -> str:
        return self._base + CALLBACK_PATH

    @property
    def client_id_url(self) -> str | None:
        """The client ID metadata document's URL, when the host's URL can be one (https)."""
        url = self._base + CLIENT_DOCUMENT_PATH
        return url if url.startswith("https://") else None

    def client_metadata(self, *, public: bool = False) -> OAuthClientMetadata:
        """What the host registers as (`public`: no secret, as a metadata document says)."""
        return OAuthClientMetadata(
            redirect_uris=[AnyUrl(self.callback_url)],
            client_name=f"mcp-host at {self._base}",
            client_uri=AnyHttpUrl(self._base),
            application_type="web",  # its redirect is the host's public URL, not a loopback app's
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none" if public else "client_secret_basic",
        )

    def client_document(self) -> dict[str, Any]:
        """The client ID metadata document served at `{base_url}/oauth/client.json`."""
        document = self.client_metadata(public=True).model_dump(mode="json", exclude_none=True)
        return {"client_id": self._base + CLIENT_DOCUMENT_PATH, **document}

    def state_of(self, plugin_id: str) -> SignInState | None:
        """The plugin's sign-in state as this replica last read it; None: never asked for one."""
        return self._states.get(plugin_id)

    async def refresh(self) -> None:
        """Read every plugin's sign-in state again (another replica may have changed one)."""
        self._states = {key: state for key, state in (await self._store.states()).items() if _VISITOR not in key}

    async def child_start(self, plugin_id: str, url: str) -> ChildSignIn:
        """The sign-in a remote child's start uses: the stored token's, else none."""
        record = await self._store.read(plugin_id)
        if record is None or record.tokens is None:
            return ChildSignIn(None, cause=record.needs_sign_in if record is not None else None)
        started = ChildSignIn(None, _hosts(record.metadata))

        async def redirect(_: str) -> None:
            started.asked = True
            await self.needed(plugin_id, EXPIRED)
            raise _NeedsSignIn

        async def no_callback() -> AuthorizationCodeResult:
            raise _NeedsSignIn  # never reached: `redirect` raises first

        started.auth = HostOAuthProvider(
            url,
            self.client_metadata(),
            PluginTokens(self._store, plugin_id),
            redirect_handler=redirect,
            callback_handler=no_callback,
            client_metadata_url=self.client_id_url,
        )
        return started

    async def needed(self, plugin_id: str, cause: str) -> None:
        """`plugin_id`'s server wants the owner's sign-in (or, for a `visitor_key`, that
        visitor's); its token (if any) goes."""
        if self._states.get(plugin_id) != "needs_sign_in":
            logger.info("%s: %s", plugin_id.partition(_VISITOR)[0], cause)
        await self._store.need_sign_in(plugin_id, cause)
        self._states[plugin_id] = "needs_sign_in"

    async def status(self, plugin_id: str) -> dict[str, Any]:
        """`plugin_id`'s sign-in: its state, the cause, a started sign-in's URL, the last outcome."""
        record = await self._store.read(plugin_id)
        flow = self._flows.get(plugin_id)
        last = self._outcomes.get(plugin_id)
        return {
            "capability": plugin_id,
            "sign_in": record.state(time.time()) if record is not None else None,
            "cause": record.needs_sign_in if record is not None else None,
            "waiting_for_browser": flow is not None and flow.url is not None and not flow.done.is_set(),
            "url": flow.url if flow is not None and not flow.done.is_set() else None,
            "last": last.model_dump(mode="json") if last is not None else None,
        }

    async def connect(self, plugin: Plugin) -> str:
        """Start the owner's sign-in to `plugin`'s server; the URL the owner opens. Raises
        InvalidArguments for a plugin that is not remote, or a server that asks for no sign-in
        or whose discovery or registration fails (the cause in words); Unavailable when they
        take longer than a minute."""
        transport = plugin.manifest.transport
        if transport is None or transport.kind != "http" or transport.url is None:
            raise InvalidArguments(f"capability: {plugin.manifest.id} is not a remote server")
        plugin_id = plugin.manifest.id
        return await self._begin(plugin_id, plugin_id, transport.url, PrivateReach.of(transport.allow_private))

    def visitor_link(self, plugin_id: str, session_id: str, url: str, reach: PrivateReach) -> str:
        """A host URL that, opened, starts `session_id`'s own sign-in to `plugin_id`'s server at
        `url`: a random ticket, used once, for `_TICKET_S`, on this replica."""
        now = time.monotonic()
        for stale in [t for t, found in self._tickets.items() if found.expires < now]:
            del self._tickets[stale]
        ticket = secrets.token_urlsafe(32)
        key = visitor_key(plugin_id, session_id)
        self._tickets[ticket] = _Ticket(plugin_id, key, url, reach, now + _TICKET_S)
        return f"{self._base}{VISITOR_PATH}?ticket={ticket}"

    async def start_visitor(self, ticket: str) -> str:
        """The visitor opened its sign-in link: start its sign-in; the server's authorization
        URL. Raises InvalidArguments for a link that is unknown, used or expired, and as
        `connect` does."""
        found = self._tickets.pop(ticket, None)
        if found is None or found.expires < time.monotonic():
            raise InvalidArguments("this sign-in link is unknown, used or expired: call the tool again for a new one")
        return await self._begin(found.plugin_id, found.key, found.url, found.reach)

    async def held(self, key: str) -> bool:
        """Whether the host holds a token for `key` (a plugin id or a `visitor_key`)."""
        record = await self._store.read(key)
        return record is not None and record.tokens is not None

    async def wait_for(self, key: str, timeout_s: float = _VISITOR_WAIT_S) -> bool:
        """Wait until `key`'s sign-in holds a token (read from the store: the browser may come
        back to another flow's end), or `timeout_s` passes; whether it does."""
        deadline = anyio.current_time() + timeout_s
        while not await self.held(key):
            left = deadline - anyio.current_time()
            if left <= 0:
                return False
            signed = self._signed.setdefault(key, anyio.Event())
            with anyio.move_on_after(min(left, 1.0)):  # one finished on another replica shows in the store
                await signed.wait()
        return True

    async def forget_session(self, session_id: str) -> None:
        """`session_id` ended: its own sign-ins go, with their links and flows (on this replica)."""
        suffix = _VISITOR + session_id
        for ticket in [t for t, found in self._tickets.items() if found.key.endswith(suffix)]:
            del self._tickets[ticket]
        for key in [k for k in self._flows if k.endswith(suffix)]:
            self._flows.pop(key).scope.cancel()
        for key in [k for k in self._signed if k.endswith(suffix)]:
            del self._signed[key]
        try:
            await self._store.forget_keyed(suffix=suffix)
        except Exception:  # the database closing as the host stops: logged, never raised into the host's tasks
            logger.warning("a visitor session's sign-ins could not be deleted at its end", exc_info=True)

    async def _begin(self, plugin_id: str, key: str, url: str, reach: PrivateReach) -> str:
        """Start a sign-in whose tokens go to `key`; the server's authorization URL."""
        earlier = self._flows.pop(key, None)
        if earlier is not None:
            earlier.scope.cancel()
        flow = self._flows[key] = _Flow(plugin_id, key)
        self._tg.start_soon(self._run, flow, url, reach)
        with anyio.move_on_after(_REQUEST_TIMEOUT_S * 4):
            await flow.opened.wait()
        if not flow.opened.is_set():
            flow.scope.cancel()
            raise Unavailable("the remote server's discovery or registration did not finish in time; try again")
        if flow.url is None:
            cause = flow.outcome.cause if flow.outcome is not None else None
            raise InvalidArguments(f"capability: {cause or 'the sign-in could not start'}")
        return flow.url

    async def finish(self, query: Mapping[str, str]) -> SignInOutcome:
        """The browser came back to the callback with `query` (code, state, iss, or error): hand
        it to the sign-in waiting for it and wait for the token exchange."""
        state = query.get("state", "")
        flow = next((f for f in self._flows.values() if f.state is not None and f.state == state), None)
        if flow is None or flow.answered.is_set():
            return SignInOutcome(
                capability=None,
                connected=False,
                cause="no sign-in is waiting for this answer on this replica; start it again",
            )
        error = query.get("error")
        if error is not None or not query.get("code"):
            code = error if error is not None and _ERROR_CODE.fullmatch(error) else "no code"
            flow.answer = f"the server's sign-in ended without a code ({code})"
        else:
            flow.answer = AuthorizationCodeResult(code=query["code"], state=state, iss=query.get("iss"))
        flow.answered.set()
        with anyio.move_on_after(_FINISH_WAIT_S):
            await flow.done.wait()
        if flow.outcome is None:
            return SignInOutcome(capability=flow.plugin_id, connected=False, cause="the token exchange did not finish")
        return flow.outcome

    async def _run(self, flow: _Flow, url: str, reach: PrivateReach) -> None:
        """The SDK's flow for one sign-in, to its end (connected, refused, abandoned, timed out)."""

        async def redirect(authorization_url: str) -> None:
            flow.url = authorization_url
            flow.state = parse_qs(urlparse(authorization_url).query).get("state", [""])[0] or None
            flow.opened.set()

        async def callback() -> AuthorizationCodeResult:
            await flow.answered.wait()
            if isinstance(flow.answer, AuthorizationCodeResult):
                return flow.answer
            raise _Abandoned(flow.answer or "the sign-in ended without a code")

        tokens = PluginTokens(self._store, flow.key, fresh=True)
        provider = HostOAuthProvider(
            url,
            self.client_metadata(),
            tokens,
            redirect_handler=redirect,
            callback_handler=callback,
            client_metadata_url=self.client_id_url,
        )
        cause: str | None = None
        with flow.scope:
            try:
                with anyio.fail_after(self._timeout_s):
                    cause = await self._signed_in(provider, url, reach)
            except Exception as exc:
                cause = _cause(exc)
                logger.info("%s: a sign-in failed", flow.plugin_id, exc_info=True)
        if flow.scope.cancelled_caught:
            cause = "a newer sign-in replaced this one"
        elif cause is None and tokens.metadata() is None:
            cause = "the remote server did not ask for a sign-in"
        await self._ended(flow, cause)

    async def _signed_in(self, provider: HostOAuthProvider, url: str, reach: PrivateReach) -> str | None:
        """One request to the server with `provider` as its auth: it answers 401, the SDK
        discovers, registers and signs in (the owner in the browser), then sends it again."""
        guard = RemoteGuard(None, reach, self._resolver)
        timeout = httpx2.Timeout(_REQUEST_TIMEOUT_S)
        probe = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
        headers = {"Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient(transport=guard, auth=provider, timeout=timeout, trust_env=False) as http:
            response = await http.post(url, json=probe, headers=headers)
        if guard.refused is not None:
            return f"a request of the sign-in was refused: {guard.refused}"
        if response.status_code in (401, 403):
            return f"the remote server still refuses the host (HTTP {response.status_code})"
        return None

    async def _ended(self, flow: _Flow, cause: str | None) -> None:
        outcome = SignInOutcome(capability=flow.plugin_id, connected=cause is None, cause=cause)
        flow.outcome = outcome
        if self._flows.get(flow.key) is flow:
            del self._flows[flow.key]
        own = flow.key == flow.plugin_id  # the owner's sign-in, not a visitor's
        if own:
            self._outcomes[flow.plugin_id] = outcome
        if cause is None:
            self._states[flow.key] = "connected"
            who = "the owner" if own else "a visitor"
            logger.info("%s: %s signed in to its remote server", flow.plugin_id, who)
            if own:  # a visitor's child starts signed in at its next call
                self._on_connected(flow.plugin_id)
            self._signed.pop(flow.key, anyio.Event()).set()
        else:
            logger.info("%s: a sign-in ended: %s", flow.plugin_id, cause)
        flow.opened.set()
        flow.done.set()

    async def forget(self, plugin: Plugin) -> bool:
        """`plugin` is removed (or the owner disconnects it): its tokens are revoked at the
        server (when it has a revocation endpoint) and deleted. Whether it had a sign-in."""
        plugin_id = plugin.manifest.id
        flow = self._flows.pop(plugin_id, None)
        if flow is not None:
            flow.scope.cancel()
        self._states.pop(plugin_id, None)
        self._outcomes.pop(plugin_id, None)
        await self._store.forget_keyed(prefix=plugin_id + _VISITOR)  # its visitors' own sign-ins
        record = await self._store.forget(plugin_id)
        if record is None:
            return False
        transport = plugin.manifest.transport
        reach = PrivateReach.of(transport.allow_private if transport is not None else ())
        server = _parsed_server(record.metadata)
        client = _parsed_client(record.client)
        if record.tokens is not None and server is not None and client is not None:
            await self._revoke(record.tokens, server, client, reach)
        return True

    async def _revoke(
        self, tokens: Mapping[str, Any], server: OAuthMetadata, client: OAuthClientInformationFull, reach: PrivateReach
    ) -> None:
        """RFC 7009: the refresh token, then the access token, revoked at the server's endpoint.
        A failure is logged: the tokens are deleted here whatever the server answers."""
        if server.revocation_endpoint is None:
            return
        context = OAuthContext(
            server_url=self._base,
            client_metadata=self.client_metadata(),
            storage=PluginTokens(self._store, ""),
            redirect_handler=None,
            callback_handler=None,
            client_info=client,
        )
        guard = RemoteGuard(None, reach, self._resolver)
        timeout = httpx2.Timeout(_REQUEST_TIMEOUT_S)
        async with httpx2.AsyncClient(transport=guard, timeout=timeout, trust_env=False) as http:
            for hint in ("refresh_token", "access_token"):
                token = tokens.get(hint)
                if not isinstance(token, str):
                    continue
                data, headers = context.prepare_token_auth(
                    {"token": token, "token_type_hint": hint, "client_id": client.client_id}, {}
                )
                try:
                    response = await http.post(str(server.revocation_endpoint), data=data, headers=headers)
                except httpx2.HTTPError:
                    logger.warning("revoking a remote sign-in's %s failed", hint, exc_info=True)
                    continue
                if response.status_code != 200:
                    logger.warning("the remote server answered %s to revoking a %s", response.status_code, hint)


@dataclass(frozen=True)
class SignInLink:
    """What a remote plugin's `RemoteLink` carries: its sign-in, read at each start. `source`:
    the host's sign-ins once the database is open (None before: no sign-in yet)."""

    source: Callable[[], RemoteSignIns | None]
    plugin_id: str
    url: str
    session_id: str | None = None
    """The visitor session the child serves alone (a per-session instance); None: shared or the
    owner's context."""
    per_visitor: bool = False
    """The manifest's `transport.sign_in: per_visitor`."""
    reach: PrivateReach = field(default_factory=lambda: PrivateReach.of(()))

    @property
    def own(self) -> bool:
        """Whether the child signs in as its visitor (never with the owner's token)."""
        return self.per_visitor and self.session_id is not None

    @property
    def key(self) -> str:
        return visitor_key(self.plugin_id, self.session_id) if self.own and self.session_id else self.plugin_id

    async def start(self) -> ChildSignIn:
        sign_ins = self.source()
        return ChildSignIn(None) if sign_ins is None else await sign_ins.child_start(self.key, self.url)

    async def needed(self, cause: str) -> None:
        sign_ins = self.source()
        if sign_ins is not None:
            await sign_ins.needed(self.key, cause)

    async def held(self) -> bool:
        sign_ins = self.source()
        return sign_ins is not None and await sign_ins.held(self.key)

    def visitor_link(self) -> str | None:
        """The link that starts this child's visitor's own sign-in; None before the database opens."""
        sign_ins = self.source()
        if sign_ins is None or self.session_id is None:
            return None
        return sign_ins.visitor_link(self.plugin_id, self.session_id, self.url, self.reach)

    async def wait(self) -> bool:
        sign_ins = self.source()
        return sign_ins is not None and await sign_ins.wait_for(self.key)


def _parsed_server(metadata: Mapping[str, Any]) -> OAuthMetadata | None:
    try:
        return OAuthMetadata.model_validate(metadata.get("server"))
    except ValidationError:
        return None


def _parsed_client(client: Mapping[str, Any] | None) -> OAuthClientInformationFull | None:
    try:
        return OAuthClientInformationFull.model_validate(client)
    except ValidationError:
        return None


_CAUSES: list[tuple[type[Exception], str]] = [
    (_Abandoned, ""),
    (TimeoutError, "the sign-in was not completed in time"),
    (OAuthRegistrationError, "the remote server refused the host's registration"),
    (OAuthTokenError, "the remote server refused the code exchange"),
    (OAuthFlowError, "the sign-in did not follow the protocol (state, issuer or metadata did not match)"),
    (ValidationError, "the remote server's metadata is not valid"),
    (httpx2.HTTPError, "the remote server or its authorization server could not be reached"),
]


def _cause(exc: BaseException) -> str:
    """Why a sign-in failed, in the host's words (an exception's own text never reaches the owner)."""
    for kind, cause in _CAUSES:
        if isinstance(exc, kind):
            return exc.cause if isinstance(exc, _Abandoned) else cause
    return "the sign-in failed"
