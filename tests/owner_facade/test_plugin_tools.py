"""The owner door's plugin tools on a running host: `plugin_add` installs (here from the
npm-packed test tarball, offline), reports progress and puts the new tools in `tools_pending`
at once, without a restart; a visitor calls the tool once approved and granted; `plugin_remove`
stops its children and its tool leaves the visitor's list. A bad source leaves nothing behind.
Other sessions' calls keep being served while npm runs (measured and printed)."""

from __future__ import annotations

import re
import shutil
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from owner_facade import OWNER_PATH
from tests.hosting import PLUGINS, RunningHost, host_settings, running_host, wait_until
from tests.plugins.installers import LocalPackages
from tests.plugins.packages import NPM_SOURCE, npm_tarball
from tests.plugins.test_install import NPM_ID, leftovers, offline, owner_call
from tests.processes import needs_bwrap

needs_npm = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed (Node.js 20+ with npm)")
SHOUT = f"npm:{NPM_SOURCE.package}"


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    return npm_tarball(tmp_path_factory.mktemp("packages"))


@pytest.fixture
def local_npm(monkeypatch: pytest.MonkeyPatch, tarball: Path) -> LocalPackages:
    """The owner door's installer takes the test package from the local tarball, slowly enough
    for progress (registries refuse every connection); any other source goes to the real
    installer, offline."""
    offline(monkeypatch)
    return LocalPackages({"1.0.0": tarball}, pause_s=1.2)


@asynccontextmanager
async def owner_client(running: RunningHost) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {running.owner_token()}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(f"{running.url}{OWNER_PATH}", http_client=http), cache=None) as owner,
    ):
        yield owner


async def approve_all(owner: Client, capability: str | None = None) -> list[str]:
    failed, review = await owner_call(owner, "tools_pending")
    assert not failed, review
    approved = []
    for entry in review["pending"]:
        if capability is not None and entry["capability"] != capability:
            continue
        failed, answer = await owner_call(
            owner, "tool_approve", capability=entry["capability"], tool=entry["tool"], live_sha256=entry["live_sha256"]
        )
        assert not failed, answer
        approved.append(entry["tool"])
    return approved


def reaches(folder: Path, command: str) -> list[str]:
    """What `plugin_add` says an installed stdio server in `folder` (named as its id) reaches:
    no network, and how to give it a host."""
    return [
        f"runs {command} in its sandbox, in /plugin",
        f"files: its folder {folder} as /plugin, read-only (what it writes there is its own and gone when it"
        " stops), and a /tmp of its own, empty at each start; nothing else of this machine",
        f"network: none — give it a host with `mcp-host plugin allow {folder.name} HOST` (or the owner tool"
        f' plugin_egress_allow {{"plugin_id": "{folder.name}", "host": "HOST"}}); HOST: host, host:port or *.domain',
        f"more files: copy them into {folder} and name them as /plugin/… in transport.args of"
        f" {folder / 'manifest.yaml'}; the host reads it at its next start (there is no /workspace yet:"
        " transport.sandbox.workspace binds nothing)",
    ]


def p99(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)] if values else float("nan")


@needs_npm
@needs_bwrap
@pytest.mark.anyio
async def test_plugin_add_then_approve_call_and_remove_without_a_restart(
    tmp_path: Path, database_url: str, local_npm: LocalPackages
) -> None:
    settings = host_settings(tmp_path, database_url, [str(PLUGINS / "echo")], pin_tools=True)
    async with running_host(settings, local_npm) as running, owner_client(running) as owner:
        assert "echo" in await approve_all(owner, "test.echo")
        bystander = await running.new_session()
        async with running.client(bystander) as other:
            before: list[float] = []
            for _ in range(20):
                started = time.perf_counter()
                assert not (await other.call_tool("echo", {"text": "x"})).is_error
                before.append(time.perf_counter() - started)

            during: list[float] = []
            seen: list[tuple[float, float | None, str | None]] = []
            installing = True

            async def keep_calling() -> None:
                while installing:
                    started = time.perf_counter()
                    assert not (await other.call_tool("echo", {"text": "x"})).is_error
                    during.append(time.perf_counter() - started)
                    await anyio.sleep(0.02)

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append((progress, total, message))

            async with anyio.create_task_group() as tg:
                tg.start_soon(keep_calling)
                started = time.perf_counter()
                result = await owner.call_tool("plugin_add", {"source": SHOUT}, progress_callback=on_progress)
                to_pending = time.perf_counter() - started
                installing = False
        assert not result.is_error, result.content
        added = result.structured_content
        assert added is not None and added["capability"] == NPM_ID and added["pending_tools"] == ["shout"], added
        # npm's own lines as they came, and a line each quiet second (the test's pause), numbered 1, 2, …
        assert [(progress, total) for progress, total, _ in seen] == [(n, None) for n in range(1, len(seen) + 1)]
        messages = [message or "" for _, _, message in seen]
        assert all(re.fullmatch(rf"installing {SHOUT}: \d+ s|npm: .+", m) for m in messages), messages
        assert any(re.fullmatch(r"npm: added 1 package in \S+", m) for m in messages), messages
        print(  # noqa: T201 - the measurement the issue asks for, shown with -s
            f"\nplugin_add -> tools pending: {to_pending:.2f} s (1.2 s of it the test's pause);"
            f" bystander echo p99 before {p99(before) * 1000:.1f} ms ({len(before)} calls),"
            f" during install {p99(during) * 1000:.1f} ms ({len(during)} calls),"
            f" median {statistics.median(during) * 1000:.1f} ms"
        )
        assert during, "no other session's call was answered while the plugin installed"

        failed, review = await owner_call(owner, "tools_pending")
        assert not failed and any(e["capability"] == NPM_ID for e in review["pending"]), review
        assert await approve_all(owner, NPM_ID) == ["shout"]
        failed, answer = await owner_call(owner, "role_put", id="friends", capabilities=[NPM_ID])
        assert not failed, answer
        _, code = await owner_call(owner, "code_create", role="friends")
        failed, listed_plugins = await owner_call(owner, "plugins_list")
        assert not failed and [(p["id"], p["source"], p["loaded"]) for p in listed_plugins["plugins"]] == [
            (NPM_ID, SHOUT, True)
        ], listed_plugins

        session = await running.new_session({"code": code["code"]})
        async with running.client(session) as visitor:
            assert "shout" in {tool.name for tool in (await visitor.list_tools()).tools}
            shout = await visitor.call_tool("shout", {"text": "hello"})
            assert not shout.is_error and shout.content[0].text == "HELLO"  # type: ignore[union-attr]
            child = running.child(NPM_ID, session["session_id"]) or running.child(NPM_ID)
            assert child is not None
            pid = child.health().pid
            assert pid is not None

            failed, removed = await owner_call(owner, "plugin_remove", id=NPM_ID, purge=True)
            assert not failed and removed["removed"] == NPM_ID and removed["was_loaded"], removed
            assert "shout" not in {tool.name for tool in (await visitor.list_tools()).tools}
            gone = await visitor.call_tool("shout", {"text": "hello"})
            assert gone.is_error
        assert running.child(NPM_ID) is None and running.session_instances(NPM_ID) == []
        await wait_until(lambda: not _alive(pid), within_s=10)
        assert leftovers(settings.data_dir) == []
        failed, listed_plugins = await owner_call(owner, "plugins_list")
        assert not failed and listed_plugins["plugins"] == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.anyio
async def test_a_bad_source_is_refused_in_one_sentence_and_leaves_nothing(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline(monkeypatch)
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    async with running_host(settings) as running, owner_client(running) as owner:
        for source in ("npm:@tiny-test/no-such-package-anywhere", "ftp:nothing", "pypi:no-such-package-anywhere"):
            failed, refusal = await owner_call(owner, "plugin_add", source=source)
            assert failed and refusal["code"] == "invalid_arguments", (source, refusal)
            assert "\n" not in refusal["message"] and "Traceback" not in refusal["message"], refusal
        failed, refusal = await owner_call(owner, "plugin_remove", id="npm.nothing")
        assert failed and refusal["code"] == "invalid_arguments", refusal
    assert leftovers(settings.data_dir) == []  # no folder, no .staging-* one either


@needs_npm
@needs_bwrap
@pytest.mark.anyio
async def test_a_visitor_hears_a_plugin_approved_and_removed_and_purge_forgets_its_pins(
    tmp_path: Path, database_url: str, local_npm: LocalPackages
) -> None:
    heard: list[str] = []

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.append("tools")

    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    async with running_host(settings, local_npm) as running, owner_client(running) as owner:
        result = await owner.call_tool("plugin_add", {"source": SHOUT})
        assert not result.is_error, result.content
        failed, answer = await owner_call(owner, "role_put", id="friends", capabilities=[NPM_ID])
        assert not failed, answer
        _, code = await owner_call(owner, "code_create", role="friends")
        session = await running.new_session({"code": code["code"]})
        async with running.client(session, "legacy", message_handler=on_message) as visitor:
            assert "shout" not in {tool.name for tool in (await visitor.list_tools()).tools}  # pending
            assert await approve_all(owner, NPM_ID) == ["shout"]
            await wait_until(lambda: "tools" in heard, within_s=10)
            assert "shout" in {tool.name for tool in (await visitor.list_tools()).tools}
            heard.clear()
            failed, removed = await owner_call(owner, "plugin_remove", id=NPM_ID)
            assert not failed, removed
            await wait_until(lambda: "tools" in heard, within_s=10)
            assert "shout" not in {tool.name for tool in (await visitor.list_tools()).tools}

        # Added again (its pin is still approved, so nothing is pending), then purged: its pins go.
        result = await owner.call_tool("plugin_add", {"source": SHOUT})
        assert not result.is_error and result.structured_content["pending_tools"] == [], result
        failed, removed = await owner_call(owner, "plugin_remove", id=NPM_ID, purge=True)
        assert not failed and removed["purged"]["tool_pins_deleted"] == 1, removed
        failed, review = await owner_call(owner, "tools_pending")
        assert not failed and not any(e["capability"] == NPM_ID for e in review["pending"]), review

        # Installed again after the purge: the same tool is pending again, not silently hidden
        # (the host forgot its last list of the plugin with the plugin).
        result = await owner.call_tool("plugin_add", {"source": SHOUT})
        assert not result.is_error and result.structured_content["pending_tools"] == ["shout"], result


@needs_npm
@needs_bwrap
@pytest.mark.anyio
async def test_plugin_add_with_a_role_grants_it_and_a_visitor_calls_it_once_its_tools_are_approved(
    tmp_path: Path, database_url: str, local_npm: LocalPackages
) -> None:
    settings = host_settings(tmp_path, database_url, [], pin_tools=True)
    async with running_host(settings, local_npm) as running, owner_client(running) as owner:
        refused, missing = await owner_call(owner, "plugin_add", source=SHOUT, role="friends")
        nothing = leftovers(settings.data_dir)
        failed, answer = await owner_call(owner, "role_put", id="friends", capabilities=[])
        assert not failed, answer
        failed, added = await owner_call(owner, "plugin_add", source=SHOUT, role="friends")
        _, roles = await owner_call(owner, "roles_list")
        _, code = await owner_call(owner, "code_create", role="friends")
        session = await running.new_session({"code": code["code"]})
        async with running.client(session) as visitor:
            before = [tool.name for tool in (await visitor.list_tools()).tools]
            approve_failed, approved = await owner_call(owner, "tools_approve", capability=NPM_ID)
            after = [tool.name for tool in (await visitor.list_tools()).tools]
            shout = await visitor.call_tool("shout", {"text": "hi"})

    folder = settings.data_dir / "plugins" / NPM_ID
    assert refused and missing == {
        "code": "invalid_arguments",
        "message": "role: no role 'friends' (roles_list shows yours; role_put makes one)",
    }
    assert nothing == []  # refused before npm ran
    code_step = {
        "step": "make an access code of role friends for a visitor (its text is shown once)",
        "tool": "code_create",
        "arguments": {"role": "friends"},
    }
    assert not failed and added == {
        "capability": NPM_ID,
        "version": "1.0.0",
        "folder": str(folder),
        "role": "friends",
        "pending_tools": ["shout"],
        "config_to_set": [],
        "reaches": reaches(folder, "node node_modules/@tiny-test/shout-server/server.js"),
        "next": [
            {"step": "approve its pending tools (shout)", "tool": "tools_approve", "arguments": {"capability": NPM_ID}},
            code_step,
        ],
        "visitors": {"roles": ["friends"], "public": False, "code_role": "friends"},
    }
    assert [(role["id"], role["capabilities"]) for role in roles["roles"]] == [("friends", [NPM_ID]), ("public", [])]
    assert before == []  # granted, but pending
    assert not approve_failed and [a["tool"] for a in approved["approved"]] == ["shout"]
    assert (approved["next"], approved["visitors"]) == ([code_step], added["visitors"])
    assert after == ["shout"]
    assert not shout.is_error and shout.content[0].text == "HI"  # type: ignore[union-attr]
