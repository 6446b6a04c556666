"""`GET /oauth/callback` (where a browser comes back from a remote server's sign-in) under
hostile query strings: never a 5xx, always the "not completed" page, nothing the browser
brought shown back (no reflected markup), and the host serving afterwards."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.hosting import host_settings, running_host

pytestmark = pytest.mark.anyio

_PIECES = [
    "code",
    "state",
    "iss",
    "error",
    "error_description",
    "<script>alert(1)</script>",
    "%ED%A0%80",  # a lone surrogate, percent-encoded: no UTF-8
    "%00",
    "%FF%FE",
    "&",
    "=",
    ";",
    "%26",
    "x" * 5000,
    "\u202e",
    "https://evil.example/",
]


def _query(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 12)):
        key = rng.choice(_PIECES[:5] + _PIECES[5:8])
        value = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 3)))
        parts.append(f"{key}={value}" if rng.random() < 0.9 else key)
    return "&".join(parts)


async def test_hostile_callbacks_get_the_not_completed_page_and_nothing_echoed(
    tmp_path: Path, database_url: str
) -> None:
    rng = random.Random(28)
    async with running_host(host_settings(tmp_path, database_url, ["echo"])) as running:
        answers = []
        for _ in range(300):
            query = _query(rng)
            answer = await running.http.get(f"{running.url}/oauth/callback?{query}")
            answers.append((query, answer.status_code, answer.text))
        healthy = await running.http.get(f"{running.url}/healthz")

    assert [(q, s) for q, s, _ in answers if s != 400] == []
    assert [q for q, _, text in answers if "<script>" in text or "evil.example" in text] == []
    assert all("Sign-in not completed" in text for _, _, text in answers)
    assert healthy.status_code == 200
