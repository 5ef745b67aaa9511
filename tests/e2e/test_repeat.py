"""Repeat loops in the editor: while a Repeat region runs, its nodes show which iteration
the run is at of the most allowed ("iteration 2/5"), and the run page lists each
iteration's node runs under their node (docs/repeat.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.conftest import api, enter, new_tab, node, shot
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Browser, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses


def _node(node_id: str, type_: str, x: int, **data: object) -> dict[str, object]:
    return {"id": node_id, "type": type_, "position": {"x": x, "y": 0}, "data": data}


# a -> ax -> axx -> axxx: the Until holds at iteration 3 of at most 5.
GRAPH = {
    "nodes": [
        _node("in", "TextInput", 0, text="a"),
        _node("rep", "Repeat", 260, max_iterations=5),
        _node("grow", "TextTemplate", 520, template="{{ text }}x"),
        _node("wait", "Delay", 780, seconds=0.8),
        _node("until", "Until", 1040, operator="contains", value="xxx"),
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "rep"},
        {"id": "e2", "source": "rep", "target": "grow"},
        {"id": "e3", "source": "grow", "target": "wait"},
        {"id": "e4", "source": "wait", "target": "until"},
    ],
    "viewport": {"x": 20, "y": 40, "zoom": 0.7},
}


def test_iteration_progress_on_the_node_and_the_run_page(browser: Browser, tmp_path: Path) -> None:
    errors: list[str] = []
    server = ServerProcess(tmp_path / "data")
    server.start()
    try:
        tab = new_tab(browser, server, errors, viewport={"width": 1500, "height": 900})
        enter(tab, "loop@example.com", "a long password", "Sign up")
        token = tab.evaluate("() => JSON.parse(sessionStorage.getItem('nodeloom.session')).token")
        with api(server, str(token)) as client:
            made = client.post("/workflows", json={"name": "Loop", "graph_json": GRAPH})
            assert made.status_code == 201, made.text
        tab.goto(f"/workflows/{made.json()['id']}")
        tab.get_by_role("button", name="Run", exact=True).click()
        tab.get_by_role("dialog").get_by_role("button", name="Start run").click()

        delay = node(tab, "Delay")
        iteration = delay.get_by_role("status", name="Iteration")
        # Part of the way: iteration 2 of at most 5 while its Delay runs.
        expect(iteration).to_have_text("iteration 2/5", timeout=30_000)
        expect(delay).to_have_attribute("data-status", "running")
        shot(tab, "62-editor-repeat-progress")

        expect(iteration).to_have_text("iteration 3/5", timeout=30_000)
        expect(tab.get_by_role("toolbar", name="Editor")).to_contain_text(
            "Run completed", timeout=30_000
        )
        expect(delay).to_have_attribute("data-status", "completed")
        expect(node(tab, "Until")).to_have_attribute("data-status", "completed")

        # One iteration's output, opened from the node.
        grow = node(tab, "Text template")
        grow.get_by_label("Show iteration").select_option("1")
        expect(grow.locator(".preview")).to_contain_text("axx")

        # The run page lists the iterations under their node.
        tab.get_by_role("link", name="Run page").click()
        group = tab.locator('li[data-node-id="grow"][data-items]')
        expect(group.get_by_label("Iteration")).to_have_text("iteration 3/5")
        group.locator("summary").click()
        rows = group.locator("li[data-item-index]")
        expect(rows).to_have_count(3)
        expect(rows.nth(2)).to_contain_text(re.compile(r"Iteration 3"))
        rows.nth(2).get_by_role("button", name="Show iteration 3").click()
        expect(rows.nth(2)).to_contain_text("axxx")
        events = tab.get_by_role("list", name="Run events")
        expect(events).to_contain_text("node.completed grow iteration 3")
        shot(tab, "63-run-page-repeat-iterations")
        assert errors == []
    finally:
        server.stop()
