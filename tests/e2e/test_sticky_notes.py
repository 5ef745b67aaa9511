"""Issue 37 item 21, in a real browser against a real server: a sticky note is added from the
palette, written on, saved in the graph as a node of type Note, and a run of the workflow
neither runs it nor lists it; the run page's outputs do not include it."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import api, enter, open_new_workflow, shot, token, wait_for_run
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "notes@example.com"
PASSWORD = "a long password"


def test_a_sticky_note_is_saved_and_never_run(page: Page, server: ServerProcess) -> None:
    enter(page, EMAIL, PASSWORD, "Sign up")
    graph = {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0},
             "data": {"text": "fox"}},
        ],
        "edges": [],
        "viewport": {"x": 40, "y": 80, "zoom": 1},
    }  # fmt: skip
    wf = open_new_workflow(page, server, "Notes", graph, "in")

    page.get_by_role("button", name="Add a sticky note").click()
    note = page.get_by_role("group", name="Note")
    expect(note).to_be_visible()
    text = note.get_by_label("Note text")
    text.fill("The prompt goes in the Text input.")
    # Typing in a note is not an editor shortcut (Backspace does not delete the note).
    text.press("Backspace")
    expect(note).to_be_visible()
    expect(page.get_by_role("complementary", name="Details")).to_contain_text("Sticky note")
    shot(page, "90-editor-sticky-note")
    page.keyboard.press("Control+s")
    expect(page.get_by_test_id("save-state")).to_contain_text("All changes saved · version 2")

    with api(server, token(page)) as client:
        saved = client.get(f"/workflows/{wf}").json()
        notes = [n for n in saved["graph_json"]["nodes"] if n["type"] == "Note"]
        assert [n["data"]["text"] for n in notes] == ["The prompt goes in the Text input"]
        assert saved.get("warnings", []) == []
        run_id = client.post(f"/workflows/{wf}/execute", json={}).json()["run_id"]
        run = wait_for_run(client, wf, run_id)
        assert run["status"] == "completed", run
        assert [nr["node_id"] for nr in run["node_runs"]] == ["in"]

    page.goto(f"/workflows/{wf}/runs/{run_id}")
    outputs = page.get_by_role("list", name="Outputs")
    expect(outputs.locator("li[data-node-id]")).to_have_count(1)
    expect(outputs.locator('li[data-node-id="in"]')).to_contain_text("fox")
    # Opened again, the note is where it was, with its text.
    page.goto(f"/workflows/{wf}")
    expect(page.get_by_label("Note text")).to_have_value("The prompt goes in the Text input")
