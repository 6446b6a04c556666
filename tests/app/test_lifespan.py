"""The host's start (`app/lifespan.py`): probes made once, before any child starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_host.sandbox import overlay
from tests.hosting import host_settings, running_host
from tests.processes import needs_bwrap


@needs_bwrap
@pytest.mark.anyio
async def test_the_writable_plugin_layer_is_probed_at_start_not_by_the_first_child(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probed: list[bool] = []
    real = overlay.probe

    def probe(mount: Path, lower: Path) -> bool:
        probed.append(real(mount, lower))
        return probed[-1]

    overlay.available.cache_clear()
    monkeypatch.setattr(overlay, "probe", probe)
    async with running_host(host_settings(tmp_path, database_url, [])):
        assert len(probed) == 1  # at start, with no child started yet
        assert overlay.available() is probed[0]  # the first launch reads the answer, probing nothing
    assert len(probed) == 1
