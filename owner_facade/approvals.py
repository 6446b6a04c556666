"""The approvals slice of the owner tool table: what waits for the owner — tools
(`tools_pending`), approving one (`tool_approve`) or every pending tool of a capability at once
(`tools_approve`) — and visitor calls held for the owner's decision (`holds_list`, `hold_decide`).

Above: `tools` (the one table). Below: `services` (the pins, the catalogue's rejected
tools), `next_steps` (what is left before a visitor can call the capability) and `mcp_host`'s
public surface. Handlers raise `HostError`s; the door turns them into `{code, message}`.

What the owner approves is what they reviewed: `tool_approve` and `tools_approve` take the
`live_sha256` that `tools_pending` showed and refuse, approving nothing, when a tool changed
since. `tools_approve` without hashes approves every pending tool as it is live now and answers
each with its definition and hash, so the answer is the record of what was approved.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from mcp_host.errors import InvalidArguments, Unconfigured, UnknownTool
from mcp_host.policy import DefinitionChanged, PendingTool, collision_key, definition_hash

from .app_review import app_review
from .models import HoldDecide, HoldsList, NoArguments, ToolApprove, ToolsApprove
from .next_steps import next_steps
from .owner_tool import Answer, OwnerTool
from .services import OwnerServices

__all__ = ["APPROVAL_TOOLS", "tool_approve", "tools_approve", "tools_pending"]

# How long `tools_pending` and `tools_approve` wait for the review at start (its children starting).
_REVIEW_WAIT_S = 20.0


def _colliding(s: OwnerServices, alike: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The shown tools of `alike` whose capability this host runs, as the owner sees them."""
    shown: list[dict[str, Any]] = []
    for plugin_id, tool in alike:
        plugin = s.plugin(plugin_id, "capability")
        if plugin is not None:
            shown.append({"capability": plugin_id, "tool": tool, "builtin": plugin.builtin})
    return shown


_COLLIDE = "tool names that differ only in case, '-' or '_' collide, and a collision exposes neither"


def _named(colliding: list[dict[str, Any]]) -> str:
    return ", ".join(f"{c['tool']!r} of {c['capability']}{' (builtin)' if c['builtin'] else ''}" for c in colliding)


def _hiding(tool: str, capability: str, colliding: list[dict[str, Any]]) -> str:
    return (
        f"approving {tool[:64]!r} of {capability[:64]!r} hides it and {_named(colliding)} from every session that "
        f"can see both ({_COLLIDE})"
    )


async def _pending(s: OwnerServices, tool: PendingTool) -> dict[str, Any]:
    colliding = _colliding(s, tool.collides_with)
    shown = {
        "capability": tool.plugin_id,
        "tool": tool.tool,
        "approved": tool.approved,
        "live": tool.seen,
        "live_sha256": definition_hash(tool.seen).hex(),
        "seen_at": tool.seen_at.isoformat(),
        "collides_with": colliding,
    }
    if colliding:
        shown["warning"] = _hiding(tool.tool, tool.plugin_id, colliding)
    review = await app_review(s, tool.plugin_id, tool.approved, tool.seen)
    if review is not None:
        shown["app_review"] = review
    return shown


async def tools_pending(s: OwnerServices, owner_id: str, _: NoArguments) -> dict[str, Any]:
    """Tools hidden until approved: new ones, and ones whose definition changed since approval,
    with the approved and the live definition side by side (JSON, so any text in them is escaped),
    and the tools visitors are shown now that approving one would hide (`collides_with`); and the
    tools the host drops whatever the owner approves (`rejected`: unsafe name, text or schema),
    each with its cause and its name escaped. A tool naming an app (MCP Apps) also has
    `app_review` (`app_review.app_review`: its reach, permissions, warnings, the diff)."""
    # Right after a start the children are still being listed: answer once they have been
    # (bounded), so a fresh host shows every plugin's tools rather than an empty list.
    reviewed = await s.review.settled(within_s=_REVIEW_WAIT_S) if s.review is not None else True
    rejected = [{**tool.model_dump(mode="json"), "status": "rejected"} for tool in s.catalogue.rejected()]
    if s.pins is None:
        return {"pinning": False, "pending": [], "rejected": rejected}
    pending = [await _pending(s, t) for t in await s.pins.pending()]
    answer: dict[str, Any] = {"pinning": True, "pending": pending, "rejected": rejected}
    if not reviewed:
        answer["note"] = "the host is still listing its plugins' tools; ask again for the rest"
    return answer


async def tool_approve(s: OwnerServices, owner_id: str, a: ToolApprove) -> dict[str, Any]:
    """Approve a tool as it is now. One whose name collides with a tool visitors are shown is
    approved only with `hide_colliding` (else `invalid_arguments` naming what it would hide):
    the owner decides knowingly that both go dark for sessions that see both."""
    if s.pins is None:
        raise Unconfigured("tool pinning is off on this host (MCP_HOST_PIN_TOOLS=false)")
    cause = s.catalogue.is_rejected(a.capability, a.tool)
    if cause is not None:
        raise InvalidArguments(f"{a.tool[:64]!r} of {a.capability[:64]!r} is rejected ({cause}); it cannot be approved")
    expected = bytes.fromhex(a.live_sha256) if a.live_sha256 is not None else None
    colliding = _colliding(s, await s.pins.exposed_alike(a.capability, a.tool))
    if colliding and not a.hide_colliding:
        raise InvalidArguments(
            f"{_hiding(a.tool, a.capability, colliding)}; to approve it anyway, call again with hide_colliding: true"
        )
    try:
        before = await s.pins.approve(a.capability, a.tool, expected)
    except DefinitionChanged:
        raise InvalidArguments(
            f"{a.tool[:64]!r} of {a.capability[:64]!r} changed since it was listed; review it again"
        ) from None
    if before is None:
        raise UnknownTool(f"no tool {a.tool[:64]!r} of {a.capability[:64]!r} has been seen")
    if s.admin is not None:
        s.admin.announce(a.capability)  # the sessions that see it are shown the tool now
    return {
        "approved": {"capability": before.plugin_id, "tool": before.tool, "definition": before.seen},
        "hidden": colliding,
    }


def _chosen(s: OwnerServices, a: ToolsApprove, pending: Sequence[PendingTool]) -> dict[str, PendingTool | None]:
    """The tools `a` approves, with what `tools_pending` shows of each (None for a named tool
    that is not pending). A rejected tool named is refused; the host never pins one, so every
    pending tool is approvable."""
    if a.tools is None:
        return {tool.tool: tool for tool in pending}
    for name in a.tools:
        cause = s.catalogue.is_rejected(a.capability, name)
        if cause is not None:
            raise InvalidArguments(
                f"{name[:64]!r} of {a.capability[:64]!r} is rejected ({cause}); it cannot be approved"
            )
    by_name = {tool.tool: tool for tool in pending}
    return {name: by_name.get(name) for name in a.tools}


def _batch_collisions(s: OwnerServices, capability: str, chosen: dict[str, PendingTool | None]) -> list[dict[str, Any]]:
    """The tools that approving all of `chosen` hides: shown ones each collides with, and the
    chosen ones whose names collide with each other."""
    alike: set[tuple[str, str]] = {pair for tool in chosen.values() if tool is not None for pair in tool.collides_with}
    by_key: defaultdict[str, list[str]] = defaultdict(list)
    for name in chosen:
        by_key[collision_key(name)].append(name)
    alike |= {(capability, name) for names in by_key.values() if len(names) > 1 for name in names}
    return _colliding(s, sorted(alike))


async def tools_approve(s: OwnerServices, owner_id: str, a: ToolsApprove) -> dict[str, Any]:
    """Approve every pending tool of a capability (or the ones `tools` names, each at the hash
    the owner reviewed), all or none, and answer each with its definition and `live_sha256`.
    Rejected tools are listed, never approved. Tools that collide with shown ones or with each
    other are approved only with `hide_colliding` (else `invalid_arguments` naming them)."""
    if s.pins is None:
        raise Unconfigured("tool pinning is off on this host (MCP_HOST_PIN_TOOLS=false)")
    plugin = s.plugin(a.capability, "capability")
    if plugin is None:
        raise InvalidArguments(f"capability: no capability named {a.capability[:80]!r} is loaded")
    if s.review is not None:  # right after a start: once the capability's tools have been listed (bounded)
        await s.review.settled(within_s=_REVIEW_WAIT_S)
    pending = [tool for tool in await s.pins.pending() if tool.plugin_id == a.capability]
    chosen = _chosen(s, a, pending)
    colliding = _batch_collisions(s, a.capability, chosen)
    if colliding and not a.hide_colliding:
        raise InvalidArguments(
            f"approving these tools of {a.capability[:64]!r} hides {_named(colliding)} from every session that can "
            f"see them ({_COLLIDE}); to approve them anyway, call again with hide_colliding: true"
        )
    if a.tools is not None:
        expected = {name: bytes.fromhex(digest) for name, digest in a.tools.items()}
    else:
        expected = {name: definition_hash(tool.seen) for name, tool in chosen.items() if tool is not None}
    try:
        approved = await s.pins.approve_many(a.capability, expected)
    except DefinitionChanged:
        raise InvalidArguments(
            f"a tool of {a.capability[:64]!r} changed since it was listed, or was never seen; nothing was approved:"
            " review them again (tools_pending)"
        ) from None
    if approved and s.admin is not None:
        s.admin.announce(a.capability)  # the sessions that see it are shown the tools now
    left = [tool.tool for tool in await s.pins.pending() if tool.plugin_id == a.capability]
    return {
        "capability": a.capability,
        "approved": [
            {"tool": tool.tool, "live_sha256": definition_hash(tool.seen).hex(), "definition": tool.seen}
            for tool in approved
        ],
        "hidden": colliding,
        "rejected": [
            r.model_dump(include={"tool", "cause"}) for r in s.catalogue.rejected() if r.capability == a.capability
        ],
        **await next_steps(s, owner_id, plugin, left),
    }


async def _holds_list(s: OwnerServices, owner_id: str, a: HoldsList) -> Answer:
    """Visitor calls waiting for the owner (or every hold); `arguments` are the visitor's own words."""
    holds = await s.holds.of_owner(owner_id, everything=a.status == "all")
    return {"holds": [hold.shown() for hold in holds]}


async def _hold_decide(s: OwnerServices, owner_id: str, a: HoldDecide) -> Answer:
    return {"hold": (await s.holds.decide(owner_id, a.id, a.approve)).shown()}


APPROVAL_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "tools_pending",
        "Tools hidden from visitors until you approve them (new, or changed since approval), "
        "with the approved and the live definition side by side, and the tools visitors see now "
        "that approving one would hide (collides_with: a name that differs only in case, '-' or '_'); "
        "and, under rejected, the tools no visitor is shown whatever you approve (unsafe name, text or "
        "schema, or an app refused: a csp open to any origin, too large, not served by its own plugin), each "
        "with its cause. A tool naming an app (MCP Apps) has app_review: the app's declared network reach, "
        "permissions and domain, warnings, and a changed app's unified diff against the approved one.",
        NoArguments,
        tools_pending,
    ),
    OwnerTool(
        "tool_approve",
        "Approve a tool's live definition, so visitors can see and call it. A tool that collides "
        "with one visitors see needs hide_colliding: true, and then hides both (listed in `hidden`).",
        ToolApprove,
        tool_approve,
    ),
    OwnerTool(
        "tools_approve",
        "Approve every pending tool of a capability at once (or the ones `tools` names, each with the "
        "live_sha256 you reviewed), all or none; answers each approved tool with its definition and "
        "live_sha256, the rejected ones it left out, and what is left before a visitor can call the "
        "capability (next: each an owner tool with its arguments).",
        ToolsApprove,
        tools_approve,
    ),
    OwnerTool(
        "holds_list",
        "Visitor calls to destructive tools waiting for your approval (status: pending, the default, "
        "or all), with the visitor's arguments.",
        HoldsList,
        _holds_list,
    ),
    OwnerTool(
        "hold_decide",
        "Approve or deny a pending hold; an approved call runs once, when the visitor repeats it unchanged.",
        HoldDecide,
        _hold_decide,
    ),
]
