"""The "Needs approval" inbox: a run waiting at an Approval node shows in the nav's badge and
in the inbox with its upstream text; approving there with an edited text and a comment sends
the run on down ``approved``, and the inbox empties."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import api, enter, shot, token, wait_for_run
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "inbox@example.com"
PASSWORD = "a long password"


@pytest.fixture(scope="module")
def signed_up(page: Page) -> Page:
    enter(page, EMAIL, PASSWORD, "Sign up")
    return page


def test_approve_from_the_inbox(signed_up: Page, server: ServerProcess) -> None:
    page = signed_up
    graph = {
        "nodes": [
            {
                "id": "in",
                "type": "TextInput",
                "position": {"x": 0, "y": 0},
                "data": {"text": "A draft script"},
            },
            {
                "id": "gate",
                "type": "Approval",
                "position": {"x": 300, "y": 0},
                "data": {"prompt": "Make the video from this script?", "allow_edit": True},
            },
            {
                "id": "made",
                "type": "TextTemplate",
                "position": {"x": 600, "y": 0},
                "data": {"template": "made: {{ text }}"},
            },
        ],
        "edges": [
            {"id": "e1", "source": "in", "target": "gate"},
            {"id": "e2", "source": "gate", "target": "made", "sourceHandle": "approved"},
        ],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }
    with api(server, token(page)) as client:
        made = client.post("/workflows", json={"name": "Gated video", "graph_json": graph})
        assert made.status_code == 201, made.text
        wf = made.json()["id"]
        run_id = client.post(f"/workflows/{wf}/execute", json={}).json()["run_id"]
        deadline = time.monotonic() + 20
        while client.get("/approvals").json()["count"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)

    page.goto("/workflows")
    inbox = page.get_by_role("link", name="Needs approval")
    expect(inbox.get_by_label("1 waiting")).to_be_visible()
    inbox.click()
    card = page.get_by_role("listitem", name="Approval of Gated video")
    expect(card).to_contain_text("Make the video from this script?")
    text = card.get_by_label("Text (edit before approving)")
    expect(text).to_have_value("A draft script")
    text.fill("The final script")
    card.get_by_label("Comment (optional)").fill("shorter is better")
    shot(page, "approvals-inbox")
    card.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Nothing is waiting.")).to_be_visible()
    expect(inbox.get_by_label("1 waiting")).to_have_count(0)

    with api(server, token(page)) as client:
        run = wait_for_run(client, wf, run_id)
        assert run["status"] == "completed", run
        node = next(n for n in run["node_runs"] if n["node_id"] == "made")
        assert client.get(f"/artifacts/{node['artifact_id']}").text == "made: The final script"
