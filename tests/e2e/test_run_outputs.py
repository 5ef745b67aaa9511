"""Issue 37 item 19, in a real browser against a real server: after a run, previews stay
thumbnails (the cards do not run into the node below), the toolbar keeps its layout, the
overview does not cover nodes and can be hidden, outputs are marked stale after a param edit
of their node or one upstream, and the run page shows the run's outputs first with long text
folded behind "Expand"."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import api, enter, shot, token
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Locator, Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "outputs@example.com"
PASSWORD = "a long password"
LONG = "{% for i in range(40) %}line {{ i }}: {{ text }}\n{% endfor %}"


def graph() -> dict[str, Any]:
    """`in` feeds two outputs: `long` (40 lines of text) and, below it, `tail`."""
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {"text": "hi"}},
            {"id": "long", "type": "TextTemplate", "position": {"x": 320, "y": 0},
             "data": {"template": LONG}},
            {"id": "tail", "type": "TextTemplate", "position": {"x": 320, "y": 240},
             "data": {"template": "{{ text }}!"}},
        ],
        "edges": [
            {"id": "e1", "source": "in", "target": "long"},
            {"id": "e2", "source": "in", "target": "tail"},
        ],
        "viewport": {"x": 40, "y": 60, "zoom": 1},
    }  # fmt: skip


def card(page: Page, node_id: str) -> Locator:
    return page.locator(f'.nl-node[data-node-id="{node_id}"]')


def box(locator: Locator) -> dict[str, float]:
    found = locator.bounding_box()
    assert found is not None
    return found


def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


def test_outputs_after_a_run(page: Page, server: ServerProcess) -> None:
    enter(page, EMAIL, PASSWORD, "Sign up")
    with api(server, token(page)) as client:
        made = client.post("/workflows", json={"name": "Outputs", "graph_json": graph()})
        assert made.status_code == 201, made.text
        wf = made.json()["id"]
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"/workflows/{wf}")
    toolbar = page.get_by_role("toolbar", name="Editor")
    run_button = toolbar.get_by_role("button", name="Run", exact=True)
    expect(toolbar).to_contain_text("Not run yet")
    expect(toolbar.get_by_role("button", name="Run again")).to_be_disabled()
    before, run_at = box(toolbar), box(run_button)

    run_button.click()
    page.get_by_role("dialog").get_by_role("button", name="Start run").click()
    for node_id in ("in", "long", "tail"):
        expect(card(page, node_id)).to_have_attribute("data-status", "completed")
    expect(card(page, "long").locator("pre")).to_contain_text("line 0: hi")
    expect(toolbar.get_by_role("button", name="Run again")).to_be_enabled()

    # The toolbar did not change rows, and Run stayed where it was.
    after = box(toolbar)
    assert after["height"] == before["height"], (before, after)
    assert box(run_button) == run_at
    # The 40-line preview is a thumbnail: the card does not reach the node below it.
    assert box(card(page, "long"))["height"] <= 220
    assert not overlaps(box(card(page, "long")), box(card(page, "tail")))
    shot(page, "40-editor-after-run-1400")

    # Fitted into view, no node lies under the overview; and it can be hidden.
    toolbar.get_by_role("button", name="Fit view").click()
    page.wait_for_timeout(400)
    minimap = page.locator(".react-flow__minimap")
    for node_id in ("in", "long", "tail"):
        assert not overlaps(box(minimap), box(card(page, node_id))), node_id
    page.get_by_role("button", name="Hide overview").click()
    expect(minimap).to_have_count(0)
    page.get_by_role("button", name="Show overview").click()
    expect(minimap).to_be_visible()

    # The selected node's output in full, in the side panel.
    details = page.get_by_role("complementary", name="Details")
    card(page, "tail").locator("header").click()
    output = details.get_by_role("region", name="Output")
    expect(output).to_contain_text("hi!")

    # A param edit marks that node's output stale, and only it; undo clears the mark.
    details.get_by_label("Template", exact=True).fill("{{ text }}?")
    expect(card(page, "tail")).to_have_attribute("data-stale", "true")
    expect(card(page, "tail")).to_contain_text("Stale: changed since this run")
    expect(output).to_contain_text("Output (stale)")
    expect(card(page, "long")).not_to_have_attribute("data-stale", "true")
    page.keyboard.press("Control+z")
    expect(card(page, "tail")).not_to_have_attribute("data-stale", "true")
    # An upstream edit marks everything downstream of it.
    card(page, "in").locator("header").click()
    details.get_by_label("Text", exact=True).fill("changed")
    for node_id in ("in", "long", "tail"):
        expect(card(page, node_id)).to_have_attribute("data-stale", "true")
    shot(page, "41-editor-stale-outputs-1400")
    page.keyboard.press("Control+s")
    expect(page.get_by_test_id("save-state")).to_contain_text("All changes saved")
    # Opened again, the newest run (of version 1) is compared with its own version's graph.
    page.reload()
    for node_id in ("in", "long", "tail"):
        expect(card(page, node_id)).to_have_attribute("data-stale", "true")

    # The run page: the outputs first, long text folded behind "Expand".
    toolbar.get_by_role("link", name="Run page").click()
    outputs = page.get_by_role("list", name="Outputs")
    expect(outputs.locator("li[data-node-id]")).to_have_count(2)
    expect(outputs.locator('li[data-node-id="long"]')).to_be_visible()
    expect(outputs.locator('li[data-node-id="tail"]')).to_contain_text("hi!")
    others = page.get_by_role("list", name="Nodes")
    expect(others.locator("li[data-node-id]")).to_have_count(1)
    expect(others.locator('li[data-node-id="in"]')).to_be_visible()
    long_text = outputs.locator('li[data-node-id="long"] pre')
    expect(long_text).to_have_class("long-text folded")
    folded = box(long_text)["height"]
    expand = outputs.get_by_role("button", name="Expand")
    expect(expand).to_have_attribute("aria-expanded", "false")
    shot(page, "42-run-page-outputs-1400")
    expand.click()
    expect(outputs.get_by_role("button", name="Collapse")).to_have_attribute(
        "aria-expanded", "true"
    )
    expect(long_text).to_contain_text("line 39: hi")
    assert box(long_text)["height"] > folded * 2
