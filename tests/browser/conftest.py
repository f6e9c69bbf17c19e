"""Fixtures for the dashboard in a real browser: headless Chromium (Debian's `chromium`,
installed by `make venv` when missing) driven by Playwright, against the dashboard served
on the real broker by the fixtures of tests/integration (imported here, not copied).

Playwright never downloads a browser here: it launches /usr/bin/chromium.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.async_api import (
    ConsoleMessage,
    Page,
    Request,
    Response,
    async_playwright,
    expect,
)

from tests.integration import conftest as shared

# The broker and dashboard fixtures of tests/integration, registered here under their names.
kafka_bootstrap = shared.kafka_bootstrap
topic_prefix = shared.topic_prefix
dashboard_settings = shared.dashboard_settings
dashboard_url = shared.dashboard_url

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "out" / "browser"
VIEWPORT = {"width": 1440, "height": 1700}
UI_TIMEOUT_MS = 30_000  # the feed reads the broker, the page polls: seconds, not minutes

expect.set_options(timeout=UI_TIMEOUT_MS)


@dataclass
class Visit:
    """One visitor's tab on the dashboard, with what went wrong in it."""

    page: Page
    url: str
    errors: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """URLs the page asked for that are not there (404), the favicon's included."""

    def console(self, message: ConsoleMessage) -> None:
        # A refused request logs "Failed to load resource": that status is what the page
        # reports itself; script errors are what counts here.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(message.text)

    def request(self, request: Request) -> None:
        if not request.url.startswith(self.url):
            self.outside.append(request.url)

    def response(self, response: Response) -> None:
        if response.status == 404:
            self.missing.append(response.url)

    def assert_clean(self) -> None:
        """No script error in the page, nothing fetched from another origin, and nothing
        it asked for missing."""
        assert self.errors == [], self.errors
        assert self.outside == [], self.outside
        assert self.missing == [], self.missing


@contextlib.asynccontextmanager
async def open_tab(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Visit]:
    """A fresh tab (empty sessionStorage) on the dashboard at `url`, live; every request it
    makes carries `headers` (as an authenticating proxy in front would add them)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make venv` installs Debian's chromium", False)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            context = await browser.new_context(viewport=VIEWPORT, extra_http_headers=headers)
            page = await context.new_page()
            page.set_default_timeout(UI_TIMEOUT_MS)
            tab = Visit(page, url)
            page.on("pageerror", lambda exc: tab.errors.append(str(exc)))
            page.on("console", tab.console)
            page.on("request", tab.request)
            page.on("response", tab.response)
            await page.goto(url)
            await expect(page.locator("#conn")).to_have_text("live")
            yield tab
        finally:
            await browser.close()


@pytest.fixture
async def visit(dashboard_url: str) -> AsyncIterator[Visit]:
    """A fresh tab (empty sessionStorage) that has opened the dashboard."""
    async with open_tab(dashboard_url) as tab:
        yield tab
