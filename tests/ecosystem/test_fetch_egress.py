"""`pypi:mcp-server-fetch`, as published, in the sandbox behind the host's egress proxy: allowed
one loopback test site by name at one port, a visitor's `fetch` brings back the site's text; the
same site at another port and the cloud metadata address are refused, and the owner sees each
refused destination in the plugin's log.

The server has a guard of its own against private addresses, which would refuse the metadata
address before any connection: it is turned off here (`--allow-private-ips`, a flag of the
server) so that what refuses is the host. Inside the sandbox the server cannot resolve the test
site's name (no resolver there: the proxy resolves), so its guard would let that name through
anyway; the site's loopback address is reached only because the manifest names it in
`allow_private`.

The site answers text/plain: an HTML page makes the server's readabilipy run `npm install` in
the sandbox at its first use (node is visible there), which the proxy rightly refuses
(registry.npmjs.org is not in the egress), and the call fails — a limit of the package as
published in a sandbox without the npm registry, not of the proxy.
"""

from __future__ import annotations

import pytest

from tests.ecosystem.support import ECOSYSTEM, text_of
from tests.egress_e2e.support import (
    Allowed,
    Site,
    catalogue_refusals,
    egress_host_fixture,
    logged_refusals,
    site_fixture,
)
from tests.hosting import RunningHost

FETCH = ECOSYSTEM / "egress" / "fetch"
FETCH_ID = "eco.fetch"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not (FETCH / "venv" / "bin" / "python").exists(),
        reason="run scripts/install-ecosystem first (missing: .cache/ecosystem/egress/fetch/venv)",
    ),
]


site = site_fixture()


def fetch_allowed_the_site(site: Site) -> list[Allowed]:
    return [
        Allowed(FETCH, [f"site.example.test:{site.allowed}"], ["site.example.test"], extra_args=["--allow-private-ips"])
    ]


host = egress_host_fixture(fetch_allowed_the_site)


async def test_fetch_allowed_the_site_by_name_brings_back_its_text(host: RunningHost, site: Site) -> None:
    async with host.client(await host.new_session()) as client:
        result = await client.call_tool("fetch", {"url": site.url()})

    assert not result.is_error, text_of(result)
    assert site.says() in text_of(result)


async def test_fetch_is_refused_another_port_of_the_site_and_the_metadata_address(
    host: RunningHost, site: Site
) -> None:
    async with host.client(await host.new_session()) as client:
        other_port = await client.call_tool("fetch", {"url": site.url(port=site.other)})
        metadata = await client.call_tool("fetch", {"url": "http://169.254.169.254/latest/meta-data/"})

    # The server fetches robots.txt first; the proxy's 403 to it is, to the server, a site
    # forbidding autonomous fetches: an error result either way, and the page is never asked.
    assert other_port.is_error and "403" in text_of(other_port), text_of(other_port)
    assert site.says(port=site.other) not in text_of(other_port)
    assert metadata.is_error and "403" in text_of(metadata), text_of(metadata)
    refused = [f"site.example.test:{site.other}", "169.254.169.254:80"]
    assert await logged_refusals(host, FETCH_ID, refused) == dict.fromkeys(refused, 1)
    assert sorted(await catalogue_refusals(host, FETCH_ID)) == sorted(refused)
