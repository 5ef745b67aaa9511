"""Issue 37 item 21, in a real browser against a real server: `?` in the editor opens the
keyboard shortcut sheet (not while typing in a field), Escape closes it; the theme follows
the system's prefers-color-scheme until the user picks one in the top bar, and the pick is
kept in this browser across reloads."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import api, enter, new_tab, shot, token
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "keys@example.com"
PASSWORD = "a long password"
DARK_BG = "rgb(18, 21, 27)"  # --bg of the dark theme
LIGHT_BG = "rgb(246, 247, 249)"


def theme(page: Page) -> Any:
    return page.evaluate("document.documentElement.dataset.theme")


def background(page: Page) -> Any:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


def test_the_shortcut_sheet_and_the_theme(page: Page, server: ServerProcess, browser: Any) -> None:
    enter(page, EMAIL, PASSWORD, "Sign up")
    graph = {
        "nodes": [{"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}}],
        "edges": [],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }
    with api(server, token(page)) as client:
        wf = client.post("/workflows", json={"name": "Keys", "graph_json": graph}).json()["id"]

    # `?` opens the sheet; Escape closes it; typed in a field, it is only a character.
    page.goto(f"/workflows/{wf}")
    page.locator('.nl-node[data-node-id="in"]').wait_for()
    sheet = page.get_by_role("dialog", name="Keyboard shortcuts")
    page.keyboard.press("?")
    expect(sheet).to_be_visible()
    expect(sheet).to_contain_text("Ctrl+S")
    expect(sheet).to_contain_text("Rename the node")
    shot(page, "80-editor-shortcut-sheet")
    page.keyboard.press("Escape")
    expect(sheet).to_be_hidden()
    name = page.get_by_label("Workflow name")
    name.click()
    name.press("End")
    name.press("?")
    expect(name).to_have_value("Keys?")
    expect(sheet).to_be_hidden()

    # The system's light scheme by default; a pick is shown at once and kept.
    assert theme(page) == "light" and background(page) == LIGHT_BG
    picker = page.get_by_label("Theme")
    picker.select_option("dark")
    assert theme(page) == "dark"
    expect(page.locator("body")).to_have_css("background-color", DARK_BG)
    page.reload()
    page.locator('.nl-node[data-node-id="in"]').wait_for()
    assert theme(page) == "dark" and background(page) == DARK_BG
    expect(page.get_by_label("Theme")).to_have_value("dark")
    shot(page, "81-editor-dark")
    page.get_by_label("Theme").select_option("system")
    assert theme(page) == "light"
    assert page.evaluate("localStorage.getItem('nodeloom.theme')") is None

    # A browser whose system prefers dark gets dark, with nothing chosen.
    errors: list[str] = []
    dark = new_tab(browser, server, errors, color_scheme="dark")
    try:
        enter(dark, EMAIL, PASSWORD, "Log in")
        assert theme(dark) == "dark" and background(dark) == DARK_BG
        expect(dark.get_by_label("Theme")).to_have_value("system")
    finally:
        dark.context.close()
    assert not errors
