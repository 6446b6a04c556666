"""A visitor's MCP client walking in by URL, headless: the MCP Python SDK's own
`OAuthClientProvider`, whose redirect handler is a `DeskBrowser` that fetches the front desk's
page, fills its form as the person would and follows the answer back to the client's callback.

Used by the front desk's tests and by `bench/walk_in.py`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

CALLBACK = "http://127.0.0.1:5173/callback"


class _Form(HTMLParser):
    """The desk page's form: its action and its inputs (name → (type, value))."""

    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.inputs: dict[str, tuple[str, str]] = {}
        self.decisions: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.action = found.get("action", "")
        elif tag == "input" and "name" in found:
            self.inputs[found["name"]] = (found.get("type", "text"), found.get("value", ""))
        elif tag == "button" and found.get("name") == "decision":
            self.decisions.append(found.get("value", ""))


def read_form(html: str) -> _Form:
    form = _Form()
    form.feed(html)
    return form


@dataclass
class DeskBrowser:
    """The person's browser at the front desk: submits `fields` with `decision`."""

    fields: Mapping[str, str] = field(default_factory=dict)
    decision: str = "allow"
    landed: list[str] = field(default_factory=list)
    pages: list[httpx2.Response] = field(default_factory=list)

    async def open(self, url: str) -> None:
        async with httpx2.AsyncClient(timeout=30) as http:
            with anyio.fail_after(30):
                page = await http.get(url, follow_redirects=True)  # `/authorize`, then the desk's page
                self.pages.append(page)
                assert page.status_code == 200, page.text
                form = read_form(page.text)
                hidden = {name: value for name, (kind, value) in form.inputs.items() if kind == "hidden"}
                answer = await http.post(form.action, data={**hidden, **self.fields, "decision": self.decision})
                self.pages.append(answer)
                assert answer.status_code == 302, answer.text
        self.landed.append(answer.headers["location"])

    async def callback(self) -> AuthorizationCodeResult:
        found = dict(parse_qsl(urlsplit(self.landed[-1]).query))
        return AuthorizationCodeResult(code=found["code"], state=found.get("state"), iss=found.get("iss"))


@dataclass
class MemoryTokens:
    """The SDK client's `TokenStorage`, in memory."""

    tokens: OAuthToken | None = None
    client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def oauth_provider(door: str, storage: MemoryTokens, browser: DeskBrowser) -> OAuthClientProvider:
    """The SDK's OAuth client of `door`, registering itself dynamically as a public client."""
    metadata = OAuthClientMetadata(
        client_name="Walk-in <b>test</b> client", redirect_uris=[AnyUrl(CALLBACK)], token_endpoint_auth_method="none"
    )
    return OAuthClientProvider(door, metadata, storage, browser.open, browser.callback)


@asynccontextmanager
async def walked_in(
    door: str, browser: DeskBrowser, *, mode: str = "auto", storage: MemoryTokens | None = None, **client: Any
) -> AsyncIterator[tuple[Client, OAuthClientProvider, MemoryTokens]]:
    """An SDK client of `door` signed in through the front desk by `browser`."""
    tokens = storage or MemoryTokens()
    provider = oauth_provider(door, tokens, browser)
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=60)) as http:
        transport = streamable_http_client(door, http_client=http)
        async with Client(transport, mode=mode, cache=None, **client) as connected:
            yield connected, provider, tokens
