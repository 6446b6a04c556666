"""`tools_approve`: every pending tool of a capability approved at once, each answered with its
definition and the hash `tools_pending` showed; all or none when the owner names the hashes
reviewed; collisions need consent; and what is left before a visitor can call it."""

from __future__ import annotations

from pathlib import Path

import pytest
from inline_snapshot import snapshot

from tests.hosting import PLUGINS, host_settings, running_host
from tests.owner_facade.test_door import INVALID_ARGUMENTS, audit, call, owner_client
from tests.processes import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]


async def test_tools_approve_approves_a_capabilitys_pending_tools_with_the_hashes_tools_pending_showed(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["echo", "guarded"], pin_tools=True)
    async with running_host(settings) as running:
        session = await running.new_session()
        async with owner_client(running) as client:
            _, pending = await call(client, "tools_pending")
            echo = [p for p in pending["pending"] if p["capability"] == "test.echo"]
            reviewed = {p["tool"]: p["live_sha256"] for p in echo}
            stale, changed = await call(
                client, "tools_approve", capability="test.echo", tools={**reviewed, "die": "0" * 64}
            )
            _, after_stale = await call(client, "tools_pending")
            one_failed, one = await call(
                client, "tools_approve", capability="test.echo", tools={"echo": reviewed["echo"]}
            )
            failed, answer = await call(client, "tools_approve", capability="test.echo")
            _, again = await call(client, "tools_approve", capability="test.echo")
            guarded_failed, guarded = await call(client, "tools_approve", capability="test.guarded")
            unknown_failed, unknown = await call(client, "tools_approve", capability="test.nothing")
            _, after = await call(client, "tools_pending")
            trail = await audit(client)
        async with running.client(session) as visitor:
            listed = sorted(t.name for t in (await visitor.list_tools()).tools)

    def approved(*names: str) -> list[dict[str, object]]:
        return [
            {"tool": p["tool"], "live_sha256": p["live_sha256"], "definition": p["live"]}
            for p in echo
            if p["tool"] in names
        ]

    assert sorted(reviewed) == ["die", "echo", "sleep", "whoami"]
    assert stale and changed == {
        "code": INVALID_ARGUMENTS,
        "message": "a tool of 'test.echo' changed since it was listed, or was never seen; nothing was approved: "
        "review them again (tools_pending)",
    }
    assert [p["tool"] for p in after_stale["pending"] if p["capability"] == "test.echo"] == sorted(reviewed)
    assert not one_failed and one["approved"] == approved("echo")
    assert not failed and answer == {
        "capability": "test.echo",
        "approved": approved("die", "sleep", "whoami"),  # echo was approved a call before
        "hidden": [],
        "rejected": [],
        "next": [],  # acl: always, and public sessions are on: a visitor can call it now
        "visitors": {"roles": [], "public": True, "code_role": None},
    }
    assert again["approved"] == []
    assert not guarded_failed and {k: v for k, v in guarded.items() if k != "approved"} == snapshot(
        {
            "capability": "test.guarded",
            "hidden": [],
            "rejected": [],
            "next": [
                {
                    "step": "grant it to a role (here guests, or any of roles_list)",
                    "tool": "role_put",
                    "arguments": {"id": "guests", "capabilities": ["test.guarded"]},
                },
                {
                    "step": "make an access code of role guests for a visitor (its text is shown once)",
                    "tool": "code_create",
                    "arguments": {"role": "guests"},
                },
            ],
            "visitors": {"roles": [], "public": False, "code_role": "guests"},
        }
    )
    assert [a["tool"] for a in guarded["approved"]] == ["guarded_hello", "guarded_scope"]
    assert unknown_failed and unknown == {
        "code": INVALID_ARGUMENTS,
        "message": "capability: no capability named 'test.nothing' is loaded",
    }
    assert after["pending"] == []
    assert listed == ["die", "echo", "sleep", "whoami"]  # test.guarded: no role grants it yet
    assert trail[-9:] == [
        ("tools_pending", "ok"),
        ("tools_approve", INVALID_ARGUMENTS),
        ("tools_pending", "ok"),
        ("tools_approve", "ok"),
        ("tools_approve", "ok"),
        ("tools_approve", "ok"),
        ("tools_approve", "ok"),
        ("tools_approve", INVALID_ARGUMENTS),
        ("tools_pending", "ok"),
    ]


async def test_tools_approve_of_colliding_tools_says_what_it_hides_and_needs_consent(
    tmp_path: Path, database_url: str
) -> None:
    settings = host_settings(tmp_path, database_url, ["lookalike"], builtin_dir=PLUGINS / "twin_a", pin_tools=True)
    async with running_host(settings) as running:
        session = await running.new_session()
        async with owner_client(running) as client:
            refused, why = await call(client, "tools_approve", capability="test.lookalike")
            _, still = await call(client, "tools_pending")
            failed, answer = await call(client, "tools_approve", capability="test.lookalike", hide_colliding=True)
        async with running.client(session) as visitor:
            listed = sorted(t.name for t in (await visitor.list_tools()).tools)

    assert refused and why == snapshot(
        {
            "code": "invalid_arguments",
            "message": "approving these tools of 'test.lookalike' hides 'Send-Mail' of test.lookalike, 'send_mail' of "
            "test.lookalike, 'only_a' of test.twin_a (builtin) from every session that can see them (tool names "
            "that differ only in case, '-' or '_' collide, and a collision exposes neither); to approve them "
            "anyway, call again with hide_colliding: true",
        }
    )
    assert [p["tool"] for p in still["pending"]] == ["Only-A", "Send-Mail", "own_tool", "send_mail"]
    assert not failed and [a["tool"] for a in answer["approved"]] == ["Only-A", "Send-Mail", "own_tool", "send_mail"]
    assert answer["hidden"] == [
        {"capability": "test.lookalike", "tool": "Send-Mail", "builtin": False},
        {"capability": "test.lookalike", "tool": "send_mail", "builtin": False},
        {"capability": "test.twin_a", "tool": "only_a", "builtin": True},
    ]
    assert listed == ["own_tool", "same_name"]  # every look-alike hidden, as the answer said
