"""In Chromium: the pending tools page renders a tool's app in its sandboxed frame — the app's
own script runs, but it reaches no network (the preview's CSP refuses it, as the page's
`securitypolicyviolation` event says) and not the console around it (an opaque origin).
Screenshot: `$MCP_HOST_ARTIFACTS/app-review.png` (default .artifacts/console/)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps.support import FIXTURE
from tests.hosting import host_settings, running_host
from tests.owner_console.browser import Browser, needs_chromium
from tests.owner_console.test_browser import _sign_in
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_chromium, needs_bwrap]

PROBE = """<!doctype html><html><body><h1 id="title">Board preview</h1><p id="net">not tried</p>
<p id="parent"></p><script>
document.addEventListener("securitypolicyviolation", function (e) {
  document.getElementById("net").textContent = "refused by " + e.effectiveDirective;
});
try { document.getElementById("parent").textContent = window.parent.document.title; }
catch (e) { document.getElementById("parent").textContent = "the console is out of reach"; }
fetch("/owner/holds.json").then(function () { document.getElementById("net").textContent = "reached"; },
  function () {});
</script></body></html>
"""


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    with Browser.window() as browser:
        yield browser


async def test_the_tools_page_renders_an_app_in_a_sandbox_without_network(
    chromium: Browser, tmp_path: Path, database_url: str
) -> None:
    folder = tmp_path / "apps"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "board.html"))
    (folder / "board.html").write_text(PROBE, encoding="utf-8")
    settings = host_settings(tmp_path, database_url, [str(folder)], pin_tools=True)
    async with running_host(settings) as running:
        chromium.base_url = running.url
        await _sign_in(chromium, running)
        await chromium.get("/owner/tools")
        await chromium.wait_for("section[data-tool='test.apps/show_board'] iframe.app-preview")
        frame = await chromium.run(
            lambda: chromium.driver.find_element(
                "css selector", "section[data-tool='test.apps/show_board'] iframe.app-preview"
            )
        )
        await chromium.run(lambda: chromium.driver.switch_to.frame(frame))
        try:
            await chromium.wait_for_text("#net", "refused by connect-src")
            title, parent = await chromium.text("#title"), await chromium.text("#parent")
        finally:
            await chromium.run(chromium.driver.switch_to.default_content)
        await chromium.screenshot("app-review")

    assert title == "Board preview"
    assert parent == "the console is out of reach"
