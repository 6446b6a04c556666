"""The pending tools page's "Approve all" per capability: one `tools_approve` of exactly the
tools and hashes the page showed; a hash the page did not show approves nothing."""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.hosting import host_settings, running_host
from tests.owner_console.test_http import _forget_cookies, _signed_in
from tests.owner_facade.test_door import audit, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]
FORM = re.compile(
    r'<form method="post" action="/owner/tools/approve-all"[^>]*data-capability="([^"]+)">(.*?)</form>', re.S
)
FIELD = re.compile(r'<input type="hidden" name="(\w+)" value="([^"]*)">')
FORM_TYPE = {"Content-Type": "application/x-www-form-urlencoded"}


def _forms(page: str) -> dict[str, list[tuple[str, str]]]:
    """Each "Approve all" form of the page by capability: its fields, in order."""
    return {
        capability: [(name, html.unescape(value)) for name, value in FIELD.findall(body)]
        for capability, body in FORM.findall(page)
    }


async def test_approve_all_approves_every_tool_of_a_capability_the_page_showed(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["echo", "guarded"], pin_tools=True)
    async with running_host(settings) as running:
        await _forget_cookies(running)
        headers, csrf = await _signed_in(running)
        url = f"{running.url}/owner/tools"
        before = _forms((await running.http.get(url, headers=headers)).text)
        fields = before["test.echo"]
        stale = [(n, "0" * 64 if i == 3 else v) for i, (n, v) in enumerate(fields)]  # the first tool's hash
        refused = await running.http.post(f"{url}/approve-all", headers=headers | FORM_TYPE, content=urlencode(stale))
        approved = await running.http.post(f"{url}/approve-all", headers=headers | FORM_TYPE, content=urlencode(fields))
        after = _forms((await running.http.get(url, headers=headers)).text)
        async with running.client(await running.new_session()) as visitor:
            listed = sorted(t.name for t in (await visitor.list_tools()).tools)
        async with owner_client(running) as owner:
            trail = await audit(owner)

    tools = [value for name, value in fields if name == "tool"]
    assert sorted(before) == ["test.echo", "test.guarded"]
    assert fields[:2] == [("csrf", csrf), ("capability", "test.echo")]
    assert [name for name, _ in fields[2:]] == ["tool", "live_sha256"] * 4
    assert tools == ["die", "echo", "sleep", "whoami"]
    assert refused.status_code == 400
    assert "nothing was approved" in refused.text and "(invalid_arguments)" in refused.text
    assert approved.status_code == 303 and approved.headers["location"] == "/owner/tools?done=approved_all"
    assert sorted(after) == ["test.guarded"]
    assert listed == tools
    assert [row for row in trail if row[0] == "tools_approve"] == [
        ("tools_approve", "invalid_arguments"),
        ("tools_approve", "ok"),
    ]
