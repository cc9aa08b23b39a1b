"""Fixtures for the dashboard's browser tests: one live stack with auth on, two API keys, a headless Chromium.

Chromium is Debian's package (/usr/bin/chromium, installed by scripts/services.sh); Playwright drives it
through `executable_path`, so no browser is downloaded. Set NTKLAB_SCREENSHOTS=docs/img to write the
screenshots docs/dashboard.md shows while the tests run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from ntklab import Client
from ntklab.store import api_keys
from ntklab.store.db import make_engine, make_session_factory
from tests.conftest import LiveStack

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def dashboard_stack(
    postgres_redis_stack: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveStack]:
    """API + one worker on PostgreSQL and Redis with NTKLAB_AUTH=on."""
    stack = LiveStack(postgres_redis_stack | {"NTKLAB_AUTH": "on"}, tmp_path_factory.mktemp("ui-logs"))
    try:
        stack.start_api()
        stack.start_worker()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def keys(dashboard_stack: LiveStack) -> dict[str, str]:
    """Secrets of two ordinary keys, "alice" and "bob", stored in the stack's database."""
    engine = make_engine(dashboard_stack.settings["NTKLAB_DATABASE_URL"])
    with make_session_factory(engine)() as session:
        secrets = {name: api_keys.create_key(session, name).secret for name in ("alice", "bob")}
    engine.dispose()
    return secrets


@pytest.fixture(scope="module")
def alice(dashboard_stack: LiveStack, keys: dict[str, str]) -> Iterator[Client]:
    with Client(dashboard_stack.url, api_key=keys["alice"]) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: run scripts/services.sh (as root it installs Debian's chromium)", pytrace=False
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        yield browser
        browser.close()


class Dashboard:
    """A browser tab on the dashboard signed in with one key; records dialogs and console errors.

    A confirm() or alert() is answered OK, or Cancel while `confirming` is False.
    """

    def __init__(self, page: Page, url: str, key: str) -> None:
        self.page = page
        self.url = url
        self.key = key
        self.confirming = True
        self.signed_in = False
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._answer)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def _answer(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        if self.confirming:
            dialog.accept()
        else:
            dialog.dismiss()

    def _console(self, message) -> None:
        """Console errors, except the 401 that tells the page auth is on (it then asks for the key)."""
        if message.type == "error" and "401 (Unauthorized)" not in message.text:
            self.errors.append(message.text)

    def open(self, route: str) -> Page:
        """Go to /ui/#<route>; the first time, answer the API-key dialog the page's first refused request opens.

        The heading renders before the first API answer comes back, so the dialog is waited for, not raced
        against the heading: with auth on, a tab without a key always gets a 401 and the dialog.
        """
        self.page.goto(f"{self.url}/ui/#{route}")
        if not self.signed_in:
            self.page.locator("#key-dialog[open]").wait_for()
            self.page.fill("#key-input", self.key)
            self.page.press("#key-input", "Enter")
            self.signed_in = True
        self.page.locator("main h1").wait_for()
        return self.page

    def screenshot(self, name: str) -> None:
        folder = os.environ.get("NTKLAB_SCREENSHOTS")
        if folder:
            self.page.screenshot(path=str(Path(folder) / f"dashboard-{name}.png"), full_page=True)


@pytest.fixture
def dashboard_for(browser: Browser, dashboard_stack: LiveStack) -> Iterator:
    """dashboard_for(key) → a Dashboard in a fresh browser context (its own sessionStorage)."""
    contexts = []

    def make(key: str) -> Dashboard:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(context)
        return Dashboard(context.new_page(), dashboard_stack.url, key)

    yield make
    for context in contexts:
        context.close()
