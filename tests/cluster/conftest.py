"""One cluster for every test here (3 replicas and HAProxy take ~30 s to start, and two clusters
at once are heavy on a 2-core machine), on one xdist worker.

Every test here carries `xdist_group("cluster")`; `scripts/test` runs pytest with `--dist
loadgroup`, which sends a group's tests to one worker while the others share out the rest. Under
pytest 9 xdist's own way of naming the group (a suffix on the item's node id) is lost, since an
item's node id is now read from a structured id; `pytest_collection_modifyitems` below puts the
suffix back, so the session-scoped `cluster` starts once, on that worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

try:  # pytest 9's structured node id (private): without it, each worker may start its own cluster
    from _pytest.nodeid import NodeId as _NodeId

    NodeId: Any = _NodeId
except ImportError:  # pragma: no cover - another pytest: xdist's own suffix is then used, or none
    NodeId = None

from tests.cluster.support import Cluster, running_cluster
from tests.conftest import fresh_database


@pytest.hookimpl(trylast=True)  # after xdist's own hook (a no-op under pytest 9)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each `xdist_group` test the `@<group>` node id suffix `--dist loadgroup` schedules by."""
    if NodeId is None or not config.getoption("loadgroup", default=False):  # set on workers under --dist loadgroup
        return
    for item in items:
        marks = item.iter_markers("xdist_group")
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
        if names and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


@pytest.fixture(scope="session")
async def cluster(postgres_server: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    async with fresh_database(postgres_server) as url, running_cluster(tmp_path_factory.mktemp("cluster"), url) as c:
        yield c


@pytest.fixture
async def whole(cluster: Cluster) -> Cluster:
    """The cluster with all 3 replicas up (a previous test may have killed or restarted one)."""
    await cluster.revive()
    return cluster
