"""The run page's "Retry from failed node": one click on a cancelled run starts a retry that
reuses the completed nodes (shown cached, 0 credits) and runs the rest; each run page links
to the other."""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e.conftest import api, enter, shot, token, wait_for_run
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "retry@example.com"
PASSWORD = "a long password"


@pytest.fixture(scope="module")
def signed_up(page: Page) -> Page:
    """The server's first account, signed up once for the module's tests."""
    enter(page, EMAIL, PASSWORD, "Sign up")
    return page


def test_retry_a_cancelled_run_from_where_it_stopped(
    signed_up: Page, server: ServerProcess
) -> None:
    page = signed_up
    graph = {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {"text": "x"}},
            {
                "id": "a",
                "type": "TextTemplate",
                "position": {"x": 300, "y": 0},
                "data": {"template": "A {{ text }}"},
            },
            {"id": "wait", "type": "Delay", "position": {"x": 600, "y": 0}, "data": {"seconds": 3}},
        ],
        "edges": [
            {"id": "e1", "source": "in", "target": "a"},
            {"id": "e2", "source": "a", "target": "wait"},
        ],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }
    with api(server, token(page)) as client:
        made = client.post("/workflows", json={"name": "Retried", "graph_json": graph})
        assert made.status_code == 201, made.text
        wf = made.json()["id"]
        run_id = client.post(f"/workflows/{wf}/execute", json={}).json()["run_id"]
        deadline = time.monotonic() + 20
        while True:
            run = client.get(f"/workflows/{wf}/runs/{run_id}").json()
            waiting = next(nr for nr in run["node_runs"] if nr["node_id"] == "wait")
            if waiting["status"] == "running":
                break
            assert time.monotonic() < deadline, run
            time.sleep(0.05)
        assert client.post(f"/workflows/{wf}/runs/{run_id}/cancel").status_code == 202
        assert wait_for_run(client, wf, run_id)["status"] == "cancelled"

    page.goto(f"/workflows/{wf}/runs/{run_id}")
    retry = page.get_by_role("button", name="Retry from failed node")
    expect(retry).to_be_visible()
    shot(page, "retry-1-cancelled-run")
    retry.click()
    expect(page).not_to_have_url(re.compile(rf"/runs/{run_id}$"))
    new_id = page.url.rsplit("/", 1)[1]
    expect(page.get_by_label("Retries")).to_contain_text(f"Retry of run {run_id}")
    node_a = page.locator('[data-node-id="a"]')
    expect(node_a.locator(".status")).to_have_attribute("data-status", "cached")
    expect(node_a).to_contain_text("0 credits (cached: output reused)")
    wait = page.locator('[data-node-id="wait"]')
    expect(wait.locator(".status")).to_have_attribute("data-status", "completed", timeout=20_000)
    # A completed run has nothing to retry.
    expect(page.get_by_role("button", name="Retry from failed node")).to_have_count(0)
    shot(page, "retry-2-completed-retry")
    page.get_by_role("link", name=f"run {run_id}").click()
    expect(page.get_by_label("Retries")).to_contain_text(f"Retried as run {new_id}")


def fixable(template: str) -> dict[str, object]:
    """in -> a -> bad, where bad's template is ``template`` ("{{ 1/0 }}" fails)."""
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0},
             "data": {"text": "x"}},
            {"id": "a", "type": "TextTemplate", "position": {"x": 300, "y": 0},
             "data": {"template": "A {{ text }}"}},
            {"id": "bad", "type": "TextTemplate", "position": {"x": 600, "y": 0},
             "data": {"template": template}},
        ],
        "edges": [
            {"id": "e1", "source": "in", "target": "a"},
            {"id": "e2", "source": "a", "target": "bad"},
        ],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }  # fmt: skip


def failed_run(page: Page, server: ServerProcess, name: str) -> tuple[str, str]:
    """A workflow ``fixable("{{ 1/0 }}")`` named ``name`` and its failed run."""
    with api(server, token(page)) as client:
        made = client.post("/workflows", json={"name": name, "graph_json": fixable("{{ 1/0 }}")})
        wf = made.json()["id"]
        run_id = client.post(f"/workflows/{wf}/execute", json={}).json()["run_id"]
        assert wait_for_run(client, wf, run_id)["status"] == "failed"
    return str(wf), str(run_id)


def retried_with(page: Page, run_id: str, made: str) -> None:
    """The page moved to the retry of ``run_id``: node a reused, node bad made ``made``."""
    expect(page).not_to_have_url(re.compile(rf"/runs/{run_id}$"))
    expect(page.get_by_label("Retries")).to_contain_text(f"Retry of run {run_id}")
    node_a = page.locator('[data-node-id="a"]')
    expect(node_a.locator(".status")).to_have_attribute("data-status", "cached")
    bad = page.locator('[data-node-id="bad"]')
    expect(bad.locator(".status")).to_have_attribute("data-status", "completed", timeout=20_000)
    expect(bad).to_contain_text(made)


def test_retry_with_the_saved_workflow_runs_the_fix(signed_up: Page, server: ServerProcess) -> None:
    """The user fixes the failed node and saves; "Retry with the saved workflow" runs the fix
    and reuses the node that did not change."""
    page = signed_up

    wf, run_id = failed_run(page, server, "Fixed")
    with api(server, token(page)) as client:
        fixed = client.patch(f"/workflows/{wf}", json={"graph_json": fixable("fixed {{ text }}")})
        assert fixed.status_code == 200, fixed.text

    page.goto(f"/workflows/{wf}/runs/{run_id}")
    page.get_by_role("button", name="Retry with the saved workflow").click()
    retried_with(page, run_id, "fixed A x")
    shot(page, "retry-3-with-the-saved-workflow")


def test_the_editor_retries_its_failed_run_with_the_fix(
    signed_up: Page, server: ServerProcess
) -> None:
    """Issue 37 item 15: in the editor, after a run failed, the user fixes the failed node's
    param and presses "Retry with this version": the edit is saved, the run retried with it,
    the unchanged node reused (cached) and the fixed one completed."""
    page = signed_up
    wf, run_id = failed_run(page, server, "Editor retry")

    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"/workflows/{wf}")
    toolbar = page.get_by_role("toolbar", name="Editor")
    retry = toolbar.get_by_role("button", name="Retry with this version")
    expect(toolbar.get_by_test_id("run-state")).to_contain_text("failed")
    expect(retry).to_be_enabled()
    bad = page.locator('.nl-node[data-node-id="bad"]')
    expect(bad).to_have_attribute("data-status", "failed")
    bad.locator("header").click()
    page.get_by_role("complementary", name="Details").get_by_label("Template", exact=True).fill(
        "fixed {{ text }}"
    )
    retry.click()
    expect(bad).to_have_attribute("data-status", "completed", timeout=20_000)
    expect(page.locator('.nl-node[data-node-id="a"]')).to_have_attribute("data-cached", "true")
    expect(bad).to_contain_text("fixed A x")
    expect(page.get_by_test_id("save-state")).to_contain_text("All changes saved · version 2")
    # A completed run has nothing to retry.
    expect(retry).to_be_disabled()
    shot(page, "retry-4-editor-with-this-version")
    with api(server, token(page)) as client:
        runs = client.get(f"/workflows/{wf}/runs").json()
        newest = client.get(f"/workflows/{wf}/runs/{runs[0]['id']}").json()
        assert newest["retried_from"] == run_id and newest["status"] == "completed", newest


def test_the_run_page_retries_with_changed_params(signed_up: Page, server: ServerProcess) -> None:
    """Issue 37 item 15: on a failed run's page, "Change params and retry" opens the failed
    node's params as the run used them; one edited param and the retry runs it, reusing the
    node before it. The saved workflow is not changed."""
    page = signed_up
    wf, run_id = failed_run(page, server, "Params retry")

    page.goto(f"/workflows/{wf}/runs/{run_id}")
    page.get_by_text("Change params and retry").click()
    expect(page.get_by_label("Node", exact=True)).to_have_value("bad")
    template = page.get_by_label("Template", exact=True)
    expect(template).to_have_value("{{ 1/0 }}")
    retry = page.get_by_role("button", name="Retry with 0 changed params")
    expect(retry).to_be_disabled()
    template.fill("mended {{ text }}")
    page.get_by_role("button", name="Retry with 1 changed param").click()
    retried_with(page, run_id, "mended A x")
    shot(page, "retry-5-run-page-changed-params")
    with api(server, token(page)) as client:
        saved = client.get(f"/workflows/{wf}").json()["graph_json"]
        assert saved["nodes"][2]["data"]["template"] == "{{ 1/0 }}"
