"""A catalogue entry's `egress`: the manifest's entries and the owner's, `allow_net`, the private
hosts (the manifest's, then the owner's), and the destinations the plugin's children were
refused, read through `RefusedDestinations` (here its in-memory twin); none for a remote plugin."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from mcp_host.children import Child, ChildPool
from mcp_host.owner import Catalogue, PluginEgress, RefusedDestination
from mcp_host.plugins import LoadReport, Manifest, Plugin
from mcp_host.store import OwnerEgress
from mcp_host.visitor import Bindings
from tests.processes import CHILD_LIMITS

pytestmark = pytest.mark.anyio


class _Refusals:
    """The egress proxy's record, in memory."""

    def __init__(self, refused: dict[str, list[tuple[str, str]]]) -> None:
        self._refused = refused

    def of(self, plugin_id: str) -> Sequence[tuple[str, str]]:
        return self._refused.get(plugin_id, [])


class _NoChildren:
    """Listing starts no child: the catalogue never asks for one."""

    def __call__(self, plugin: Plugin, session_id: str | None = None) -> Child:
        raise AssertionError("the catalogue started a child")

    def lister(self, plugin: Plugin, session_id: str | None = None) -> Child:
        raise AssertionError("the catalogue started a child")


def _plugin(manifest: dict[str, object]) -> Plugin:
    return Plugin(Manifest.model_validate(manifest), Path("/nowhere"), builtin=False)


async def test_entries_show_each_plugins_egress_with_the_owners_and_what_it_was_refused() -> None:
    offline = _plugin({"id": "x.off", "transport": {"command": "node", "args": ["a.js"]}})
    public = _plugin(
        {
            "id": "x.net",
            "transport": {
                "command": "node",
                "sandbox": {"allow_net": True, "egress": ["db.lan:5432"], "allow_private": ["db.lan"]},
            },
        }
    )
    remote = _plugin({"id": "x.far", "transport": {"kind": "http", "url": "https://mcp.example.com/mcp"}})
    refused = _Refusals({"x.off": [("169.254.169.254:80", "not in the plugin's egress")]})
    async with ChildPool(CHILD_LIMITS, max_children=1) as pool:
        catalogue = Catalogue(
            LoadReport((offline, public, remote), ()),
            pool,
            Bindings(_NoChildren(), list_timeout_s=1.0),
            refused=refused,
        )
        owner = {"x.off": OwnerEgress(entries=("db.internal:5432",), private=("db.internal",))}
        shown = {entry.id: entry.egress for entry in catalogue.entries(owner)}
        bare = {entry.id: entry.egress for entry in catalogue.entries()}

    assert shown == {
        "x.off": PluginEgress(
            manifest=[],
            owner=["db.internal:5432"],
            allow_net=False,
            allow_private=["db.internal"],
            refused=[RefusedDestination(destination="169.254.169.254:80", reason="not in the plugin's egress")],
        ),
        "x.net": PluginEgress(manifest=["db.lan:5432"], owner=[], allow_net=True, allow_private=["db.lan"], refused=[]),
        "x.far": None,
    }
    given, without = shown["x.off"], bare["x.off"]
    assert given is not None and without is not None
    assert without == given.model_copy(update={"owner": [], "allow_private": []})  # the owner's read by the caller
    assert (given.offline, without.offline) == (False, True)
