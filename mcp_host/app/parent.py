"""A node's wiring (`serve --parent URL`): the capabilities its parent lends join this host's
plugins, and each call to one leaves an audit row here.

Above: `shared` (which gives the lent capabilities' audit to the child factory's `OnceOpen`
before any child is made) and
`wiring` (which asks the parent first). Below: `children` (the parent's client and its remote
plugins) and `policy` (the audit log). It sits in `app/` because it joins the two.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio

from mcp_host.children import OnCall, granted_by_parent, parent_plugins
from mcp_host.plugins import Registry
from mcp_host.policy import AuditLog
from mcp_host.settings import Settings

__all__ = ["audit_parent_calls", "lent_by_parent"]

logger = logging.getLogger("mcp_host")


async def lent_by_parent(settings: Settings, plugins: Registry) -> list[str]:
    """A node (`serve --parent URL`): the parent's granted capabilities join this host's as
    remote capabilities, pending this owner's review like any plugin. A parent that cannot be
    reached leaves none (logged); a capability id taken here is skipped."""
    if settings.parent_url is None or settings.parent_token is None:
        return []
    token = settings.parent_token.get_secret_value()
    try:
        with anyio.fail_after(settings.children.start_timeout_s):
            granted = await granted_by_parent(settings.parent_url, token, timeout_s=settings.children.call_timeout_s)
    except Exception:
        logger.warning(
            "the parent host at %s could not be reached; none of its capabilities are here", settings.parent_url
        )
        return []
    added = []
    for plugin in parent_plugins(settings.parent_url, token, granted, settings.data_dir / "parent"):
        try:
            plugins.add(plugin)
            added.append(plugin.manifest.id)
        except ValueError:
            logger.warning("the parent's capability %s has an id taken here; skipped", plugin.manifest.id)
    logger.info("parent %s lends %d capabilities", settings.parent_url, len(granted))
    return added


def audit_parent_calls(audit: AuditLog, owner_id: str, lent: Sequence[str]) -> dict[str, OnCall]:
    """What each of the parent's capabilities tells before a call (by capability id): a row
    here (`parent_call`) with the request id the parent's audit names it by."""
    told_by: dict[str, OnCall] = {}
    for capability in lent:

        async def told(tool: str, request_id: str, capability: str = capability) -> None:
            row = {"capability": capability, "tool": tool, "request_id": request_id}
            try:
                await audit.record(owner_id, "parent_call", row, "sent")
            except Exception:  # the call goes on; the parent decides and audits it either way
                logger.warning("the audit row of a call to the parent could not be written", exc_info=True)

        told_by[capability] = told
    return told_by
