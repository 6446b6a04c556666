"""The checks an app (MCP Apps) must pass before its tool can even wait for the owner: what a
hostile app is refused for, and the network reach the owner reviews.

Above: `app_reader` (checks each app it reads) and `bindings` (rejects the tool naming a
refused app, as it rejects an unsafe tool). Below: `wire.AppVersion` (the app as read).

An app is refused — its tool goes to `rejected`, which no approval changes — when:
- its declared csp (`_meta.ui.csp` on any of its contents) lets it reach anywhere: a source in
  `connectDomains`, `resourceDomains`, `frameDomains` or `baseUriDomains` that is `*`, a bare
  network scheme (`https:`, `http:`, `wss:`, `ws:`), a host of `*` (`https://*`, `*:443`), or a
  wildcard over a single label (`*.com`, `https://*.dev`) — see `anywhere`; a field that is not a
  list of strings is refused as unreadable (the client would guess);
- it is larger than the host's cap (`MCP_HOST_APP_MAX_BYTES`);
- the plugin whose tool names it does not serve it (mcp_host/README.md, "Hostile apps").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_host.wire import AppVersion

__all__ = ["CSP_FIELDS", "AppRefused", "anywhere", "csp_problem", "reach", "too_large"]

CSP_FIELDS = {"connectDomains": "connect", "resourceDomains": "resources", "frameDomains": "frames"}
CSP_FIELDS["baseUriDomains"] = "base_uri"
"""Each declared csp field → its name in `app_review.reach`."""

_NETWORK_SCHEMES = frozenset({"http", "https", "ws", "wss"})
_SCHEME_ONLY = re.compile(r"^([a-z][a-z0-9+.-]*):$")
_SHOWN = 120  # characters of a declared source said back


@dataclass(frozen=True)
class AppRefused:
    """Why an app is refused; `sticky`: reading it again would do the same harm (an answer
    past the child's message limit stops the child), so it is not read again until the plugin
    is reinstalled or the host restarts."""

    cause: str
    sticky: bool = False


def anywhere(source: str) -> bool:
    """Whether one csp source means "any origin": `*`, a bare network scheme, a host `*`, or a
    wildcard over one label (`*.com`). A wildcard over two labels (`*.example.com`) is a site's
    subdomains: allowed (`*.co.uk` too — the host carries no public-suffix list)."""
    text = source.strip().lower()
    scheme = _SCHEME_ONLY.match(text)
    if scheme is not None:
        return scheme.group(1) in _NETWORK_SCHEMES
    host = text.split("://", 1)[-1].split("/", 1)[0]
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if host in ("*", ""):
        return True
    if host.startswith("*."):
        rest = host[2:]
        return "." not in rest.strip(".") or "*" in rest
    return "*" in host  # a wildcard elsewhere in a host is no csp source a browser knows: refused


def _declared_csps(app: AppVersion) -> list[Mapping[str, Any]]:
    return [ui["csp"] for ui in app.declared if isinstance(ui, dict) and isinstance(ui.get("csp"), dict)]


def csp_problem(app: AppVersion) -> str | None:
    """Why `app`'s declared csp is refused (the field and the value), or None."""
    for csp in _declared_csps(app):
        for field in CSP_FIELDS:
            sources = csp.get(field)
            if sources is None:
                continue
            if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
                return f"its app {app.uri[:200]!r} declares csp.{field} that is not a list of origins"
            for source in sources:
                if anywhere(source):
                    return (
                        f"its app {app.uri[:200]!r} declares csp.{field} {source[:_SHOWN]!r}, "
                        "which lets it reach any origin; name each origin it needs"
                    )
    return None


def reach(declared: list[Any]) -> dict[str, list[str]]:
    """The origins an app's declared csp lets it reach, by kind (`connect`, `resources`,
    `frames`, `base_uri`), each sorted and once; empty lists when it declares none."""
    found: dict[str, set[str]] = {name: set() for name in CSP_FIELDS.values()}
    for ui in declared:
        csp = ui.get("csp") if isinstance(ui, dict) else None
        if not isinstance(csp, dict):
            continue
        for field, name in CSP_FIELDS.items():
            sources = csp.get(field)
            if isinstance(sources, list):
                found[name] |= {s for s in sources if isinstance(s, str)}
    return {name: sorted(sources) for name, sources in found.items()}


def too_large(uri: str, size: int | None, cap: int) -> AppRefused:
    """The refusal of an app past `cap` bytes (`size` None: past the child's message limit,
    so not measured)."""
    measured = "" if size is None else f" ({size} bytes)"
    return AppRefused(
        f"its app {uri[:200]!r} is larger than {cap / (1024 * 1024):g} MiB{measured}", sticky=size is None
    )
