"""The apps' contents as the host read them (migration 024): kept by plugin and sha256, and
pruned to the versions a tool pin names (approved or last seen) and the ones served now."""

from __future__ import annotations

import pytest

from mcp_host.store import AppContents, PgPool, StoredApp

pytestmark = pytest.mark.anyio

OLD, LIVE, APPROVED, SEEN, OTHER = ("a" * 64, "b" * 64, "c" * 64, "d" * 64, "e" * 64)


async def _pin(pool: PgPool, plugin_id: str, approved: str, seen: str) -> None:
    def definition(sha256: str) -> dict[str, object]:
        return {"name": "show", "app": {"uri": "ui://x/app.html", "sha256": sha256}}

    await pool.execute(
        "INSERT INTO mcp_host.tool_pins (plugin_id, tool, approved_hash, approved_definition, seen_hash, "
        "seen_definition) VALUES ($1, 'show', '\\x01', $2::jsonb, '\\x02', $3::jsonb)",
        plugin_id,
        definition(approved),
        definition(seen),
    )


async def test_a_version_is_kept_while_a_pin_names_it_or_its_child_serves_it(pool: PgPool) -> None:
    contents = AppContents(pool)
    for sha256 in (OLD, LIVE, APPROVED, SEEN):
        await contents.keep("test.apps", sha256, "ui://x/app.html", f"<p>{sha256[0]}</p>")
    await contents.keep("test.apps", LIVE, "ui://x/app.html", "<p>ignored: the same hash</p>")
    await contents.keep("test.other", OTHER, "ui://x/app.html", "<p>e</p>")
    await _pin(pool, "test.apps", APPROVED, SEEN)

    pruned = await contents.prune("test.apps", {LIVE})

    assert pruned == 1
    assert await contents.get("test.apps", OLD) is None
    assert await contents.get("test.apps", LIVE) == StoredApp("test.apps", LIVE, "ui://x/app.html", "<p>b</p>")
    assert await contents.get("test.apps", APPROVED) is not None and await contents.get("test.apps", SEEN) is not None
    assert await contents.get("test.other", OTHER) is not None  # another plugin's versions stay
