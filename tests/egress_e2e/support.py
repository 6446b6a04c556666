"""What the egress end-to-end tests share: a loopback test site on two ports, the hosts file
that gives it names, plugin folders copied with the egress the test allows, and a host serving
them with the sandbox on (every child behind the host's egress proxy).

The names: `site.example.test`, `a.example.test` and `example.test.evil` all resolve to
127.0.0.1, from the hosts file only (`MCP_HOST_EGRESS_HOSTS_FILE`), so a loopback site stands in
for a public one; a plugin reaches it only where its manifest names it in `allow_private`.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from mcp_host.settings import Settings
from tests.conftest import fresh_database
from tests.ecosystem.support import owner_call, owner_client
from tests.hosting import PLUGINS, RunningHost, free_port, host_settings, running_host, serving

NAMES = ("site.example.test", "a.example.test", "example.test.evil", "loop.example.test")
"""Every name the hosts file maps to 127.0.0.1."""

_MiB = 1024 * 1024


def site_app() -> Starlette:
    """The test site: `/` says which host name and port it was asked for, `/robots.txt` is not
    there (so robots-minded clients may fetch), `/bytes/N` answers N bytes."""

    async def home(request: Request) -> Response:
        return PlainTextResponse(f"egress test site: {request.headers.get('host', '?')}")

    async def robots(request: Request) -> Response:
        return PlainTextResponse("not here", status_code=404)

    async def sized(request: Request) -> Response:
        size = min(int(request.path_params["size"]), 64 * _MiB)
        return Response(b"x" * size, media_type="application/octet-stream")

    routes = [Route("/", home), Route("/robots.txt", robots), Route("/bytes/{size:int}", sized)]
    return Starlette(routes=routes)


@dataclass(frozen=True)
class Site:
    allowed: int
    """The port plugins are allowed."""
    other: int
    """A second port serving the same site, which no plugin is allowed."""

    def url(self, name: str = "site.example.test", *, port: int | None = None, path: str = "/") -> str:
        return f"http://{name}:{self.allowed if port is None else port}{path}"

    def says(self, name: str = "site.example.test", *, port: int | None = None) -> str:
        """What `/` answers when asked as `name`:`port`."""
        return f"egress test site: {name}:{self.allowed if port is None else port}"


@asynccontextmanager
async def running_site() -> AsyncIterator[Site]:
    """The site served on two loopback ports while inside."""
    site = Site(free_port(), free_port())
    async with serving(site_app(), site.allowed), serving(site_app(), site.other):
        yield site


def write_hosts_file(folder: Path) -> Path:
    path = folder / "egress-hosts"
    path.write_text("".join(f"127.0.0.1 {name}\n" for name in NAMES))
    return path


@dataclass(frozen=True)
class Allowed:
    """A plugin folder to copy, and the egress its copy's manifest gets."""

    source: Path
    egress: Sequence[str]
    allow_private: Sequence[str] = ()
    limits: dict[str, Any] = field(default_factory=dict)
    extra_args: Sequence[str] = ()


def fixture_plugin(name: str, egress: Sequence[str], allow_private: Sequence[str] = (), **limits: Any) -> Allowed:
    return Allowed(PLUGINS / name, egress, allow_private, limits)


def copy_with_egress(plugin: Allowed, into: Path) -> Path:
    """A copy of `plugin.source` under `into`, its manifest given `plugin`'s egress."""
    folder = into / plugin.source.name
    # symlinks=True: a virtualenv's python stays a link to the base interpreter.
    shutil.copytree(plugin.source, folder, symlinks=True)
    manifest_path = folder / "manifest.yaml"
    manifest = yaml.safe_load(manifest_path.read_text())
    transport = manifest["transport"]
    transport["sandbox"] = {
        **transport.get("sandbox", {}),
        "egress": list(plugin.egress),
        "allow_private": list(plugin.allow_private),
    }
    transport["args"] = [*transport.get("args", []), *plugin.extra_args]
    if plugin.limits:
        manifest["limits"] = {**manifest.get("limits", {}), **plugin.limits}
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return folder


def egress_settings(folder: Path, database_url: str, plugins: Sequence[Allowed], **overrides: Any) -> Settings:
    """The test host's settings (tests.hosting's, sandbox on, as by default) over copies of
    `plugins`, the names of the test site resolved from the hosts file."""
    into = folder / "plugins"
    into.mkdir(parents=True)
    copies = [copy_with_egress(plugin, into) for plugin in plugins]
    # An absolute path under tests.hosting.PLUGINS is that path.
    paths = [str(copy) for copy in copies]
    return host_settings(folder, database_url, paths, egress_hosts_file=write_hosts_file(folder), **overrides)


def site_fixture() -> Any:
    """A module's fixture `site`: the test site, served while the module's tests run."""

    async def site() -> AsyncIterator[Site]:
        async with running_site() as serving:
            yield serving

    return pytest.fixture(site, scope="module", name="site")


def egress_host_fixture(plugins: Callable[[Site], Sequence[Allowed]], **overrides: Any) -> Any:
    """A module's fixture `host`: a host over copies of `plugins(site)` (`egress_settings`, and
    `overrides`), on a database of its own."""

    async def host(
        site: Site, postgres_server: str, tmp_path_factory: pytest.TempPathFactory
    ) -> AsyncIterator[RunningHost]:
        folder = tmp_path_factory.mktemp("egress")
        async with fresh_database(postgres_server) as url:
            async with running_host(egress_settings(folder, url, plugins(site), **overrides)) as running:
                yield running

    return pytest.fixture(host, scope="module", name="host")


# -- what the host records ---------------------------------------------------------------------


async def egress_log(running: RunningHost, plugin_id: str) -> list[str]:
    """The text of `plugin_id`'s log lines of kind `egress` (the proxy's refusals; the child's
    own stderr may name a destination too) as the owner's `capability_logs` shows them."""
    async with owner_client(running) as owner:
        failed, answer = await owner_call(owner, "capability_logs", capability=plugin_id, lines=200)
    assert not failed, answer
    return [line["text"] for line in answer["lines"] if line["kind"] == "egress"]


async def logged_refusals(running: RunningHost, plugin_id: str, destinations: Sequence[str]) -> dict[str, int]:
    """How many of `plugin_id`'s egress log lines name each of `destinations` ("host:port"):
    the proxy logs a refused destination once per child."""
    lines = await egress_log(running, plugin_id)
    return {destination: sum(destination in line for line in lines) for destination in destinations}


async def catalogue_refusals(running: RunningHost, plugin_id: str) -> dict[str, str]:
    """The destinations the owner's catalogue (`capabilities_list`, the plugin's `egress`) says
    `plugin_id`'s children were refused, each with its reason."""
    async with owner_client(running) as owner:
        failed, answer = await owner_call(owner, "capabilities_list")
    assert not failed, answer
    entry = next(entry for entry in answer["capabilities"] if entry["id"] == plugin_id)
    return {refused["destination"]: refused["reason"] for refused in entry["egress"]["refused"]}


_SERIES_RE = re.compile(r"^mcp_host_egress_(\w+)_total\{([^}]*)\} (\S+)$", re.MULTILINE)
_LABEL_RE = re.compile(r'(\w+)="([^"]*)"')


async def egress_counts(running: RunningHost, plugin_id: str) -> dict[str, float]:
    """`plugin_id`'s egress counters on the host's `/metrics` (read with the owner's token):
    `connections allowed|refused|capped` and `bytes up|down`."""
    headers = {"Authorization": f"Bearer {running.owner_token()}"}
    response = await running.http.get(f"{running.url}/metrics", headers=headers)
    assert response.status_code == 200, response.text
    counts: dict[str, float] = {}
    for series, labels, value in _SERIES_RE.findall(response.text):
        named = dict(_LABEL_RE.findall(labels))
        if named.pop("plugin", None) == plugin_id:
            counts[" ".join([series, *named.values()])] = float(value)
    return counts
