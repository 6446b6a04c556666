"""The plain HTTP routes follow the MCP endpoints' Host and Origin rules (issue 11, defect 9):
a foreign Host gets 421 and a foreign browser Origin 403, so a page on another site cannot
make a visitor's browser open a session."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot

from tests.hosting import host_settings, running_host

pytestmark = pytest.mark.anyio


async def test_every_plain_route_refuses_a_foreign_host_and_a_foreign_origin(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        session = await host.new_session()
        owner = {"Authorization": f"Bearer {host.owner_token()}"}
        visitor = {"Authorization": f"Bearer {session['token']}"}
        base = f"{host.url}/v1/sessions/{session['session_id']}"
        turn = await host.http.post(f"{base}/turns", json={"message": "hi"}, headers=visitor)
        assert turn.status_code == 201
        routes = {
            "POST /v1/sessions": ("POST", f"{host.url}/v1/sessions", {}, {}),
            "GET /v1/catalogue": ("GET", f"{host.url}/v1/catalogue", None, owner),
            "POST turns": ("POST", f"{base}/turns", {"message": "hi"}, visitor),
            "POST answer": ("POST", f"{base}/turns/{turn.json()['turn']}/answer", {"text": "ok"}, visitor),
        }
        own_origin = f"http://127.0.0.1:{host.settings.port}"
        outcomes = {}
        for name, (method, url, body, headers) in routes.items():
            statuses = []
            for extra in ({"Host": "evil.example"}, {"Origin": "http://evil.example"}, {"Origin": own_origin}, {}):
                response = await host.http.request(method, url, json=body, headers={**headers, **extra})
                statuses.append(response.status_code)
                if response.status_code in (403, 421):
                    assert sorted(response.json()) == ["error", "message"]
            outcomes[name] = statuses
        assert outcomes == snapshot(
            {
                "POST /v1/sessions": [421, 403, 201, 201],
                "GET /v1/catalogue": [421, 403, 200, 200],
                "POST turns": [421, 403, 201, 201],
                "POST answer": [421, 403, 200, 200],
            }
        )


async def test_healthz_answers_whatever_host_a_probe_uses(tmp_path: Path, database_url: str) -> None:
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as host:
        response = await host.http.get(f"{host.url}/healthz", headers={"Host": "10.1.2.3:8765"})
        assert response.status_code == 200
