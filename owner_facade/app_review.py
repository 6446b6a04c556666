"""What the owner sees of an app (MCP Apps) when reviewing the tool naming it: `app_review` in
`tools_pending` — the app's declared network reach, permissions and domain, warnings, and a
changed app as a unified diff of the approved and the live contents — and `app_contents`, one
stored version's HTML for the console's sandboxed preview.

Above: `approvals` (`tools_pending`) and `tools` (the table). Below: `services` (the pinned
definitions, `AppContents`) and the standard library's `difflib`.

The reach, permissions and domain are what the app declares (`_meta.ui` on its contents, as the
pin covers it); a client may grant less, never more. The diff is of the contents as the host read
them and kept (`mcp_host.store.AppContents`), at most `DIFF_MAX_LINES` lines and
`DIFF_MAX_BYTES` bytes, its last line saying how much was cut.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from mcp_host.errors import UnknownTool
from mcp_host.visitor import app_reach

from .models import AppContentsArguments
from .owner_tool import OwnerTool
from .services import OwnerServices

__all__ = ["APP_TOOLS", "DIFF_MAX_BYTES", "DIFF_MAX_LINES", "app_review", "capped_diff"]

DIFF_MAX_LINES = 400
DIFF_MAX_BYTES = 64 * 1024


def capped_diff(approved: str, live: str, *, max_lines: int = DIFF_MAX_LINES, max_bytes: int = DIFF_MAX_BYTES) -> str:
    """A unified diff of `approved` and `live` (`approved` / `live` as its file names), cut at
    `max_lines` lines or `max_bytes` UTF-8 bytes, whichever comes first; a cut diff ends with a
    line saying how many lines were left out."""
    lines = list(difflib.unified_diff(approved.splitlines(), live.splitlines(), "approved", "live", lineterm=""))
    kept: list[str] = []
    size = 0
    for line in lines[:max_lines]:
        size += len(line.encode("utf-8")) + 1
        if size > max_bytes:
            break
        kept.append(line)
    if len(kept) < len(lines):
        kept.append(f"… diff cut: {len(lines) - len(kept)} more lines (at most {max_lines} lines, {max_bytes} bytes)")
    return "\n".join(kept)


def _app(definition: Mapping[str, Any] | None) -> Mapping[str, Any]:
    app = (definition or {}).get("app")
    return app if isinstance(app, dict) else {}


def _declared(app: Mapping[str, Any]) -> list[dict[str, Any]]:
    declared = app.get("declared")
    return [ui for ui in declared if isinstance(ui, dict)] if isinstance(declared, list) else []


def _permissions(declared: list[dict[str, Any]]) -> list[str]:
    asked = [ui["permissions"] for ui in declared if isinstance(ui.get("permissions"), dict)]
    return sorted({str(name) for permissions in asked for name in permissions})


def _domain(declared: list[dict[str, Any]]) -> str | None:
    return next((str(ui["domain"]) for ui in declared if isinstance(ui.get("domain"), str)), None)


def _warnings(live: Mapping[str, Any], approved: Mapping[str, Any] | None, shown: dict[str, Any]) -> list[str]:
    warnings: list[str] = []
    if live.get("unreadable"):
        warnings.append("the app could not be read: approving the tool serves no version of it until one reads")
    reach = shown["reach"]
    if reach["connect"]:
        warnings.append(f"the app may send and fetch data to and from {', '.join(reach['connect'])}")
    if reach["resources"] or reach["frames"]:
        warnings.append(f"the app may load scripts, styles, images or frames from {_loads(reach)}")
    if shown["permissions"]:
        warnings.append(f"the app asks the client for {', '.join(shown['permissions'])}")
    if approved is not None and shown["approved_sha256"] != shown["live_sha256"]:
        warnings.append("the app changed since you approved it")
    return warnings


def _loads(reach: Mapping[str, list[str]]) -> str:
    return ", ".join(sorted({*reach["resources"], *reach["frames"]}))


async def app_review(s: OwnerServices, plugin_id: str, approved: dict[str, Any] | None, seen: dict[str, Any]) -> Any:
    """The `app_review` of a pending tool whose approved or live definition names an app, or
    None when neither does."""
    live, before = _app(seen), _app(approved)
    if not live and not before:
        return None
    declared = _declared(live)
    shown: dict[str, Any] = {
        "uri": live.get("uri") or before.get("uri"),
        "live_sha256": live.get("sha256"),
        "approved_sha256": before.get("sha256"),
        "size": live.get("size"),
        "reach": app_reach(declared),
        "permissions": _permissions(declared),
        "domain": _domain(declared),
    }
    shown["warnings"] = _warnings(live, before or None, shown)
    shown["diff"] = await _diff(s, plugin_id, shown["approved_sha256"], shown["live_sha256"])
    return shown


async def _diff(s: OwnerServices, plugin_id: str, approved: Any, live: Any) -> str | None:
    """The diff of two kept versions; None when one is missing, unkept or they are the same."""
    if s.apps is None or not isinstance(approved, str) or not isinstance(live, str) or approved == live:
        return None
    old, new = await s.apps.get(plugin_id, approved), await s.apps.get(plugin_id, live)
    if old is None or new is None:
        return None
    return capped_diff(old.body, new.body)


async def _app_contents(s: OwnerServices, owner_id: str, a: AppContentsArguments) -> dict[str, Any]:
    """One kept version of an app (for the console's sandboxed preview)."""
    stored = None if s.apps is None else await s.apps.get(a.capability, a.sha256)
    if stored is None:
        raise UnknownTool(f"no version {a.sha256[:12]}… of an app of {a.capability[:64]!r} is kept")
    return {"capability": stored.plugin_id, "uri": stored.uri, "sha256": stored.sha256, "html": stored.body}


APP_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "app_contents",
        "One version of an app (MCP Apps) a capability's tool names, as the host read it: its HTML, by the "
        "sha256 tools_pending shows (app_review.live_sha256 or approved_sha256). To read, not to render "
        "outside a sandbox.",
        AppContentsArguments,
        _app_contents,
    ),
]
