"""The SOURCE grammars of `mcp-host plugin add`: what each names, and hostile input refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import (
    BundleSource,
    NpmSource,
    PypiSource,
    RegistryEntrySource,
    RemoteSource,
    parse_add_source,
    parse_source,
)
from mcp_host.plugins.manifest import PLUGIN_ID_RE
from mcp_host.plugins.sources import plugin_id_words, remote_id_words


@pytest.mark.parametrize(
    ("text", "source"),
    [
        ("npm:@modelcontextprotocol/server-memory", NpmSource("@modelcontextprotocol/server-memory")),
        (
            "npm:@modelcontextprotocol/server-memory@2026.1.26",
            NpmSource("@modelcontextprotocol/server-memory", "2026.1.26"),
        ),
        ("npm:left-pad@latest", NpmSource("left-pad", "latest")),
        ("npm:a.b_c~d", NpmSource("a.b_c~d")),
        ("pypi:mcp-server-time", PypiSource("mcp-server-time")),
        ("pypi:mcp_server_time==2025.9.25", PypiSource("mcp_server_time", "2025.9.25")),
        ("pypi:Foo.Bar==1.0rc1+local", PypiSource("Foo.Bar", "1.0rc1+local")),
        ("dist/x.mcpb", BundleSource(Path("dist/x.mcpb"))),
        ("/srv/entries/server.json", RegistryEntrySource(Path("/srv/entries/server.json"))),
        ("server.json", RegistryEntrySource(Path("server.json"))),
        ("time.server.json", RegistryEntrySource(Path("time.server.json"))),  # any name: the file says what it is
        ("entries/time.json", RegistryEntrySource(Path("entries/time.json"))),
    ],
)
def test_each_source_kind_parses(text: str, source: object) -> None:
    assert parse_source(text) == source


@pytest.mark.parametrize(
    "text",
    [
        "",
        "memory",
        "npm:",
        "npm:--registry=http://evil",
        "npm:-g",
        "npm:Upper",
        "npm:@scope",
        "npm:@scope/",
        "npm:a/b/c",
        "npm:a b",
        "npm:git+https://github.com/x/y",
        "npm:file:../x",
        "npm:https://example.com/x.tgz",
        "npm:x@^1.0.0",
        "npm:x@1 || 2",
        "npm:x@",
        "npm:x@;rm -rf /",
        "npm:x\n@1",
        "npm:" + "a" * 215,
        "pypi:",
        "pypi:-e .",
        "pypi:--index-url=http://evil",
        "pypi:x>=1",
        "pypi:x==",
        "pypi:x==1;python_version<'3'",
        "pypi:x[extra]",
        "pypi:x @ https://example.com/x.whl",
        "pypi:_x",
        "pypi:x-",
        "pypi:" + "a" * 101,
        "https://example.com/x.mcpb\n",
        "x.mcpb\x00",
        ".json",
        "entries/.mcpb",
        "server.json\n",
    ],
)
def test_hostile_or_malformed_sources_are_refused_in_one_sentence(text: str) -> None:
    with pytest.raises(InvalidArguments) as caught:
        parse_source(text)
    message = caught.value.message
    assert "\n" not in message and "\x00" not in message
    assert 0 < len(message) < 300  # one line, whatever the input


@pytest.mark.parametrize(
    ("text", "plugin_id"),
    [
        ("npm:@modelcontextprotocol/server-memory", "npm.modelcontextprotocol.server_memory"),
        ("npm:left-pad", "npm.left_pad"),
        ("npm:@1password/x.y", "npm.p1password.x_y"),
        ("pypi:mcp-server-time", "pypi.mcp_server_time"),
        ("pypi:Foo..Bar", "pypi.foo_bar"),
    ],
)
def test_the_default_id_comes_from_the_package_name(text: str, plugin_id: str) -> None:
    source = parse_source(text)
    assert isinstance(source, NpmSource | PypiSource)
    made = ".".join(plugin_id_words(source))
    assert made == plugin_id
    assert PLUGIN_ID_RE.match(made)


@pytest.mark.parametrize(
    ("text", "host", "plugin_id"),
    [
        ("https://mcp.example.com/mcp", "mcp.example.com", "mcp.example.com"),
        ("https://API-1.Example.io:8443/v1/mcp?x=1", "api-1.example.io", "api_1.example.io"),
        ("https://9lives.example/mcp", "9lives.example", "h9lives.example"),
        ("http://127.0.0.1:8000/mcp", "127.0.0.1", "ip_127_0_0_1"),
        ("http://[::1]:8000/mcp", "[::1]", "ip_1"),
        ("http://localhost:3000/mcp", "localhost", "localhost"),
    ],
)
def test_a_remote_servers_url_is_an_add_source_with_an_id_from_its_host(text: str, host: str, plugin_id: str) -> None:
    source = parse_add_source(text)
    assert source == RemoteSource(text, host)
    made = ".".join(remote_id_words(source))
    assert made == plugin_id and PLUGIN_ID_RE.match(made)
    assert parse_add_source("npm:left-pad") == NpmSource("left-pad")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("http://mcp.example.com/mcp", "an http:// source must be a loopback host"),
        ("http://10.0.0.2/mcp", "an http:// source must be a loopback host"),
        ("https://user:pw@mcp.example.com/mcp", "no user or password"),
        ("https://mcp.example.com/mcp#x", "no #fragment"),
        ("https://mcp.example.com:99999/mcp", "is not a URL"),
        ("https:///mcp", "names no host"),
        ("https://mcp.example.com/a b", "printable ASCII without spaces"),
        ("https://mcp.example.com/\x00", "printable ASCII without spaces"),
        ("https://mcp.exämple.com/mcp", "printable ASCII without spaces"),
        ("https://" + "a" * 2050, "at most 2048"),
    ],
)
def test_a_bad_remote_url_is_refused_in_one_sentence(text: str, says: str) -> None:
    with pytest.raises(InvalidArguments) as caught:
        parse_add_source(text)
    assert says in caught.value.message and "\n" not in caught.value.message
