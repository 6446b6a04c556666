"""The registry answers "which plugins, by id and kind" from the plugins that loaded."""

from __future__ import annotations

import pytest

from mcp_host.plugins import Registry, load_plugins
from tests.hosting import BUILTINS, PLUGINS


@pytest.fixture(scope="module")
def registry() -> Registry:
    report = load_plugins(BUILTINS, [PLUGINS / "echo", PLUGINS / "notes"])
    assert report.errors == ()
    return Registry(report.plugins)


def test_kinds_partition_the_plugins_in_load_order(registry: Registry) -> None:
    ids = [p.manifest.id for p in registry]
    assert ids == sorted(ids) and len(registry) == len(ids)
    capabilities = [p.manifest.id for p in registry.capabilities]
    connectors = [p.manifest.id for p in registry.connectors]
    assert sorted(capabilities + connectors) == ids and set(capabilities).isdisjoint(connectors)
    assert {"test.echo", "notes"} <= set(capabilities) and connectors != []
    assert all(p.manifest.kind == "connector" for p in registry.of_kind("connector"))


def test_get_by_id_and_kind(registry: Registry) -> None:
    connector = registry.connectors[0]
    assert registry.get(connector.manifest.id) is connector
    assert registry.get(connector.manifest.id, "connector") is connector
    assert registry.get(connector.manifest.id, "capability") is None
    echo = registry.get("test.echo", "capability")
    assert echo is not None and echo.manifest.id == "test.echo"
    assert registry.get("test.nope") is None


def test_two_plugins_with_one_id_are_refused(registry: Registry) -> None:
    echo = registry.get("test.echo")
    assert echo is not None
    with pytest.raises(ValueError, match="share an id"):
        Registry([echo, echo])


def test_add_and_remove_while_running_are_seen_live() -> None:
    report = load_plugins(BUILTINS, [PLUGINS / "echo"])
    registry = Registry(report.plugins)
    view = registry.by_id
    notes = load_plugins(None, [PLUGINS / "notes"]).plugins
    [added] = [p for p in notes if p.manifest.id == "notes"]
    registry.add(added)
    assert registry.get("notes", "capability") is added and view["notes"] is added
    ids = [p.manifest.id for p in registry]
    assert ids == sorted(ids) and added in registry.capabilities
    with pytest.raises(ValueError, match="loaded already"):
        registry.add(added)
    assert registry.remove("notes") is added
    assert registry.get("notes") is None and "notes" not in view and added not in registry.capabilities
    assert registry.remove("notes") is None
