"""Every test here needs what scripts/install-ecosystem installs (and Node, and bubblewrap):
without them each is skipped with the reason, before any host starts."""

from __future__ import annotations

import pytest

from tests.ecosystem.support import missing


@pytest.fixture(scope="session", autouse=True)
def _ecosystem_installed() -> None:
    """Session-scoped so that it runs before any module's host fixture starts."""
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
