"""The egress end-to-end tests run children in the real sandbox: without bubblewrap each is
skipped, saying why, before any host starts."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session", autouse=True)
def _sandbox_installed() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
