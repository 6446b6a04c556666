"""What `tools_pending` shows of an app: the unified diff of a changed one, capped in lines and
bytes and saying so when cut; an app that could not be read, with its warning."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mcp_host.wire import AppVersion
from owner_facade.app_review import app_review, capped_diff

pytestmark = pytest.mark.anyio


def test_a_diff_shows_the_approved_and_the_live_lines() -> None:
    assert capped_diff("<p>a</p>\n<p>b</p>\n", "<p>a</p>\n<p>c</p>\n") == (
        "--- approved\n+++ live\n@@ -1,2 +1,2 @@\n <p>a</p>\n-<p>b</p>\n+<p>c</p>"
    )
    assert capped_diff("same", "same") == ""


def test_a_long_diff_is_cut_at_its_lines_and_says_so() -> None:
    old = "\n".join(f"line {i}" for i in range(100))
    cut = capped_diff(old, "", max_lines=10)
    assert cut.splitlines()[:3] == ["--- approved", "+++ live", "@@ -1,100 +0,0 @@"]
    assert len(cut.splitlines()) == 11
    assert cut.splitlines()[-1] == "… diff cut: 93 more lines (at most 10 lines, 65536 bytes)"


def test_a_wide_diff_is_cut_at_its_bytes() -> None:
    cut = capped_diff("x" * 5000, "y" * 5000, max_bytes=6000)
    assert cut.splitlines()[-1] == "… diff cut: 1 more lines (at most 400 lines, 6000 bytes)"
    assert len(cut.encode()) < 6000 + 100


async def test_an_app_that_could_not_be_read_is_reviewed_with_a_warning_and_no_diff() -> None:
    live = {"name": "show", "app": AppVersion.unreadable("ui://x/app.html")}
    approved = {"name": "show", "app": {"uri": "ui://x/app.html", "sha256": "a" * 64, "size": 3, "declared": [None]}}
    services = SimpleNamespace(apps=None)  # nothing kept: the review reads no contents

    review = await app_review(services, "test.apps", approved, live)  # type: ignore[arg-type]

    assert review == {
        "uri": "ui://x/app.html",
        "live_sha256": None,
        "approved_sha256": "a" * 64,
        "size": None,
        "reach": {"connect": [], "resources": [], "frames": [], "base_uri": []},
        "permissions": [],
        "domain": None,
        "warnings": [
            "the app could not be read: approving the tool serves no version of it until one reads",
            "the app changed since you approved it",
        ],
        "diff": None,
    }
    assert await app_review(services, "test.apps", None, {"name": "plain"}) is None  # type: ignore[arg-type]
