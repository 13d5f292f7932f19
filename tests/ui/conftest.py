"""The page's test set-up: headless Chromium from the system's packages, driven by playwright.

* `chromium` (module): a persistent browser context in a fresh user-data directory,
  launched from ``/usr/bin/chromium`` (``scripts/test`` installs it with apt-get; playwright
  never downloads a browser here), with every background fetch of Chromium's own turned off.
* `ui_docs` (module): a collection of the served knowledge base holding a real PDF (three
  pages), a text about timeouts and a document whose text holds ``<script>``; dropped after.
* `shot(page, name)`: a screenshot per state, in ``tests/ui/screenshots/`` (ignored by git).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

from arcana_loop.knowledge import KnowledgeBase

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# 2 shared cores: a first run loads the embedder in the server, and a state can take seconds
expect.set_options(timeout=30_000)
SCREENSHOTS = Path(__file__).parent / "screenshots"
PDF = Path(__file__).resolve().parents[2] / "evaluation" / "data" / "mixed" / "capacity.pdf"
TIMEOUT_TEXT = (
    "asyncio.wait_for runs a coroutine with a timeout. When the timeout expires the task is "
    "cancelled and TimeoutError is raised."
)
SCRIPT_TEXT = (
    "Zorblat widgets are configured with the zorblat.configure function. "
    '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> '
    "zorblat.configure takes the widget name and a mapping of zorblat settings."
)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    """A headless Chromium context with a fresh profile, closed after the module."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test installs it (apt-get install chromium)")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(chromium: BrowserContext) -> Iterator[Page]:
    """A new tab, closed after the test; a script error on the page fails the test."""
    tab = chromium.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.set_default_timeout(30_000)
    yield tab
    tab.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def ui_docs(pg_url: str) -> Iterator[str]:
    """A collection of the served knowledge base for the page's tests, dropped afterwards."""
    name = f"ui-test-{uuid.uuid4().hex[:8]}"
    kb = KnowledgeBase(pg_url)
    try:
        kb.ingest(PDF, collection=name)
        kb.ingest(TIMEOUT_TEXT, collection=name, name="asyncio-timeouts.md")
        kb.ingest(SCRIPT_TEXT, collection=name, name="zorblat.md")
        yield name
    finally:
        kb.delete_collection(name)
        kb.close()


@pytest.fixture(scope="session")
def shot() -> Callable[[Page, str], Path]:
    """Save a screenshot of a page's state as ``tests/ui/screenshots/<name>.png``."""
    SCREENSHOTS.mkdir(exist_ok=True)

    def take(page: Page, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
