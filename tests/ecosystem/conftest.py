"""Every test here needs what scripts/install-ecosystem installs (and Node, and bubblewrap):
without them each is skipped with the reason, before any host starts.

`eco`: one host over the ecosystem's plugins per test process, not per module: xdist's `load`
scheduling spreads a module's tests over the workers (and `--dist loadgroup` has no effect under
pytest 9), so a module-scoped host started once per module and worker, up to twelve Node-heavy
hosts at once; visitors never share state here (every test opens sessions of its own, and
session-unaware servers get one instance per session)."""

from __future__ import annotations

import pytest

from tests.ecosystem.support import ecosystem_host, missing


@pytest.fixture(scope="session", autouse=True)
def _ecosystem_installed() -> None:
    """Session-scoped so that it runs before any module's host fixture starts."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)


eco = ecosystem_host("eco", scope="session")
