"""An If node in the editor, in a real browser against a real server: its two outputs are
handles named ``true`` and ``false``; an edge drawn from one is labelled with its name; after
a run, the nodes on the branch not taken are skipped, greyed on the canvas and skipped on the
run page, while the branch taken completed."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import api, drag, enter, shot, token, wait_for_run
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Locator, Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "branches@example.com"
PASSWORD = "a long password"


def on_canvas(page: Page, node_id: str) -> Locator:
    return page.locator(f'.nl-node[data-node-id="{node_id}"]')


def test_an_if_routes_down_one_labelled_branch(page: Page, server: ServerProcess) -> None:
    enter(page, EMAIL, PASSWORD, "Sign up")
    graph = {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0},
             "data": {"text": "urgent: the fox is out"}},
            {"id": "if", "type": "If", "position": {"x": 260, "y": 0},
             "data": {"operator": "contains", "value": "urgent"}},
            {"id": "loud", "type": "TextTemplate", "position": {"x": 540, "y": -160},
             "data": {"label": "Loud", "template": "LOUD: {{ text }}"}},
            {"id": "quiet", "type": "TextTemplate", "position": {"x": 540, "y": 200},
             "data": {"label": "Quiet", "template": "quiet: {{ text }}"}},
            {"id": "twice", "type": "TextTemplate", "position": {"x": 820, "y": 200},
             "data": {"label": "Twice", "template": "{{ text }} {{ text }}"}},
        ],
        "edges": [
            {"id": "e1", "source": "in", "target": "if"},
            {"id": "e2", "source": "if", "sourceHandle": "true", "target": "loud"},
            {"id": "e3", "source": "quiet", "target": "twice"},
        ],
        "viewport": {"x": 30, "y": 260, "zoom": 0.7},
    }  # fmt: skip
    with api(server, token(page)) as client:
        made = client.post("/workflows", json={"name": "Branches", "graph_json": graph})
        assert made.status_code == 201, made.text
        wf = made.json()["id"]
    page.goto(f"/workflows/{wf}")
    decision = on_canvas(page, "if")
    decision.wait_for()

    # Two output handles, named on the node: true and false (and no plain output).
    outputs = decision.locator(".react-flow__handle.source")
    expect(outputs).to_have_count(2)
    expect(decision.get_by_label("true output (text)")).to_have_attribute("data-handleid", "true")
    expect(decision.get_by_label("false output (text)")).to_have_attribute("data-handleid", "false")
    expect(decision.locator(".port.out.branch")).to_have_text(["true", "false"])

    # The stored edge from `true` is labelled; one drawn from `false` is labelled too.
    true_edge = page.locator(".react-flow__edge.branch-edge.true")
    expect(true_edge.locator(".react-flow__edge-text")).to_have_text("true")
    drag(
        page,
        decision.locator('.react-flow__handle.source[data-handleid="false"]'),
        on_canvas(page, "quiet").locator('.react-flow__handle.target[data-handleid="text"]'),
    )
    false_edge = page.locator(".react-flow__edge.branch-edge.false")
    expect(false_edge.locator(".react-flow__edge-text")).to_have_text("false")
    page.keyboard.press("Control+s")
    expect(page.get_by_test_id("save-state")).to_contain_text("All changes saved · version 2")
    with api(server, token(page)) as client:
        edges = client.get(f"/workflows/{wf}").json()["graph_json"]["edges"]
        assert {(e["source"], e.get("sourceHandle"), e["target"]) for e in edges} >= {
            ("if", "true", "loud"),
            ("if", "false", "quiet"),
        }

    # The input says "urgent": the true branch runs, the false branch is skipped and greyed.
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_role("dialog").get_by_role("button", name="Start run").click()
    expect(on_canvas(page, "loud")).to_have_attribute("data-status", "completed")
    for skipped in ("quiet", "twice"):
        expect(on_canvas(page, skipped)).to_have_attribute("data-status", "skipped")
        expect(on_canvas(page, skipped)).to_have_css("opacity", "0.55")
    expect(on_canvas(page, "loud")).to_have_css("opacity", "1")
    expect(page.get_by_role("toolbar", name="Editor")).to_contain_text("Run completed")
    shot(page, "95-editor-if-branches")

    with api(server, token(page)) as client:
        runs = client.get(f"/workflows/{wf}/runs").json()
        run = wait_for_run(client, wf, runs[0]["id"])
    assert run["status"] == "completed", run
    statuses = {nr["node_id"]: nr["status"] for nr in run["node_runs"]}
    assert statuses == {
        "in": "completed",
        "if": "completed",
        "loud": "completed",
        "quiet": "skipped",
        "twice": "skipped",
    }

    page.goto(f"/workflows/{wf}/runs/{run['id']}")
    cards = page.locator("li.card[data-node-id]")
    expect(cards).to_have_count(5)
    for node_id, status in statuses.items():
        card = page.locator(f'li.card[data-node-id="{node_id}"]')
        expect(card.locator(".status").first).to_have_attribute("data-status", status)
    expect(page.locator('li.card[data-node-id="quiet"]')).to_have_css("opacity", "0.55")
    expect(page.locator('li.card[data-node-id="loud"]')).to_have_css("opacity", "1")
    shot(page, "96-run-if-branches")
