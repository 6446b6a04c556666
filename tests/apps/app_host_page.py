"""A test MCP Apps host page for Chromium, connected to a visitor session (tests/apps/test_in_chromium.py).

The page is tests/apps/js/app_host.html with app_host.mjs bundled by scripts/install-apps
(the ext-apps SDK's host side, `AppBridge`, and the TypeScript SDK client). A browser cannot
reach the host's visitor endpoint from another origin (it sends no CORS headers, on purpose),
and a real app host (Claude, ChatGPT) holds the session's token in its backend, not in the
page: so a small Starlette app serves the page and relays the page's same-origin `/mcp` to the
session's MCP URL, adding the session's bearer token on the server side. The relay passes
bodies and MCP headers through unchanged, streams included; it adds nothing the host answers.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.apps.support import APPS, JS
from tests.hosting import REPO, free_port, serving
from tests.owner_console.browser import Browser

APP_HOST = APPS / "app-host"
BUNDLE = APP_HOST / "app_host.js"
ARTIFACTS = Path(os.environ.get("MCP_HOST_ARTIFACTS") or REPO / ".artifacts") / "apps"
# What the relay passes on of a request and of an answer (the MCP transport's own headers);
# the page's Origin, cookies and the like stay on the page's side.
REQUEST_HEADERS = {"content-type", "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"}
REQUEST_HEADERS |= {"mcp-method", "mcp-name"}
ANSWER_HEADERS = {"content-type", "mcp-session-id", "mcp-protocol-version", "cache-control"}


def missing_app_host() -> str | None:
    """Why the app host page cannot run here, or None."""
    if not BUNDLE.exists():
        return "run scripts/install-apps first (missing: .cache/ecosystem/apps/app-host/app_host.js)"
    return None


def _relay_app(session: dict[str, Any], http: httpx2.AsyncClient) -> Starlette:
    async def relay(request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() in REQUEST_HEADERS}
        headers["authorization"] = f"Bearer {session['token']}"
        headers["accept-encoding"] = "identity"  # the bytes pass through as they come
        upstream = http.build_request(request.method, session["mcp_url"], headers=headers, content=await request.body())
        answer = await http.send(upstream, stream=True)
        kept = {k: v for k, v in answer.headers.items() if k.lower() in ANSWER_HEADERS}
        return StreamingResponse(
            answer.aiter_raw(), status_code=answer.status_code, headers=kept, background=BackgroundTask(answer.aclose)
        )

    async def page(_: Request) -> Response:
        return FileResponse(JS / "app_host.html")

    async def bundle(_: Request) -> Response:
        return FileResponse(BUNDLE, media_type="text/javascript")

    routes = [
        Route("/", page),
        Route("/app_host.js", bundle),
        Route("/mcp", relay, methods=["GET", "POST", "DELETE"]),
    ]
    return Starlette(routes=routes)


@asynccontextmanager
async def app_host_page(session: dict[str, Any]) -> AsyncIterator[str]:
    """The page and its relay to `session` (a visitor session of a running host), served on
    loopback while inside: its base URL."""
    port = free_port()
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=None)) as http,
        serving(_relay_app(session, http), port, lifespan="off", timeout_graceful_shutdown=2),
    ):
        yield f"http://127.0.0.1:{port}"


async def open_app(browser: Browser, base_url: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """Open the page as the model's call of `tool` with `arguments`: the page reads the app the
    tool names, calls the tool and renders the app with its result. What the page recorded
    (`window.appHost`) once rendered or failed."""
    query = urlencode({"tool": tool, "arguments": json.dumps(arguments or {})})
    await browser.get(f"{base_url}/?{query}")
    return await until(browser, "window.appHost && window.appHost.state !== 'connecting' && window.appHost")


async def until(browser: Browser, expression: str, *, within_s: float = 30.0) -> Any:
    """The first truthy value of the JavaScript `expression` on the page."""
    from selenium.webdriver.support.ui import WebDriverWait

    def step() -> Any:
        return WebDriverWait(browser.driver, within_s).until(lambda d: d.execute_script(f"return {expression}"))

    return await browser.run(step)


async def app_calls(browser: Browser, count: int) -> list[dict[str, Any]]:
    """The app's own calls through the page, once `count` of them have an answer."""
    answered = "window.appHost.calls.filter(c => 'result' in c || 'error' in c)"
    calls: list[dict[str, Any]] = await until(browser, f"{answered}.length >= {count} && {answered}")
    return calls


@contextmanager
def inside_app(browser: Browser) -> Iterator[None]:
    """Within: the browser's steps act in the app's frame (`#app`); the page's after. Blocking:
    use it inside a step run with `browser.run`."""
    driver = browser.driver
    driver.switch_to.frame(driver.find_element("css selector", "iframe#app"))
    try:
        yield
    finally:
        driver.switch_to.default_content()


async def in_app(
    browser: Browser,
    css: str,
    *,
    click: bool = False,
    fill: str | None = None,
    attribute: str | None = None,
    within_s: float = 30.0,
) -> str:
    """In the app's frame, once `css` shows: type `fill` into it, click it when `click`; then its
    text, or its `attribute`."""
    from selenium.webdriver.support.ui import WebDriverWait

    def step() -> str:
        with inside_app(browser):
            element = WebDriverWait(browser.driver, within_s).until(lambda d: d.find_element("css selector", css))
            if fill is not None:
                element.clear()
                element.send_keys(fill)
            if click:
                element.click()
            return str(element.get_attribute(attribute) if attribute else element.text)

    return await browser.run(step)


async def blocked_in_app(browser: Browser, url: str) -> str:
    """The CSP directive the app's frame is refused a `fetch` of `url` by ("" when it is not)."""
    script = """
        const done = arguments[arguments.length - 1];
        document.addEventListener("securitypolicyviolation", (e) => done(e.effectiveDirective), { once: true });
        fetch(arguments[0]).then(() => done(""), () => setTimeout(() => done(""), 500));
    """

    def step() -> str:
        with inside_app(browser):
            return str(browser.driver.execute_async_script(script, url))

    return await browser.run(step)


async def app_text_once(browser: Browser, css: str, predicate: Any, *, within_s: float = 30.0) -> str:
    """The text of `css` in the app's frame once `predicate(text)` holds."""
    from selenium.webdriver.support.ui import WebDriverWait

    def step() -> str:
        with inside_app(browser):
            found = WebDriverWait(browser.driver, within_s).until(
                lambda d: (t := d.find_element("css selector", css).text) and predicate(t) and t
            )
            return str(found)

    return await browser.run(step)


async def screenshot(browser: Browser, name: str) -> Path:
    """The page as the browser shows it, the app's frame included: `<ARTIFACTS>/<name>.png`."""
    path = ARTIFACTS / f"{name}.png"

    def step() -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path.write_bytes(browser.driver.get_screenshot_as_png())

    await browser.run(step)
    return path
