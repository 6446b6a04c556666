"""A headless Chromium (Debian's `chromium` and `chromium-driver`) driven by Selenium, for the
console's browser tests. Selenium blocks, and the host runs on the test's own event loop, so
every browser step runs in a worker thread (`anyio.to_thread`).

Screenshots go to `$MCP_HOST_ARTIFACTS` (default `.artifacts/console/` in the checkout,
ignored by git), each the whole page at the width the browser has then: a desktop window, or
a phone (`Browser.phone`, Chromium's own mobile emulation)."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
import pytest

from tests.hosting import REPO

T = TypeVar("T")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("MCP_HOST_ARTIFACTS") or REPO / ".artifacts" / "console")
PHONE = (390, 844)
"""A phone's CSS pixels (an iPhone 12 to 15): the console's narrowest promised width."""

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="Chromium is not installed: apt-get install chromium chromium-driver (scripts/test does when root)",
)


class Browser:
    """One Chromium window; each method is one step, run off the event loop."""

    def __init__(self, base_url: str) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        assert CHROMIUM is not None and DRIVER is not None
        options.binary_location = CHROMIUM
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
            options.add_argument(argument)
        # The path given: Selenium Manager never tries to download a driver (CI has no internet).
        self.driver = webdriver.Chrome(options=options, service=Service(DRIVER))
        self.driver.set_page_load_timeout(60)
        self.base_url = base_url

    async def run(self, step: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(step)

    async def get(self, path: str) -> None:
        url = path if path.startswith("http") else self.base_url + path
        await self.run(lambda: self.driver.get(url))

    async def fill(self, css: str, text: str) -> None:
        def step() -> None:
            element = self.driver.find_element("css selector", css)
            element.clear()
            element.send_keys(text)

        await self.run(step)

    async def click(self, css: str) -> None:
        await self.run(lambda: self.driver.find_element("css selector", css).click())

    async def text(self, css: str = "body") -> str:
        return str(await self.run(lambda: self.driver.find_element("css selector", css).text))

    async def count(self, css: str) -> int:
        return len(await self.run(lambda: self.driver.find_elements("css selector", css)))

    async def script(self, source: str, *arguments: Any) -> Any:
        return await self.run(lambda: self.driver.execute_script(source, *arguments))

    async def path(self) -> str:
        url = str(await self.run(lambda: self.driver.current_url))
        return url.removeprefix(self.base_url)

    async def wait_for(self, css: str, *, within_s: float = 30.0) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        def step() -> None:
            WebDriverWait(self.driver, within_s).until(lambda d: d.find_elements("css selector", css))

        await self.run(step)

    async def wait_for_text(self, css: str, text: str, *, within_s: float = 30.0) -> None:
        from selenium.webdriver.support.ui import WebDriverWait

        def step() -> None:
            WebDriverWait(self.driver, within_s).until(lambda d: text in d.find_element("css selector", css).text)

        await self.run(step)

    async def alert_open(self) -> bool:
        from selenium.common.exceptions import NoAlertPresentException

        def step() -> bool:
            try:
                self.driver.switch_to.alert.dismiss()
            except NoAlertPresentException:
                return False
            return True

        return await self.run(step)

    @asynccontextmanager
    async def phone(self, width: int = PHONE[0], height: int = PHONE[1]) -> AsyncIterator[None]:
        """Within: the page as a phone shows it — a mobile viewport of `width` CSS pixels whose
        `<meta name="viewport">` is honoured, at twice the pixel density; the window after."""
        metrics = {"width": width, "height": height, "deviceScaleFactor": 2, "mobile": True}
        await self.run(lambda: self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics))
        try:
            yield
        finally:
            await self.run(lambda: self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {}))

    async def screenshot(self, name: str) -> Path:
        """The whole page, as tall as its content, at the viewport's width: `<name>.png`."""
        path = ARTIFACTS / f"{name}.png"

        def step() -> None:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            width, height = self.driver.execute_script(
                "return [window.innerWidth, Math.min(document.documentElement.scrollHeight, 6000)]"
            )
            clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
            shot = self.driver.execute_cdp_cmd("Page.captureScreenshot", {"captureBeyondViewport": True, "clip": clip})
            path.write_bytes(base64.b64decode(shot["data"]))

        await self.run(step)
        return path

    async def sign_out_everything(self) -> None:
        await self.run(self.driver.delete_all_cookies)

    def quit(self) -> None:
        self.driver.quit()

    @classmethod
    @contextmanager
    def window(cls) -> Iterator[Browser]:
        """One window, quit on the way out (a module's fixture; each test sets `base_url`)."""
        browser = cls("")
        try:
            yield browser
        finally:
            browser.quit()
