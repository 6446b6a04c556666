"""Bindings: tool schemas in every dialect the ecosystem writes; a dropped tool is never silent."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot

from tests.hosting import host_settings, running_host

pytestmark = pytest.mark.anyio


async def test_draft_07_tools_reach_visitors_and_each_dropped_tool_shows_in_the_catalogue_with_its_cause(
    tmp_path: Path, database_url: str
) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["dialects"])) as host:
        session = await host.new_session()
        async with host.client(session) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            called = await client.call_tool("ts_style", {"who": "ann", "point": [1, 2], "unit": "m"})
        causes = {e.id: (e.status, e.cause) for e in host.catalogue()}

    assert listed == ["ts_style", "plain"]
    assert called.structured_content == {"called": "ts_style"}
    assert causes == snapshot(
        {
            "test.dialects": (
                "healthy",
                "tool 'remote_dialect' dropped: input schema refused: $schema 'https://evil.example/meta' is not an "
                "accepted dialect (JSON Schema draft-07, 2019-09 or 2020-12); tool 'old_output' dropped: output "
                "schema refused: $schema 'http://json-schema.org/draft-04/schema#' is not an accepted dialect (JSON "
                "Schema draft-07, 2019-09 or 2020-12); tool 'evil\\x1b[2Jname' dropped: its name is not "
                "^[a-zA-Z0-9_-]{1,64}$",
            )
        }
    )
