"""`HostsFileResolver`: names from an /etc/hosts-format file first (comments, IPv4 and IPv6,
any case, a trailing dot), read again when the file changes, and the fallback resolver for any
other name, or when the file is missing."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest

from mcp_host.egress import HostsFileResolver, MemoryResolver

pytestmark = pytest.mark.anyio


async def test_names_resolve_from_the_file_first_then_the_fallback(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "# split horizon\n"
        "10.0.0.5  db.internal.test  DB2.Internal.Test # two names\n"
        "fd00::5   db.internal.test\n"
        "\n"
        "garbage   ignored.test\n"
        "10.0.0.6\n"
    )
    fallback = MemoryResolver({"elsewhere.test": ["203.0.113.7"]})
    resolver = HostsFileResolver(hosts, fallback)
    assert await resolver.resolve("db.internal.test", 443) == [
        ipaddress.ip_address("10.0.0.5"),
        ipaddress.ip_address("fd00::5"),
    ]
    assert await resolver.resolve("db2.internal.test.", 443) == [ipaddress.ip_address("10.0.0.5")]
    assert await resolver.resolve("elsewhere.test", 443) == [ipaddress.ip_address("203.0.113.7")]
    with pytest.raises(OSError):
        await resolver.resolve("ignored.test", 443)
    assert fallback.asked == ["elsewhere.test", "ignored.test"]


async def test_the_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.5 moving.test\n")
    resolver = HostsFileResolver(hosts, MemoryResolver({}))
    assert await resolver.resolve("moving.test", 80) == [ipaddress.ip_address("10.0.0.5")]
    hosts.write_text("10.0.0.9 moving.test\n")
    os.utime(hosts, ns=(1, 1))  # a different modification time, whatever the clock's grain
    assert await resolver.resolve("moving.test", 80) == [ipaddress.ip_address("10.0.0.9")]
    hosts.unlink()
    with pytest.raises(OSError):
        await resolver.resolve("moving.test", 80)
