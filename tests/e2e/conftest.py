"""Browser tests: Playwright (the PyPI package) driving Debian's Chromium against a real
``nodeloom serve`` on a free port, with a fresh data directory.

Chromium comes from the system (``apt-get install chromium``; ``make install`` does it when it
runs as root): Playwright's own browser download cannot work on machines without general
internet access. Without Chromium or without a built web app the tests are skipped, saying
why; with ``NODELOOM_REQUIRE_SERVICES=1`` (as CI sets) they fail instead. Screenshots of each
page go to ``test-artifacts/screenshots/`` (not committed).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import ServerProcess

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-artifacts" / "screenshots"
BUNDLE = REPO / "src" / "nodeloom" / "web_dist" / "index.html"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("NODELOOM_REQUIRE_SERVICES") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def chromium_path() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Module-scoped on purpose: Playwright's sync API keeps its event loop marked as running
    in this thread while it is open, which would break the async tests collected after it."""
    executable = chromium_path()
    if executable is None:
        _unavailable(
            "Chromium is not installed: install Debian's package with `apt-get install chromium` "
            "(make install does it when run as root) to run the browser tests"
        )
    if not BUNDLE.exists():
        _unavailable(
            "the web app is not built: install Node.js 20+ and npm, then run `make install`"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is missing: run `make install`")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("e2e"))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def page(browser: object, server: ServerProcess) -> Iterator[object]:
    """One tab for the module: the flows follow each other like a user's session."""
    from playwright.sync_api import Browser

    assert isinstance(browser, Browser)
    context = browser.new_context(
        base_url=server.base_url,
        viewport={"width": 1400, "height": 900},
        permissions=["clipboard-read", "clipboard-write"],
    )
    context.set_default_timeout(15_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    # Chromium reports each CSP violation as a console error "Refused to ... because it
    # violates the following Content Security Policy directive: ...".
    tab.on(
        "console",
        lambda msg: (
            errors.append(msg.text)
            if msg.type == "error" and "Content Security Policy" in msg.text
            else None
        ),
    )
    try:
        yield tab
    finally:
        context.close()
    assert not errors, f"errors in the page: {errors}"


def shot(page: object, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))  # type: ignore[attr-defined]


# Helpers the browser test modules share.


def token(page: Any) -> str:
    """The session's JWT, as the web app keeps it."""
    value = page.evaluate("() => JSON.parse(sessionStorage.getItem('nodeloom.session')).token")
    return str(value)


def api(server: ServerProcess, credential: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{server.base_url}/api/v1",
        headers={"Authorization": f"Bearer {credential}"},
        timeout=10,
    )


def open_new_workflow(
    page: Any, server: ServerProcess, name: str, graph: dict[str, Any], first: str
) -> str:
    """The id of a workflow made over the API from ``graph``, opened in the editor of a
    1400x900 page once node ``first`` is drawn."""
    with api(server, token(page)) as client:
        wf = str(client.post("/workflows", json={"name": name, "graph_json": graph}).json()["id"])
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"/workflows/{wf}")
    page.locator(f'.nl-node[data-node-id="{first}"]').wait_for()
    return wf


def node(page: Any, title: str) -> Any:
    """A node on the canvas, by its type's title."""
    return page.get_by_role("group", name=title, exact=True)


def drag(page: Any, start: Any, end: Any) -> None:
    """Press on the middle of ``start`` (a locator, e.g. an output handle), move slowly and
    release on the middle of ``end`` (an input handle): how a user draws an edge."""
    a, b = start.bounding_box(), end.bounding_box()
    assert a is not None and b is not None
    page.mouse.move(a["x"] + a["width"] / 2, a["y"] + a["height"] / 2)
    page.mouse.down()
    page.mouse.move(b["x"] + b["width"] / 2, b["y"] + b["height"] / 2, steps=12)
    page.mouse.up()


def wait_for_run(client: httpx.Client, workflow: str, run: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        body: dict[str, Any] = client.get(f"/workflows/{workflow}/runs/{run}").json()
        if body["status"] not in ("pending", "running") or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def enter(page: Any, email: str, password: str, button: str = "Log in") -> None:
    """Sign up (on a fresh server, from ``/``) or log in, then wait for the workflows page."""
    page.goto("/login" if button == "Log in" else "/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name=button, exact=True).click()
    page.get_by_role("heading", name="Workflows").wait_for()


def new_tab(browser: Any, server: ServerProcess, errors: list[str], **context: Any) -> Any:
    """A tab in a context of its own (another screen size, another server), whose uncaught
    script errors are collected in ``errors``."""
    made = browser.new_context(base_url=server.base_url, **context)
    made.set_default_timeout(15_000)
    tab = made.new_page()
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    return tab
