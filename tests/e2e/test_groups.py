"""Issue 37 item 21, in a real browser against a real server: two nodes are selected and
grouped with Ctrl+G; the group is titled, moved (its nodes move with it), saved as a node of
type Group with the nodes naming it in parentId, and is there with its nodes after a reload;
a run of the workflow completes without running the group."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import api, enter, open_new_workflow, shot, token, wait_for_run
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "groups@example.com"
PASSWORD = "a long password"


def box(page: Page, selector: str) -> dict[str, float]:
    found = page.locator(selector).bounding_box()
    assert found is not None, selector
    return found


def test_nodes_are_grouped_saved_and_run(page: Page, server: ServerProcess) -> None:
    enter(page, EMAIL, PASSWORD, "Sign up")
    graph = {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0},
             "data": {"text": "fox"}},
            {"id": "tpl", "type": "TextTemplate", "position": {"x": 320, "y": 0},
             "data": {"template": "a {{ text }}"}},
        ],
        "edges": [{"id": "in->tpl", "source": "in", "target": "tpl"}],
        "viewport": {"x": 80, "y": 160, "zoom": 1},
    }  # fmt: skip
    wf = open_new_workflow(page, server, "Groups", graph, "in")

    page.locator('.nl-node[data-node-id="in"] header').click()
    page.locator('.nl-node[data-node-id="tpl"] header').click(modifiers=["Control"])
    page.keyboard.press("Control+g")
    group = page.locator('.nl-group[data-node-id="Group_1"]')
    expect(group).to_be_visible()
    title = group.get_by_label("Group title")
    title.fill("Prompt stage")
    # Typing in the title is not an editor shortcut (Backspace does not delete the group).
    title.press("Backspace")
    expect(title).to_have_value("Prompt stag")

    # Moving the group by its frame moves the nodes in it.
    before = box(page, '.nl-node[data-node-id="tpl"]')
    frame = box(page, '.nl-group[data-node-id="Group_1"]')
    page.mouse.move(frame["x"] + frame["width"] - 12, frame["y"] + frame["height"] - 40)
    page.mouse.down()
    page.mouse.move(frame["x"] + frame["width"] + 40, frame["y"] + frame["height"] + 20, steps=8)
    page.mouse.up()
    after = box(page, '.nl-node[data-node-id="tpl"]')
    moved = box(page, '.nl-group[data-node-id="Group_1"]')
    shift = (round(moved["x"] - frame["x"]), round(moved["y"] - frame["y"]))
    assert shift[0] > 20 and shift[1] > 20, shift
    assert (round(after["x"] - before["x"]), round(after["y"] - before["y"])) == shift
    shot(page, "91-editor-group")
    page.keyboard.press("Control+s")
    expect(page.get_by_test_id("save-state")).to_contain_text("All changes saved · version 2")

    with api(server, token(page)) as client:
        saved = client.get(f"/workflows/{wf}").json()
        nodes = {n["id"]: n for n in saved["graph_json"]["nodes"]}
        assert nodes["Group_1"]["type"] == "Group"
        assert nodes["Group_1"]["data"] == {"label": "Prompt stag"}
        assert nodes["in"]["parentId"] == nodes["tpl"]["parentId"] == "Group_1"
        assert saved["node_count"] == 2
        assert saved.get("warnings", []) == []

    # Opened again, the group is there, titled, around its nodes.
    page.reload()
    group = page.locator('.nl-group[data-node-id="Group_1"]')
    expect(group.get_by_label("Group title")).to_have_value("Prompt stag")
    frame = box(page, '.nl-group[data-node-id="Group_1"]')
    for member in ("in", "tpl"):
        inner = box(page, f'.nl-node[data-node-id="{member}"]')
        assert frame["x"] < inner["x"] and inner["x"] + inner["width"] < frame["x"] + frame["width"]
        assert (
            frame["y"] < inner["y"] and inner["y"] + inner["height"] < frame["y"] + frame["height"]
        )

    with api(server, token(page)) as client:
        run_id = client.post(f"/workflows/{wf}/execute", json={}).json()["run_id"]
        run = wait_for_run(client, wf, run_id)
        assert run["status"] == "completed", run
        assert sorted(nr["node_id"] for nr in run["node_runs"]) == ["in", "tpl"]

    # Ungroup keeps the nodes where they are.
    before = box(page, '.nl-node[data-node-id="tpl"]')
    group.get_by_role("button", name="Ungroup").click()
    expect(page.locator(".nl-group")).to_have_count(0)
    after = box(page, '.nl-node[data-node-id="tpl"]')
    assert (round(after["x"]), round(after["y"])) == (round(before["x"]), round(before["y"]))

    # Deleting a group keeps its nodes, where they are, and their edge.
    page.locator('.nl-node[data-node-id="in"] header').click()
    page.locator('.nl-node[data-node-id="tpl"] header').click(modifiers=["Control"])
    page.get_by_role("toolbar", name="Editor").get_by_role("button", name="Group").click()
    expect(page.locator(".nl-group")).to_have_count(1)
    expect(page.get_by_role("complementary", name="Details")).to_contain_text("Group")
    page.keyboard.press("Delete")
    expect(page.locator(".nl-group")).to_have_count(0)
    expect(page.locator(".nl-node")).to_have_count(2)
    expect(page.locator(".react-flow__edge")).to_have_count(1)
    kept = box(page, '.nl-node[data-node-id="tpl"]')
    assert (round(kept["x"]), round(kept["y"])) == (round(after["x"]), round(after["y"]))
