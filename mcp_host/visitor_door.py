"""The visitor door: what a visitor session may list and call, and the forwarding of calls.

Above: `visitor_http` (the MCP server on each session's endpoint). Below: `bindings` (the
assembled tool list), `children` (the forwarded call), `meta` (what `_meta` travels).

This is the one boundary of the visitor face that turns exceptions into wire errors: a
`HostError` becomes a tool result with `isError: true` and `{code, message}`; anything else
is logged with its traceback and answered opaquely — `str(exc)` never reaches a visitor.
"Not allowed" looks like "not there": a tool the session may not see gets the same
`unknown` answer as a tool that does not exist; the log says which.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mcp.types as types
from mcp.shared.dispatcher import ProgressFnT

from .bindings import Bindings
from .children import Child
from .errors import HostError, UnknownTool
from .meta import MetaCaps, forwarded_meta, visitor_meta
from .plugins import Plugin
from .sessions import Session

__all__ = ["VisitorDoor", "error_result"]

logger = logging.getLogger(__name__)



def error_result(code: str, message: str) -> types.CallToolResult:
    """A refused or failed call, as DESIGN.md's error vocabulary says."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structured_content={"code": code, "message": message},
        is_error=True,
    )


def session_scope(session: Session) -> dict[str, Any]:
    """The trusted `mcp-host/session` value (DESIGN.md "Plugin ABI")."""
    return {
        "owner_id": session.owner_id,
        "session_id": session.id,
        "mode": session.mode,
        "subject": session.subject.model_dump() if session.subject else None,
        "visitor": session.visitor.model_dump() if session.visitor else None,
        "role": session.role.id,
    }


class VisitorDoor:
    def __init__(
        self,
        plugins: Sequence[Plugin],
        bindings: Bindings,
        child_of: Callable[[Plugin], Child],
        *,
        meta_caps: MetaCaps,
        call_timeout_s: float,
    ) -> None:
        self._capabilities = [p for p in plugins if p.manifest.kind == "capability"]
        self._by_id = {p.manifest.id: p for p in self._capabilities}
        self._bindings = bindings
        self._child_of = child_of
        self._meta_caps = meta_caps
        self._call_timeout_s = call_timeout_s

    def visible(self, session: Session) -> list[Plugin]:
        """Capabilities this session may see: `acl: always`, or granted by its role snapshot."""
        granted = set(session.role.capabilities)
        return [p for p in self._capabilities if p.manifest.acl == "always" or p.manifest.id in granted]

    async def list_tools(self, session: Session) -> list[types.Tool]:
        toolset = await self._bindings.assemble(self.visible(session), fresh=True)
        return toolset.listed()

    async def call_tool(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any] | None,
        meta: Mapping[str, Any] | None,
        progress: ProgressFnT | None,
    ) -> types.CallToolResult:
        try:
            return await self._call(session, name, arguments, meta, progress)
        except HostError as exc:
            logger.info("session %s: %s -> %s: %s", session.id, name[:80], exc.code, exc.message)
            return error_result(exc.code, exc.message)
        except Exception:
            logger.exception("session %s: %s failed unexpectedly", session.id, name[:80])
            return error_result("unavailable", "the call failed inside the host")

    async def _call(
        self,
        session: Session,
        name: str,
        arguments: dict[str, Any] | None,
        meta: Mapping[str, Any] | None,
        progress: ProgressFnT | None,
    ) -> types.CallToolResult:
        kept = visitor_meta(meta, self._meta_caps)
        toolset = await self._bindings.assemble(self.visible(session), fresh=False)
        binding = toolset.tools.get(name)
        if binding is None:
            logger.info(
                "session %s: tool %r refused as unknown (%s)",
                session.id,
                name[:80],
                self._why_unknown(session, name),
            )
            raise UnknownTool(f"no tool named {name[:80]!r} is available in this session")
        child = self._child_of(self._by_id[binding.capability])
        result = await child.call_tool(
            name,
            arguments,
            forwarded_meta(kept, session_scope(session)),
            timeout_s=self._call_timeout_s,
            progress=progress,
        )
        if result.meta:
            # The host answers as itself: the child's serverInfo stamp does not travel.
            result.meta.pop("io.modelcontextprotocol/serverInfo", None)
        return result

    def _why_unknown(self, session: Session, name: str) -> str:
        """Why `name` is refused, for the log only: the visitor gets `unknown` either way."""
        visible = {p.manifest.id for p in self.visible(session)}
        for pid in self._bindings.last_seen_in(name):
            if pid not in visible:
                return f"exists in {pid}, which this session may not see"
            return f"exposed by {pid} but withheld: {self._bindings.causes.get(pid)}"
        for plugin in self._capabilities:
            if plugin.manifest.id not in visible and name in (plugin.manifest.visitor_tools or ()):
                return f"declared by {plugin.manifest.id}, which this session may not see"
        return "no capability has it"
