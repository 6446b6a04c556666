"""The visitor door: what a visitor session may list and call, and the forwarding of calls.

Above: `visitor.http` (the MCP server on each session's endpoint). Below: `bindings` (the
assembled tool list), `children` (the forwarded call), `meta` (what `_meta` travels), `grants`
(the token a child's host ops present while the call runs), `quota` and `holds` (a call to a
destructive tool waits for the owner's approval).

`call_tool` is the visitor face's boundary for tool calls (`visitor.server` is the one for the
other MCP methods): an exception becomes a tool result with `isError: true` and `{code,
message}` through `errors.tool_error` (in `_meta["mcp-host/error"]` always, as structured content
only when the tool's `outputSchema`, if it declares one, admits it), and a child's result passes
`meta.without_host_keys` here, so only the host's own refusals carry that key; what is not a
`HostError` (nor a database outage), or is an `InternalError`, is logged with its traceback
and answered opaquely — `str(exc)` never reaches a visitor.
"Not allowed" looks like "not there": a tool the session may not see gets the same
`unknown` answer as a tool that does not exist; the log says which.

Quota: a capability whose subject has nothing left leaves the session's list and its calls
get `quota_exhausted` (only the tools its `quota.tools` names, when it names some); a quota
that cannot be read hides the capability (fail closed). The remaining figures ride the
`tools/list` result's `_meta["mcp-host/quota"]`. A call whose `store.insert` was refused by
the quota while it ran is answered `quota_exhausted`, whatever the child made of the refusal.

Rules and holds: after the binding, requirement and quota checks, the owner's rules
(`policy.rules`) allow, refuse or hold the call; when none matches, a call to a tool whose live
definition is annotated destructive (`holds.needs_hold`) goes on only by using up the owner's
approval of this very call, else it is answered `held` (or `denied`) and the child is not called.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, TypeVar

import anyio
import mcp.types as types
from jsonschema.exceptions import SchemaError
from mcp.shared.dispatcher import ProgressFnT

from mcp_host.access import Session
from mcp_host.backchannel import CallScope, GrantBook, named_ops
from mcp_host.children import Answer, Child, ChildSource, InFlight
from mcp_host.connectors import RequirementGate
from mcp_host.errors import (
    Held,
    QuotaExhausted,
    Unavailable,
    UnknownTool,
    at_boundary,
    log_unless_outage,
    tool_error,
)
from mcp_host.observe import HostMetrics
from mcp_host.plugins import ClaimGate, Plugin, Registry, schema_validator
from mcp_host.policy import (
    HoldBook,
    QuotaGate,
    QuotaState,
    RuleGate,
    TurnStore,
    answer_ok,
    exhausted,
    needs_hold,
    receipt_ok,
    visitor_call,
)
from mcp_host.wire import (
    AppVersion,
    LimitedLog,
    MetaCaps,
    VisitorClient,
    app_uri,
    forwarded_meta,
    is_error,
    refusal_of,
    visitor_meta,
    without_host_keys,
)
from mcp_host_kit.contract import QUOTA_KEY

from .bindings import Bindings
from .listings import Listings, Surface, UnknownItem
from .tool_search import HOST_TOOLS, ToolSearch

__all__ = ["Called", "VisitorDoor", "VisitorList", "sees", "visible"]
# A quota that could not be read: the capability is treated as having nothing left (fail closed).
_UNREADABLE = QuotaState(limit=0, used=0)

logger = logging.getLogger(__name__)

_A = TypeVar("_A", bound=Answer)
_Hop = Callable[[Child, str, dict[str, Any] | None, dict[str, Any], InFlight], Awaitable[_A]]
"""How a call that passed the gates asks its child (the tool, arguments, forwarded `_meta`, the
call as registered with the child's router): `Child.call_tool` or `Child.call_tool_raw`."""


@dataclass
class Called:
    """What a call's boundary learns as the call proceeds: the tool its name resolved to, and
    its capability's id."""

    tool: types.Tool | None = None
    capability: str = ""

    def accepts(self, refusal: types.CallToolResult) -> bool:
        """Whether `refusal` (a `tool_error`) may also carry its `{code, message}` as structured
        content: only when every client accepts it there, that is when the name resolved to a
        tool that declares no `outputSchema` or one `{code, message}` fits (as MCPServer's
        `-> dict` tools declare). Clients check structured content against the schema even on an
        error, and one may hold a schema for a name the host no longer resolves."""
        if self.tool is None:
            return False
        schema = self.tool.output_schema
        if schema is None:
            return True
        pair = refusal_of(refusal)
        try:
            return pair is not None and bool(schema_validator(dict(schema)).is_valid(pair.model_dump()))
        except (ValueError, SchemaError):  # a schema the host cannot read: not written to it
            return False


@dataclass(frozen=True)
class VisitorList:
    """A session's tools, and its quota figures by capability id."""

    tools: list[types.Tool]
    quota: dict[str, QuotaState] = field(default_factory=dict)

    def meta(self) -> dict[str, Any] | None:
        if not self.quota:
            return None
        return {
            QUOTA_KEY: {
                pid: {"limit": q.limit, "used": q.used, "remaining": q.remaining} for pid, q in self.quota.items()
            }
        }


def visible(plugins: Registry, session: Session) -> list[Plugin]:
    """The capabilities of `plugins` this session may see: `acl: always`, or granted by its role
    snapshot; none once the code or key it was opened with has been revoked."""
    if session.credential_revoked:
        return []
    granted = set(session.role.capabilities)
    return [p for p in plugins.capabilities if p.manifest.acl == "always" or p.manifest.id in granted]


def sees(plugins: Registry, session: Session, plugin_id: str) -> bool:
    """Whether `session` can see capability `plugin_id` of `plugins` (its connectors aside)."""
    return any(p.manifest.id == plugin_id for p in visible(plugins, session))


class VisitorDoor:
    def __init__(
        self,
        plugins: Registry,
        bindings: Bindings,
        child_of: ChildSource,
        *,
        grants: GrantBook,
        quota: QuotaGate,
        requirements: RequirementGate,
        meta_caps: MetaCaps,
        call_timeout_s: float,
        holds: HoldBook | None = None,
        turns: TurnStore | None = None,
        listings: Listings | None = None,
        metrics: HostMetrics | None = None,
        rules: RuleGate | None = None,
        search: ToolSearch | None = None,
    ) -> None:
        """`holds`: where calls to destructive tools wait for the owner; None holds nothing.
        `search`: tool search for sessions that see many tools; None lists every tool.
        `rules`: the owner's rules, which decide each call first (and hold through their own
        holds); None: today's default alone.
        `turns`: where receipts of completed calls go; None records none. `metrics`: where each
        call's outcome and time, and quota refusals, are counted; None counts nothing."""
        self._plugins = plugins  # live: a plugin installed or removed while the host runs shows here
        self._bindings = bindings
        self._child_of = child_of
        self._grants = grants
        self._quota = quota
        self._requirements = requirements
        self._meta_caps = meta_caps
        self._call_timeout_s = call_timeout_s
        self._holds = holds
        self._turns = turns
        self._listings = listings or Listings(child_of, timeout_s=call_timeout_s)
        self._metrics = metrics
        # Refused calls are logged a few a second per refusal code: one visitor's flood of
        # refused calls must not flood the log (the metrics count every one).
        self._refusals = LimitedLog(logger, per_s=2.0, burst=20, what="refused calls")
        self._rules = rules
        self._search = search

    def visible(self, session: Session) -> list[Plugin]:
        """Capabilities this session may see (`visible`)."""
        return visible(self._plugins, session)

    def claim_gates(self, session: Session) -> list[tuple[str, ClaimGate]]:
        """The claim gates of the capabilities this session may see, by capability id."""
        return [(p.manifest.id, p.manifest.claim_gate) for p in self.visible(session) if p.manifest.claim_gate]

    async def reachable(self, session: Session) -> list[Plugin]:
        """The visible capabilities whose required connector categories the owner has connected."""
        return await self._requirements.connected(session.owner_id, self.visible(session))

    async def surface(self, session: Session, *, fresh: bool = True) -> Surface:
        """The prompts and resources of the capabilities this session can reach: listed now
        (`fresh`), or from the children's last lists (to route a get or read)."""
        return await self._listings.surface(await self.reachable(session), fresh=fresh, session_id=session.id)

    def child_for(self, plugin_id: str, session_id: str | None = None) -> Child:
        """The child of capability `plugin_id` that serves `session_id` (a per-session plugin's
        own instance for that session, started on first use); None: owner context."""
        return self._child_of(self._capability(plugin_id), session_id)

    def _capability(self, plugin_id: str) -> Plugin:
        """The loaded capability `plugin_id`; Unavailable when it was removed meanwhile (the
        owner uninstalled it while the host runs, after a list named it)."""
        plugin = self._plugins.get(plugin_id, "capability")
        if plugin is None:
            raise Unavailable("the capability was removed")
        return plugin

    async def _naming(self, session: Session, plugin_id: str, uri: str) -> list[types.Tool]:
        toolset = await self._bindings.assemble(await self.reachable(session), fresh=False, session_id=session.id)
        return [b.tool for b in toolset.tools.values() if b.capability == plugin_id and app_uri(b.tool) == uri]

    async def app_named(self, session: Session, plugin_id: str, uri: str) -> None:
        """Before `plugin_id` is asked for `uri`: a `ui://` URI only when a tool of `plugin_id`
        the session can see names it, so a refused or unnamed app is never read for a visitor
        (one past the child's message limit would stop the child). Raises as `check_app`."""
        if uri.startswith("ui://") and not await self._naming(session, plugin_id, uri):
            self._refuse_app(session, plugin_id, uri, named=False)

    async def check_app(self, session: Session, plugin_id: str, uri: str, read: types.ReadResourceResult) -> None:
        """Whether `read`, `plugin_id`'s answer to a `resources/read` of `uri`, may go to the
        session: anything but a `ui://` URI may; an app only when a tool of `plugin_id` the
        session can see names it and, pinning on, that tool is approved with this version of
        the app. Raises `Held` (it waits for the owner's review) or `UnknownItem`."""
        if not uri.startswith("ui://"):
            return
        naming = await self._naming(session, plugin_id, uri)
        pins = self._bindings.pins
        if naming and pins is None:
            return
        version = AppVersion.of(uri, read)  # hashed once, whichever of its tools approves it
        if naming and pins is not None and any(pins.approves_app(plugin_id, t, version) for t in naming):
            return
        self._refuse_app(session, plugin_id, uri, named=bool(naming))

    def _refuse_app(self, session: Session, plugin_id: str, uri: str, *, named: bool) -> NoReturn:
        if named or self._bindings.app_held(plugin_id, uri):
            logger.info("session %s: app %r of %s held for the owner's review", session.id, uri[:200], plugin_id)
            raise Held(f"the app {uri[:200]!r} is held for the owner's review: it is new or changed since approved")
        logger.info("session %s: app %r refused: no tool the session sees names it", session.id, uri[:200])
        raise UnknownItem(f"no resource {uri[:200]!r} is available in this session")

    @property
    def listings(self) -> Listings:
        return self._listings

    @property
    def call_timeout_s(self) -> float:
        return self._call_timeout_s

    async def list_tools(self, session: Session) -> VisitorList:
        """The session's tools: every one it may call, or, above the owner's tool search
        threshold, its working set and the host's `find_tools` and `call_tool` (`tool_search`)."""
        listed = await self.visible_tools(session)
        if self._search is None:
            return listed
        return replace(listed, tools=await self._search.shown(session, listed.tools))

    async def visible_tools(self, session: Session, *, fresh: bool = True) -> VisitorList:
        """Every tool the session may call: listed now (`fresh`), or from the last real lists."""
        reachable = await self.reachable(session)
        states = await self._quota_states(session, reachable)
        used_up = {pid for pid, state in states.items() if state.remaining <= 0}
        listed = [p for p in reachable if p.manifest.id not in used_up or self._quota_tools(p)]
        toolset = await self._bindings.assemble(listed, fresh=fresh, session_id=session.id)
        hidden = set(await self._requirements.hidden_tools(session.owner_id, listed))
        for plugin in listed:
            if plugin.manifest.id in used_up:  # only the tools that use the quota up leave
                hidden |= set(self._quota_tools(plugin))
        tools = [tool for tool in toolset.listed() if tool.name not in hidden]
        return VisitorList(tools, {pid: s for pid, s in states.items() if s is not _UNREADABLE})

    async def _quota_states(self, session: Session, visible: list[Plugin]) -> dict[str, QuotaState]:
        """The quota of each gated capability; one that cannot be read counts as exhausted."""
        gated = [p for p in visible if p.manifest.quota_gate() is not None]
        if session.subject is None or not gated:
            return {}
        states: dict[str, QuotaState] = {}

        async def read(plugin: Plugin) -> None:
            state = await self._read_quota(plugin, session, "its tools are hidden")
            if state is not None:
                states[plugin.manifest.id] = state

        async with anyio.create_task_group() as tg:
            for plugin in gated:
                tg.start_soon(read, plugin)
        return states

    async def call_tool(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any] | None,
        meta: Mapping[str, Any] | None,
        progress: ProgressFnT | None,
        client: VisitorClient | None = None,
        *,
        offered: Callable[[types.Tool], bool] | None = None,
    ) -> types.CallToolResult:
        """`client`: the visitor's client, which the child's elicitation and sampling requests
        (and `inference.generate`) reach while the call runs; None refuses them. `offered`: whether
        this session's protocol era is offered a tool at all (one it is not is `unknown`).

        A refusal carries `{code, message}` as structured content only where every client accepts
        it (`Called.accepts`; `errors.error_result` says why)."""

        async def hop(
            child: Child, tool: str, args: dict[str, Any] | None, out: dict[str, Any], call: InFlight
        ) -> types.CallToolResult:
            return await child.call_tool(tool, args, out, timeout_s=self._call_timeout_s, progress=progress, call=call)

        return await self._bounded(hop, session, name, arguments, meta, client, offered)

    async def call_tool_raw(
        self,
        client: VisitorClient | None,
        session: Session,
        name: str,
        arguments: dict[str, Any] | None,
        meta: Mapping[str, Any] | None,
        *,
        offered: Callable[[types.Tool], bool] | None = None,
    ) -> Answer:
        """`call_tool` (no progress) with the child's answer as raw JSON (`Child.call_tool_raw`):
        the same gates, receipt, metrics and refusals; a plain answer of the child comes back as
        its checked dict, anything else as the SDK's model (the host's refusals, the results of
        tool search, a child's answer that is not plain)."""

        async def hop(
            child: Child, tool: str, args: dict[str, Any] | None, out: dict[str, Any], call: InFlight
        ) -> Answer:
            return await child.call_tool_raw(call, tool, args, out, timeout_s=self._call_timeout_s)

        return await self._bounded(hop, session, name, arguments, meta, client, offered)

    async def _bounded(
        self,
        hop: _Hop[_A],
        session: Session,
        name: str,
        arguments: dict[str, Any] | None,
        meta: Mapping[str, Any] | None,
        client: VisitorClient | None,
        offered: Callable[[types.Tool], bool] | None,
    ) -> _A | types.CallToolResult:
        """The boundary of both ways of a call (`call_tool`, `call_tool_raw`): `hop` asks the child."""
        called = Called()
        started = time.perf_counter()
        outcome = "cancelled"  # what a call that ends by cancellation (no answer) counts as
        try:
            result = await self._call(session, name, arguments, meta, client, called, offered, hop)
            outcome = "tool_error" if is_error(result) else "ok"
            return result
        except Exception as exc:
            known = at_boundary(exc, logger, "session %s: %s", session.id, name[:80], refusals=self._refusals)
            refusal = tool_error(known or exc, structured=False)
            outcome = known.code if known is not None else "internal"
            return tool_error(known or exc) if called.accepts(refusal) else refusal
        finally:
            self._counted(called, outcome, time.perf_counter() - started)

    def _counted(self, called: Called, outcome: str, seconds: float) -> None:
        """One call in the metrics: labelled by the tool its name resolved to (a name that did
        not resolve is the visitor's text, never a label) and its outcome."""
        if self._metrics is None:
            return
        tool = called.tool.name if called.tool is not None else ""
        self._metrics.tool_call("visitor", called.capability, tool, outcome, seconds)
        if outcome == QuotaExhausted.code:
            self._metrics.quota_refused(called.capability, "call")

    async def admit(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any] | None,
        called: Called | None = None,
        offered: Callable[[types.Tool], bool] | None = None,
    ) -> tuple[Plugin, types.Tool]:
        """The gates a call passes before its child is called (binding, connectors, quota, and
        the owner's approval of a destructive tool, used up here): the plugin and its tool.
        `called` learns the tool as soon as the name resolves (its boundary shapes a refusal by it).
        Raises UnknownTool, QuotaExhausted, Unavailable or a hold's refusal."""
        toolset = await self._bindings.assemble(await self.reachable(session), fresh=False, session_id=session.id)
        binding = toolset.tools.get(name)
        if binding is not None and name in await self._requirements.hidden_tools(
            session.owner_id, [self._capability(binding.capability)]
        ):
            binding = None  # the owner's connection cannot do what it needs: as if it were not there
        if binding is not None and offered is not None and not offered(binding.tool):
            logger.info("session %s: tool %r refused as unknown (not offered in its era)", session.id, name[:80])
            raise UnknownTool(f"no tool named {name[:80]!r} is available in this session")
        if binding is None:
            logger.info(
                "session %s: tool %r refused as unknown (%s)",
                session.id,
                name[:80],
                self._why_unknown(session, name),
            )
            raise UnknownTool(f"no tool named {name[:80]!r} is available in this session")
        if called is not None:
            called.tool = binding.tool
            called.capability = binding.capability
        plugin = self._capability(binding.capability)
        await self._check_quota(plugin, session, binding.tool.name)
        if self._rules is not None:  # the owner's rules; no rule matched: today's default hold
            await self._rules.admit(visitor_call(session, plugin.manifest.id, binding.tool, arguments))
        elif self._holds is not None and needs_hold(binding.tool):
            used = await self._holds.admit(session.owner_id, session.id, plugin.manifest.id, name, arguments or {})
            logger.info("session %s: %s runs on the owner's approval (hold %s)", session.id, name[:80], used)
        return plugin, binding.tool

    async def _call(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any] | None,
        meta: Mapping[str, Any] | None,
        client: VisitorClient | None,
        called: Called,
        offered: Callable[[types.Tool], bool] | None,
        hop: _Hop[_A],
    ) -> _A | types.CallToolResult:
        if self._search is not None and name in HOST_TOOLS:  # tool search's find_tools and call_tool
            tools = (await self.visible_tools(session, fresh=False)).tools
            searched = await self._search.answer(session, tools, name, arguments, offered)
            if isinstance(searched, types.CallToolResult):
                return searched
            if searched is not None:  # call_tool: its inner call passes every gate below
                name, arguments = searched
        kept = visitor_meta(meta, self._meta_caps)
        plugin, tool = await self.admit(session, name, arguments, called, offered)
        child = self._child_of(plugin, session.id)  # a per-session plugin: this session's own instance
        scope = CallScope(session.owner_id, session)
        with child.router.serving(client) as call:
            if not named_ops(plugin):
                result = await hop(child, name, arguments, forwarded_meta(kept, scope.wire()), call)
            else:
                with self._grants.issue(plugin.manifest.id, scope, name, call) as (token, grant):
                    result = await hop(child, name, arguments, forwarded_meta(kept, scope.wire(), token), call)
                if QuotaExhausted.code in grant.refusals:
                    raise exhausted(plugin.manifest.id, session.subject)
        await self.receipt(session, plugin.manifest.id, tool.name, result)
        # The child does not speak for the host (its serverInfo stamp; an `mcp-host/error` of its
        # own, a forged refusal): dropped here, where the child's result is told from the host's
        # (a plain answer has none: `wire.plain_tool_result`).
        return result if isinstance(result, dict) else without_host_keys(result)

    async def receipt(self, session: Session, capability: str, tool: str, result: Answer) -> None:
        """Record that the call (or task, `visitor.tasks`) completed; a failure to record changes
        nothing for the visitor."""
        if self._turns is None:
            return
        if isinstance(result, dict):
            ok = answer_ok(result["isError"], result.get("structuredContent"))
        else:
            ok = receipt_ok(result)
        try:
            await self._turns.record(session.id, capability, tool, ok)
        except Exception as exc:
            log_unless_outage(
                exc, logger, "session %s: the receipt of %s/%s was not recorded", session.id, capability, tool[:80]
            )

    @staticmethod
    def _quota_tools(plugin: Plugin) -> tuple[str, ...]:
        gate = plugin.manifest.quota_gate()
        return gate.tools if gate is not None else ()

    async def _check_quota(self, plugin: Plugin, session: Session, tool: str) -> None:
        gate = plugin.manifest.quota_gate()
        if session.subject is None or gate is None or not gate.gates(tool):
            return
        state = await self._read_quota(plugin, session, "the call is refused")
        if state is _UNREADABLE:
            raise Unavailable("the capability is unavailable right now")
        if state is not None and state.remaining <= 0:
            raise exhausted(plugin.manifest.id, session.subject, state)

    async def _read_quota(self, plugin: Plugin, session: Session, consequence: str) -> QuotaState | None:
        """The session's quota of `plugin`; `_UNREADABLE` (nothing left) when it cannot be read."""
        try:
            return await self._quota.state(plugin, session.owner_id, session.subject)
        except Exception as exc:
            log_unless_outage(
                exc,
                logger,
                "%s: quota of subject %s could not be read; %s",
                plugin.manifest.id,
                session.subject,
                consequence,
            )
            return _UNREADABLE

    def _why_unknown(self, session: Session, name: str) -> str:
        """Why `name` is refused, for the log only: the visitor gets `unknown` either way."""
        if session.credential_revoked:
            return "the session's access code or API key was revoked"
        visible = {p.manifest.id for p in self.visible(session)}
        for pid in self._bindings.last_seen_in(name):
            if pid not in visible:
                return f"exists in {pid}, which this session may not see"
            found = self._plugins.get(pid, "capability")
            manifest = found.manifest if found is not None else None
            if manifest is not None and (manifest.requires or name in manifest.visitor_tool_requires):
                return f"{pid} needs a connector the owner has not connected, or one that cannot do what it needs"
            return f"exposed by {pid} but withheld: {self._bindings.causes.get(pid)}"
        for plugin in self._plugins.capabilities:
            if plugin.manifest.id not in visible and name in (plugin.manifest.visitor_tools or ()):
                return f"declared by {plugin.manifest.id}, which this session may not see"
        return "no capability has it"
