"""The unified diff `tools_pending` shows of a changed app: capped in lines and bytes, and
saying so when cut."""

from __future__ import annotations

from owner_facade.app_review import capped_diff


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
