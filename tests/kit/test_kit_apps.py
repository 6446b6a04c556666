"""`PluginServer.app`: a kit plugin serves an HTML file as an MCP App in two lines — the
resource (`ui://`, `text/html;profile=mcp-app`, `_meta.ui` asking for no network) and the
`_meta` its tools name it with. Read through the SDK's in-memory client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp import Client

from mcp_host_kit import APP_MIME_TYPE, PluginServer

pytestmark = pytest.mark.anyio

URI = "ui://demo/app.html"
HTML = "<!doctype html>\r\n<p>caf\u00e9</p>\n"  # a CRLF and a non-ASCII letter: bytes kept as they are


def served(
    tmp_path: Path, csp: dict[str, list[str]] | None = None, *, prefers_border: bool = True
) -> tuple[PluginServer, dict[str, Any]]:
    html = tmp_path / "app.html"
    html.write_bytes(HTML.encode("utf-8"))
    mcp = PluginServer("demo")
    meta = mcp.app(URI, html, name="demo-app", csp=csp, prefers_border=prefers_border)

    @mcp.tool(meta=meta)
    def show() -> str:
        """Show the app."""
        return "shown"

    return mcp, meta


async def test_a_kit_plugin_serves_a_file_as_an_app_that_asks_for_no_network(tmp_path: Path) -> None:
    mcp, meta = served(tmp_path)
    async with Client(mcp) as client:
        (tool,) = (await client.list_tools()).tools
        (listed,) = (await client.list_resources()).resources
        read = await client.read_resource(URI)

    no_network: dict[str, list[str]] = {
        "connectDomains": [],
        "resourceDomains": [],
        "frameDomains": [],
        "baseUriDomains": [],
    }
    assert meta == {"ui": {"resourceUri": URI}}
    assert tool.meta == {"ui": {"resourceUri": URI}}
    assert (str(listed.uri), listed.name, listed.mime_type) == (URI, "demo-app", APP_MIME_TYPE)
    (content,) = read.contents
    assert isinstance(content, types.TextResourceContents)
    assert (content.mime_type, content.text.encode("utf-8")) == (APP_MIME_TYPE, HTML.encode("utf-8"))
    assert content.meta == {"ui": {"csp": no_network, "prefersBorder": True}}


async def test_an_app_names_the_domains_it_reaches_and_is_read_afresh(tmp_path: Path) -> None:
    mcp, _ = served(tmp_path, csp={"connectDomains": ["https://api.example.com"]}, prefers_border=False)
    (tmp_path / "app.html").write_text("<p>changed</p>", encoding="utf-8")
    async with Client(mcp) as client:
        (content,) = (await client.read_resource(URI)).contents

    assert isinstance(content, types.TextResourceContents) and content.text == "<p>changed</p>"
    assert content.meta == {
        "ui": {
            "csp": {
                "connectDomains": ["https://api.example.com"],
                "resourceDomains": [],
                "frameDomains": [],
                "baseUriDomains": [],
            },
            "prefersBorder": False,
        }
    }


def test_an_app_needs_a_ui_uri_and_its_file_at_start(tmp_path: Path) -> None:
    mcp = PluginServer("demo")
    (tmp_path / "app.html").write_text("<p>app</p>", encoding="utf-8")

    with pytest.raises(ValueError, match="ui://"):
        mcp.app("https://demo/app.html", tmp_path / "app.html", name="app")
    with pytest.raises(FileNotFoundError):
        mcp.app(URI, tmp_path / "missing.html", name="app")
