"""MCP registry `server.json`: the model, and the stdio package the installer gets from it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from inline_snapshot import snapshot

from mcp_host.errors import InvalidArguments
from mcp_host.plugins import parse_server_json, stdio_package

SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-09-29/server.schema.json"


def entry(*packages: dict[str, Any], **changes: Any) -> bytes:
    document: dict[str, Any] = {
        "$schema": SCHEMA,
        "name": "io.github.example/weather",
        "title": "Weather",
        "description": "Forecasts.",
        "version": "1.0.2",
        "repository": {"url": "https://github.com/example/weather", "source": "github"},
        "packages": list(packages),
        **changes,
    }
    return json.dumps(document).encode()


NPM = {
    "registryType": "npm",
    "registryBaseUrl": "https://registry.npmjs.org",
    "identifier": "@example/weather-mcp",
    "version": "1.0.2",
    "transport": {"type": "stdio"},
    "runtimeHint": "npx",
    "packageArguments": [
        {"type": "positional", "value": "serve", "description": "Subcommand"},
        {"type": "named", "name": "--units", "default": "metric", "choices": ["metric", "imperial"]},
        {"type": "named", "name": "--station", "isRequired": True, "valueHint": "id"},
    ],
    "environmentVariables": [
        {"name": "WEATHER_API_KEY", "description": "API key", "isRequired": True, "isSecret": True},
        {"name": "WEATHER_REGION", "default": "eu", "format": "string"},
    ],
}
PYPI = {
    "registryType": "pypi",
    "identifier": "weather-mcp",
    "version": "0.4.0",
    "transport": {"type": "stdio"},
}


def test_npm_stdio_package_with_arguments_and_environment() -> None:
    got = stdio_package(parse_server_json(entry({**NPM, "transport": {"type": "streamable-http"}}, NPM)))

    assert got.model_dump(exclude_none=True) == snapshot(
        {
            "registry_type": "npm",
            "identifier": "@example/weather-mcp",
            "version": "1.0.2",
            "registry_base_url": "https://registry.npmjs.org",
            "arguments": (
                {
                    "description": "Subcommand",
                    "value": "serve",
                    "is_required": False,
                    "is_secret": False,
                    "type": "positional",
                    "is_repeated": False,
                },
                {
                    "default": "metric",
                    "is_required": False,
                    "is_secret": False,
                    "choices": ["metric", "imperial"],
                    "type": "named",
                    "name": "--units",
                    "is_repeated": False,
                },
                {
                    "is_required": True,
                    "is_secret": False,
                    "type": "named",
                    "name": "--station",
                    "value_hint": "id",
                    "is_repeated": False,
                },
            ),
            "environment": (
                {"description": "API key", "is_required": True, "is_secret": True, "name": "WEATHER_API_KEY"},
                {
                    "default": "eu",
                    "is_required": False,
                    "is_secret": False,
                    "format": "string",
                    "name": "WEATHER_REGION",
                },
            ),
        }
    )
    assert [argument.resolved for argument in got.arguments] == ["serve", "metric", None]


def test_pypi_stdio_package_after_packages_it_cannot_install() -> None:
    oci = {"registryType": "oci", "identifier": "docker.io/example/weather:1.0.2", "transport": {"type": "stdio"}}
    got = stdio_package(parse_server_json(entry(oci, PYPI)))
    assert (got.registry_type, got.identifier, got.version, got.arguments, got.environment) == (
        "pypi",
        "weather-mcp",
        "0.4.0",
        (),
        (),
    )


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            entry(remotes=[{"type": "sse", "url": "https://weather.example/sse"}]),
            "the server.json of 'io.github.example/weather' offers only remote servers; "
            "the host installs stdio packages.",
        ),
        (
            entry({**NPM, "transport": {"type": "sse", "url": "https://x.example"}}),
            "the server.json of 'io.github.example/weather' has no npm or PyPI package with stdio transport.",
        ),
        (
            entry({key: value for key, value in PYPI.items() if key != "version"}),
            "the server.json's pypi package 'weather-mcp' has no version to pin.",
        ),
    ],
)
def test_entries_the_host_cannot_install_are_refused(document: bytes, message: str) -> None:
    with pytest.raises(InvalidArguments) as caught:
        stdio_package(parse_server_json(document))
    assert caught.value.message == message


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b"{", "the server.json is not valid JSON (Expecting property name enclosed in double quotes at line 1)."),
        (b"[]", "the server.json is not a JSON object."),
        (b"\xff", "the server.json is not valid UTF-8."),
        (b'{"name": 1}', "the server.json is invalid at name: Input should be a valid string."),
        (
            entry({**NPM, "packageArguments": [{"type": "named", "value": "x"}]}),
            "the server.json is invalid at packages.0.packageArguments.0: Value error, a named argument needs a name.",
        ),
        (
            entry({**NPM, "environmentVariables": [{"name": "BAD=NAME"}]}),
            "the server.json is invalid at packages.0.environmentVariables.0.name: "
            "String should match pattern '^[A-Za-z_][A-Za-z0-9_]{0,127}$'.",
        ),
        (
            entry(description="line\x1b[31m"),
            "the server.json is invalid at description: "
            "Value error, the description contains a control character (U+001B) at index 4.",
        ),
        (b" " * (1024 * 1024 + 1), "the server.json is 1048577 bytes long; the limit is 1048576."),
    ],
)
def test_malformed_server_json_is_refused_in_one_sentence(document: bytes, message: str) -> None:
    with pytest.raises(InvalidArguments) as caught:
        parse_server_json(document)
    assert caught.value.message == message
