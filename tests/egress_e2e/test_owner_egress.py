"""The owner widens a plugin's egress on a running host and narrows it again: a plugin whose
manifest names no host cannot reach the test site; after `plugin_egress_allow` (the site by name
at its port, `private` since it answers at a loopback address) the plugin's child restarts and a
visitor's next call reaches it; after `plugin_egress_remove` it cannot again.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.ecosystem.support import owner_call, owner_client
from tests.egress_e2e.support import Allowed, Site, egress_host_fixture, fixture_plugin, site_fixture
from tests.hosting import RunningHost
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]  # children in the real sandbox

HTTPX = "test.egress_httpx"

site = site_fixture()


def offline(site: Site) -> list[Allowed]:
    return [fixture_plugin("egress_httpx", [])]


host = egress_host_fixture(offline)


async def visitor_get(host: RunningHost, url: str) -> dict[str, Any]:
    async with host.client(await host.new_session()) as client:
        result = await client.call_tool("httpx_get", {"url": url})
    assert not result.is_error, result
    return dict(result.structured_content or {})


async def test_the_owner_allows_a_host_the_child_restarts_and_reaches_it_then_removes_it(
    host: RunningHost, site: Site
) -> None:
    entry = f"site.example.test:{site.allowed}"
    before = await visitor_get(host, site.url())
    async with owner_client(host) as owner:
        failed, allowed = await owner_call(owner, "plugin_egress_allow", plugin_id=HTTPX, host=entry, private=True)
    during = await visitor_get(host, site.url())
    async with owner_client(host) as owner:
        failed_remove, removed = await owner_call(owner, "plugin_egress_remove", plugin_id=HTTPX, host=entry)
    after = await visitor_get(host, site.url())

    assert "status" not in before, before  # offline: no route, no proxy
    assert not failed, allowed
    assert (allowed["restarted"], allowed["egress"]["owner"]) == (1, [entry])
    assert "site.example.test" in allowed["egress"]["allow_private"]
    assert during == {"status": 200, "text": site.says()}
    assert not failed_remove and removed["removed"] is True, removed
    assert (removed["restarted"], removed["egress"]["owner"]) == (1, [])
    assert "status" not in after, after
