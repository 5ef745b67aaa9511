"""Issue 37 item 20, in a real browser against a real server: a node is renamed by a
double-click on its header or in the side panel's Name field (a name the server would refuse
is shown as a problem and not kept), the name is saved as the node's data.label, the History
panel shows the rename, and the run page names the node by it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import api, enter, shot, token, wait_for_run
from tests.e2e.test_run_outputs import card
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "labels@example.com"
PASSWORD = "a long password"


def graph() -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {"text": "w"}},
            {"id": "tpl", "type": "TextTemplate", "position": {"x": 320, "y": 0},
             "data": {"template": "Hello {{ text }}"}},
        ],
        "edges": [{"id": "e1", "source": "in", "target": "tpl"}],
        "viewport": {"x": 40, "y": 80, "zoom": 1},
    }  # fmt: skip


def test_a_node_is_renamed_and_named_everywhere(page: Page, server: ServerProcess) -> None:
    enter(page, EMAIL, PASSWORD, "Sign up")
    with api(server, token(page)) as client:
        made = client.post("/workflows", json={"name": "Labels", "graph_json": graph()})
        assert made.status_code == 201, made.text
        wf = made.json()["id"]
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"/workflows/{wf}")

    # A double-click on the header names the node; Escape would have left it as it was.
    card(page, "tpl").locator("header").dblclick()
    name = card(page, "tpl").get_by_label("Node name")
    name.fill("Greeting")
    name.press("Enter")
    expect(card(page, "tpl").locator("header")).to_contain_text("Greeting")
    expect(page.get_by_role("group", name="Greeting: Text template")).to_be_visible()

    # The side panel's Name field: a name the server would refuse is not kept.
    card(page, "in").locator("header").click()
    details = page.get_by_role("complementary", name="Details")
    field = details.get_by_label("Name", exact=True)
    field.fill("two\u0007bells")
    expect(details.get_by_role("alert")).to_contain_text("one line")
    field.fill("Who to greet")
    expect(card(page, "in").locator("header")).to_contain_text("Who to greet")
    shot(page, "70-editor-node-names-1400")
    page.keyboard.press("Control+s")
    expect(page.get_by_test_id("save-state")).to_contain_text("version 2")

    with api(server, token(page)) as client:
        saved = client.get(f"/workflows/{wf}").json()["graph_json"]
        labels = {n["id"]: n["data"].get("label") for n in saved["nodes"]}
        assert labels == {"in": "Who to greet", "tpl": "Greeting"}
        run = client.post(f"/workflows/{wf}/execute", json={}).json()["run_id"]
        assert wait_for_run(client, wf, run)["status"] == "completed"

    # History: version 2 against version 1 shows the renames, not a changed param.
    page.get_by_role("button", name="History", exact=True).click()
    diff = page.get_by_test_id("version-diff")
    expect(diff).to_contain_text("renamed tpl → “Greeting”")
    expect(diff).to_contain_text("renamed in → “Who to greet”")
    expect(diff).not_to_contain_text("label:")

    # The run page names the nodes by their names, their ids beside them.
    page.goto(f"/workflows/{wf}/runs/{run}")
    expect(page.locator('li[data-node-id="tpl"]')).to_contain_text("Greeting")
    expect(page.locator('li[data-node-id="in"]')).to_contain_text("Who to greet")
    shot(page, "71-run-page-node-names-1400")
