"""`OnceOpen`: the child factory's view of the parts built once the database is open."""

from __future__ import annotations

from typing import cast

import anyio
import pytest

from mcp_host.children import OnceOpen, RemoteSignIns
from mcp_host.errors import Unavailable
from mcp_host.plugins import ChildConfig, Plugin
from mcp_host.plugins.manifest import load_manifest
from mcp_host.store import OwnerEgress
from tests.hosting import PLUGINS

pytestmark = pytest.mark.anyio


class _Env:
    async def env_for(self, plugin: Plugin) -> dict[str, str]:
        return {"WHO": plugin.manifest.id}

    async def child_config(self, plugin: Plugin) -> ChildConfig:
        return ChildConfig(env={"WHO": plugin.manifest.id}, args=("--x",))


class _Egress:
    async def entries(self, plugin_id: str) -> OwnerEgress:
        return OwnerEgress(entries=(f"{plugin_id}.example.test",), private=())


def _echo() -> Plugin:
    return Plugin(load_manifest(PLUGINS / "echo"), PLUGINS / "echo", builtin=False)


async def test_a_start_waits_for_the_config_until_the_host_opens_it() -> None:
    once_open, echo = OnceOpen(wait_s=5), _echo()
    read: list[ChildConfig] = []

    async def start() -> None:
        read.append(await once_open.child_config(echo))

    async with anyio.create_task_group() as tg:
        tg.start_soon(start)
        await anyio.wait_all_tasks_blocked()
        assert read == []
        once_open.open(_Env(), {}, _Egress())
    assert read == [ChildConfig(env={"WHO": echo.manifest.id}, args=("--x",))]
    assert await once_open.env_for(echo) == {"WHO": echo.manifest.id}


async def test_a_start_is_refused_unavailable_when_the_config_never_opens() -> None:
    with pytest.raises(Unavailable, match="not open yet"):
        await OnceOpen(wait_s=0.05).child_config(_echo())


async def test_the_parent_calls_are_those_opened_with_and_it_opens_once() -> None:
    once_open = OnceOpen(wait_s=5)
    assert once_open.on_call("lent") is None

    async def told(tool: str, request_id: str) -> None: ...

    once_open.open(_Env(), {"lent": told}, _Egress())
    assert once_open.on_call("lent") is told
    assert once_open.on_call("own") is None
    with pytest.raises(RuntimeError):
        once_open.open(_Env(), {}, _Egress())


def test_the_sign_ins_are_none_until_opened_and_opened_once() -> None:
    once = OnceOpen(wait_s=0.1)
    before = once.sign_ins()
    sign_ins = cast(RemoteSignIns, object())  # only held and handed back, never used
    once.open_sign_ins(sign_ins)
    with pytest.raises(RuntimeError, match="opened once"):
        once.open_sign_ins(sign_ins)
    assert (before, once.sign_ins()) == (None, sign_ins)


async def test_the_owners_egress_is_none_until_opened_then_the_stores() -> None:
    once_open = OnceOpen(wait_s=5)
    assert await once_open.owner_egress("echo") == OwnerEgress()  # a start while the database starts
    once_open.open(_Env(), {}, _Egress())
    assert await once_open.owner_egress("echo") == OwnerEgress(entries=("echo.example.test",))
