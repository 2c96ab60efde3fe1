"""The `launch` fixture: Chromium with a given file as its microphone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, Launcher, require_browser

try:
    from playwright.async_api import Browser, async_playwright
except ImportError:  # reported by `require_browser`
    async_playwright = None  # type: ignore[assignment]


@pytest.fixture
async def launch() -> AsyncIterator[Launcher]:
    """Starts Debian chromium with `capture` as its microphone (looped by chromium;
    a path ending in `%noloop` plays once)."""
    require_browser()
    assert async_playwright is not None
    browsers: list[Browser] = []
    async with async_playwright() as pw:

        async def start(capture: Path) -> Browser:
            browser = await pw.chromium.launch(
                executable_path=str(CHROMIUM),
                headless=True,
                args=[*CHROMIUM_ARGS, f"--use-file-for-fake-audio-capture={capture}"],
            )
            browsers.append(browser)
            return browser

        try:
            yield start
        finally:
            for browser in browsers:
                await browser.close()
