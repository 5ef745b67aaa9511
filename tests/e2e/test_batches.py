"""Batches in the editor: while a ForEach's items run, the node after it shows how many are
done ("17/40"), and one item's output opens from the node (docs/batches.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.conftest import api, enter, new_tab, node, shot
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Browser, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

ITEMS = 40
GRAPH = {
    "nodes": [
        {
            "id": "in",
            "type": "TextInput",
            "position": {"x": 0, "y": 0},
            "data": {"text": "\n".join(f"line {i + 1}" for i in range(ITEMS))},
        },
        {
            "id": "each",
            "type": "ForEach",
            "position": {"x": 280, "y": 0},
            "data": {"concurrency": 4},
        },
        {"id": "wait", "type": "Delay", "position": {"x": 560, "y": 0}, "data": {"seconds": 0.5}},
        {"id": "all", "type": "Collect", "position": {"x": 840, "y": 0}, "data": {}},
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "each"},
        {"id": "e2", "source": "each", "target": "wait"},
        {"id": "e3", "source": "wait", "target": "all"},
    ],
    "viewport": {"x": 20, "y": 40, "zoom": 0.8},
}


def test_item_progress_on_the_node(browser: Browser, tmp_path: Path) -> None:
    errors: list[str] = []
    server = ServerProcess(tmp_path / "data")
    server.start()
    try:
        tab = new_tab(browser, server, errors, viewport={"width": 1400, "height": 900})
        enter(tab, "batch@example.com", "a long password", "Sign up")
        token = tab.evaluate("() => JSON.parse(sessionStorage.getItem('nodeloom.session')).token")
        with api(server, str(token)) as client:
            made = client.post("/workflows", json={"name": "Batch", "graph_json": GRAPH})
            assert made.status_code == 201, made.text
        tab.goto(f"/workflows/{made.json()['id']}")
        tab.get_by_role("button", name="Run", exact=True).click()
        tab.get_by_role("dialog").get_by_role("button", name="Start run").click()

        delay = node(tab, "Delay")
        done = delay.get_by_role("status", name="Items done")
        # Part of the way: some items done, not all (4 at a time, half a second each).
        expect(done).to_have_text(re.compile(rf"^([1-9]|[1-3][0-9])/{ITEMS}$"))
        expect(delay).to_have_attribute("data-status", "running")
        shot(tab, "60-editor-batch-progress")
        expect(node(tab, "For each")).to_contain_text(f"{ITEMS} items")

        expect(done).to_have_text(f"{ITEMS}/{ITEMS}", timeout=60_000)
        expect(delay).to_have_attribute("data-status", "completed")
        expect(node(tab, "Collect texts")).to_have_attribute("data-status", "completed")
        expect(tab.get_by_role("toolbar", name="Editor")).to_contain_text("Run completed")

        # One item's output, opened from the node.
        delay.get_by_label("Show item").select_option("16")
        expect(delay.locator(".preview")).to_contain_text("line 17")
        shot(tab, "61-editor-batch-item")

        # The run page lists the items under their node; an item's output loads when opened.
        tab.get_by_role("link", name="Run page").click()
        group = tab.locator('li[data-node-id="wait"][data-items]')
        expect(group.get_by_label("Items done")).to_have_text(f"{ITEMS}/{ITEMS} items")
        group.locator("summary").click()
        group.get_by_role("button", name="Show item 3", exact=True).click()
        expect(group.locator('li[data-item-index="2"] .preview')).to_contain_text("line 3")
        shot(tab, "62-run-page-batch-items")
    finally:
        server.stop()
    assert not errors, errors
