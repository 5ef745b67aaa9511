"""What a new user stumbled on in the web app, each checked in a real browser against a real
server: templates on the empty workflows page, an imported graph opened in view, leaving with
unsaved changes, handles turning red while a connection is dragged, the quick-add menu and
search aliases, previews that leave handles usable, run again with and without the cache,
TextInput's form, save warnings, and the editor on a phone (390 x 844)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import api as api_client
from tests.e2e.conftest import node, shot, token, wait_for_run
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Browser, Locator, Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "new-user@example.com"
PASSWORD = "a long password"


def api(server: ServerProcess, page: Page) -> httpx.Client:
    return api_client(server, token(page))


def centre(box: dict[str, float] | None) -> tuple[float, float]:
    assert box is not None
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def handle(page: Page, title: str, handle_id: str) -> Locator:
    return node(page, title).locator(f'.react-flow__handle[data-handleid="{handle_id}"]')


def make_workflow(client: httpx.Client, name: str, graph: dict[str, Any]) -> str:
    made = client.post("/workflows", json={"name": name, "graph_json": graph})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def log_in(page: Page) -> None:
    page.goto("/login")
    page.get_by_label("Email").fill(EMAIL)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in", exact=True).click()
    expect(page.get_by_role("heading", name="Workflows")).to_be_visible()


def text_and_image_graph() -> dict[str, Any]:
    """A valid graph (every required input connected) with text and image inputs."""
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
            {
                "id": "card",
                "type": "RenderText",
                "position": {"x": 300, "y": 0},
                "data": {"width": 320, "height": 180},
            },
            {"id": "small", "type": "ImageResize", "position": {"x": 600, "y": 0}, "data": {}},
            {"id": "join", "type": "TextJoin", "position": {"x": 300, "y": 200}, "data": {}},
        ],
        "edges": [
            {"id": "e1", "source": "in", "target": "card"},
            {"id": "e2", "source": "card", "target": "small"},
            {"id": "e3", "source": "in", "target": "join"},
        ],
        "viewport": {"x": 40, "y": 80, "zoom": 1},
    }


class TestFirstSteps:
    def test_templates_on_the_empty_workflows_page(self, page: Page) -> None:
        page.goto("/")
        page.get_by_label("Email").fill(EMAIL)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign up", exact=True).click()
        expect(page.get_by_role("heading", name="Workflows")).to_be_visible()
        templates = page.get_by_role("region", name="Start from a template")
        expect(templates.get_by_role("heading", name="Narrated video")).to_be_visible()
        expect(templates.get_by_role("listitem")).to_have_count(
            len(list((Path(__file__).parents[2] / "examples").glob("*.json")))
        )
        page.set_viewport_size({"width": 1280, "height": 900})
        shot(page, "20-workflows-templates-1280")

        page.get_by_role("button", name="Use template Greeting").click()
        # Opened fitted: both nodes on screen.
        for title in ("Text input", "Text template"):
            expect(node(page, title)).to_be_in_viewport()
        expect(page.get_by_role("textbox", name="Workflow name")).to_have_value("Greeting")

        # TextInput's form: Text first, then Key.
        node(page, "Text input").locator("header").click()
        labels = page.get_by_role("complementary", name="Details").locator(".field > label")
        expect(labels.first).to_have_text("Text")
        assert labels.all_inner_texts()[:2] == ["Text", "Key"]

    def test_run_again_with_and_without_the_cache(self, page: Page, server: ServerProcess) -> None:
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_role("dialog").get_by_role("button", name="Start run").click()
        expect(node(page, "Text template")).to_have_attribute("data-status", "completed")
        toolbar = page.get_by_role("toolbar", name="Editor")

        # Run again from the editor: same input, outputs from the cache, said so.
        toolbar.get_by_role("button", name="Run again").click()
        expect(node(page, "Text template")).to_have_attribute("data-cached", "true")
        expect(node(page, "Text template")).to_contain_text("Cached: 0 credits")
        expect(toolbar).to_contain_text("0 credits · 2 nodes cached")
        shot(page, "21-editor-run-again-cached-1280")

        toolbar.get_by_role("button", name="Run without cache").click()
        expect(node(page, "Text template")).not_to_have_attribute("data-cached", "true")
        expect(node(page, "Text template")).to_have_attribute("data-status", "completed")
        with api(server, page) as client:
            wf = client.get("/workflows").json()[0]["id"]
            runs = client.get(f"/workflows/{wf}/runs").json()
            assert len(runs) == 3
            newest = wait_for_run(client, wf, runs[0]["id"])
            again = wait_for_run(client, wf, runs[1]["id"])
        tpl = {n["node_id"]: n for n in newest["node_runs"]}["tpl"]
        assert tpl["cached"] is False and tpl["credits_used"] > 0
        assert {n["node_id"]: n for n in again["node_runs"]}["tpl"]["cached"] is True

        # And from the run page: "Run again" opens the new run, whose cached node says so.
        toolbar.get_by_role("link", name="Run page").click()
        expect(page.get_by_role("list", name="Run events")).to_contain_text("run.completed")
        shot(page, "22-run-page-1280")
        first_url = page.url
        page.get_by_role("button", name="Run again").click()
        expect(page).not_to_have_url(first_url)
        expect(page.get_by_role("list", name="Run events")).to_contain_text("run.completed")
        expect(page.locator('[data-node-id="tpl"]')).to_contain_text("cached: output reused")
        page.get_by_role("button", name="Run without cache").click()
        expect(page.get_by_role("list", name="Run events")).to_contain_text("run.completed")
        expect(page.locator('[data-node-id="tpl"]')).not_to_contain_text("cached")
        with api(server, page) as client:
            runs = client.get(f"/workflows/{wf}/runs").json()
            assert len(runs) == 5
            newest = wait_for_run(client, wf, runs[0]["id"])
            again = wait_for_run(client, wf, runs[1]["id"])
        assert {n["node_id"]: n for n in newest["node_runs"]}["tpl"]["cached"] is False
        assert {n["node_id"]: n for n in again["node_runs"]}["tpl"]["cached"] is True

    def test_an_imported_graph_opens_in_view(self, page: Page, tmp_path: Path) -> None:
        far = text_and_image_graph()
        for n in far["nodes"]:
            n["position"] = {"x": n["position"]["x"] + 6000, "y": 4000}
        far["viewport"] = {"x": 0, "y": 0, "zoom": 1}
        path = tmp_path / "far-away.json"
        path.write_text(json.dumps({"name": "Far away", "graph_json": far}))
        page.goto("/workflows")
        page.get_by_label("Import a workflow from a JSON file").set_input_files(path)
        expect(page.get_by_role("textbox", name="Workflow name")).to_have_value("Far away")
        for title in ("Text input", "Render text", "Resize image", "Join texts"):
            expect(node(page, title)).to_be_in_viewport()


class TestEditing:
    def test_leaving_with_unsaved_changes_asks_first(
        self, page: Page, server: ServerProcess
    ) -> None:
        with api(server, page) as client:
            wf = make_workflow(client, "Unsaved", text_and_image_graph())
        page.goto(f"/workflows/{wf}")
        expect(node(page, "Render text")).to_be_visible()
        page.get_by_role("button", name="Add Tone or silence", exact=True).click()
        expect(node(page, "Tone or silence")).to_be_visible()

        page.get_by_role("link", name="Workflows", exact=True).click()
        leave = page.get_by_role("dialog", name="Leave without saving?")
        expect(leave).to_be_visible()
        shot(page, "23-editor-leave-dialog-1280")
        leave.get_by_role("button", name="Stay").click()
        expect(leave).to_be_hidden()
        expect(node(page, "Tone or silence")).to_be_visible()

        # Closing or reloading the tab gets the browser's own question.
        asked: list[str] = []

        def answer(dialog: Any) -> None:
            asked.append(dialog.type)
            dialog.dismiss()

        page.on("dialog", answer)
        try:
            page.reload(timeout=3000)
        except Exception:  # staying on the page aborts the reload
            pass
        finally:
            page.remove_listener("dialog", answer)
        assert asked == ["beforeunload"]
        expect(node(page, "Tone or silence")).to_be_visible()

        page.get_by_role("link", name="Workflows", exact=True).click()
        leave.get_by_role("button", name="Save and leave").click()
        expect(page.get_by_role("heading", name="Workflows")).to_be_visible()
        with api(server, page) as client:
            types = [
                n["type"] for n in client.get(f"/workflows/{wf}").json()["graph_json"]["nodes"]
            ]
        assert "ToneGenerator" in types

        # Saved: nothing is asked.
        page.goto(f"/workflows/{wf}")
        expect(node(page, "Tone or silence")).to_be_visible()
        page.get_by_role("link", name="Workflows", exact=True).click()
        expect(page.get_by_role("heading", name="Workflows")).to_be_visible()

    def test_refused_handles_turn_red_while_dragging(
        self, page: Page, server: ServerProcess
    ) -> None:
        with api(server, page) as client:
            wf = make_workflow(client, "Kinds", text_and_image_graph())
        page.goto(f"/workflows/{wf}")
        expect(node(page, "Render text")).to_be_visible()
        page.mouse.move(*centre(handle(page, "Text input", "output").bounding_box()))
        page.mouse.down()
        x, y = centre(handle(page, "Resize image", "image").bounding_box())
        page.mouse.move(x - 40, y + 30, steps=8)
        image = handle(page, "Resize image", "image")
        refused = re.compile(r"\brefused\b")
        expect(image).to_have_class(refused)  # takes image, not text
        expect(handle(page, "Render text", "text")).to_have_class(refused)  # already taken
        expect(handle(page, "Join texts", "texts")).not_to_have_class(refused)  # several allowed
        red = image.evaluate("h => getComputedStyle(h).backgroundColor")
        danger = page.evaluate(
            "() => { const d = document.createElement('div');"
            " d.style.color = 'var(--danger)'; document.body.append(d);"
            " const c = getComputedStyle(d).color; d.remove(); return c; }"
        )
        assert red == danger
        shot(page, "24-editor-refused-handles-1280")
        page.mouse.move(x, y, steps=4)
        page.mouse.up()
        expect(page.locator(".react-flow__edge")).to_have_count(3)
        expect(page.locator(".react-flow__handle.refused")).to_have_count(0)

    def test_quick_add_and_search_aliases(self, page: Page, server: ServerProcess) -> None:
        with api(server, page) as client:
            wf = make_workflow(client, "Quick add", text_and_image_graph())
        page.goto(f"/workflows/{wf}")
        expect(node(page, "Render text")).to_be_visible()

        palette = page.get_by_role("complementary", name="Node palette")
        for query, title in (("tts", "Text to speech"), ("wait", "Delay"), ("llm", "LLM text")):
            palette.get_by_role("searchbox").fill(query)
            expect(palette.locator(".palette-item").first).to_have_accessible_name(f"Add {title}")
        palette.get_by_role("searchbox").fill("img")
        expect(palette.get_by_role("button", name="Add Resize image")).to_be_visible()
        expect(palette.get_by_role("button", name="Add Text input")).to_have_count(0)
        palette.get_by_role("searchbox").fill("")

        # A connection let go on the empty canvas opens the menu; the node is added connected.
        start = centre(handle(page, "Text input", "output").bounding_box())
        page.mouse.move(*start)
        page.mouse.down()
        page.mouse.move(start[0] + 60, start[1] + 260, steps=10)
        page.mouse.up()
        menu = page.get_by_role("dialog", name="Add a node here")
        expect(menu).to_be_visible()
        expect(menu.get_by_role("searchbox")).to_be_focused()
        page.keyboard.type("tts")
        expect(menu.get_by_role("button").first).to_contain_text("Text to speech")
        shot(page, "25-editor-quick-add-1280")
        page.keyboard.press("Enter")
        expect(menu).to_be_hidden()
        expect(node(page, "Text to speech")).to_be_visible()
        expect(page.locator(".react-flow__edge")).to_have_count(4)

        # A double-click on the empty canvas opens it too; Escape closes it.
        pane = page.locator(".react-flow__pane")
        pane.dblclick(position={"x": 200, "y": 400})
        expect(menu).to_be_visible()
        page.keyboard.press("Escape")
        expect(menu).to_be_hidden()
        pane.dblclick(position={"x": 200, "y": 400})
        menu.get_by_role("searchbox").fill("wait")
        menu.get_by_role("button", name=re.compile("^Delay")).click()
        expect(node(page, "Delay")).to_be_visible()
        expect(page.locator(".react-flow__edge")).to_have_count(4)
        # The new node is selected: its input is picked in the side panel before saving.
        page.get_by_role("complementary", name="Details").get_by_label("text (text)").select_option(
            label="Join texts (join)"
        )
        expect(page.locator(".react-flow__edge")).to_have_count(5)
        page.keyboard.press("Control+s")
        expect(page.get_by_test_id("editor-banner")).to_have_text("Saved.")
        with api(server, page) as client:
            graph = client.get(f"/workflows/{wf}").json()["graph_json"]
        tts = next(n["id"] for n in graph["nodes"] if n["type"] == "TextToSpeech")
        assert (
            "in",
            tts,
            "text",
        ) in [(e["source"], e["target"], e.get("targetHandle")) for e in graph["edges"]]

    def test_previews_never_hide_handles(self, page: Page, server: ServerProcess) -> None:
        # The resize node sits under the card's preview and comes first in the list, so it
        # would be drawn beneath the card.
        graph = {
            "nodes": [
                {
                    "id": "small",
                    "type": "ImageResize",
                    "position": {"x": 340, "y": 110},
                    "data": {"width": 100, "height": 100},
                },
                {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
                {
                    "id": "card",
                    "type": "RenderText",
                    "position": {"x": 300, "y": 0},
                    "data": {"width": 640, "height": 640},
                },
            ],
            "edges": [
                {"id": "e1", "source": "in", "target": "card"},
                {"id": "e2", "source": "card", "target": "small"},
            ],
            "viewport": {"x": 40, "y": 80, "zoom": 1},
        }
        with api(server, page) as client:
            wf = make_workflow(client, "Previews", graph)
            run = client.post(f"/workflows/{wf}/execute", json={"input": {"text": "Hi"}})
            assert wait_for_run(client, wf, run.json()["run_id"])["status"] == "completed"
        page.goto(f"/workflows/{wf}")
        expect(node(page, "Render text").locator("img")).to_be_visible()
        shot(page, "26-editor-previews-1280")
        handles = page.locator(".react-flow__handle")
        expect(handles).to_have_count(5)
        hidden = page.evaluate(
            """() => [...document.querySelectorAll('.react-flow__handle')].filter((h) => {
                 const r = h.getBoundingClientRect();
                 const top = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
                 return !(top === h || h.contains(top));
               }).map((h) => h.closest('[data-node-id]').dataset.nodeId + ':'
                              + h.dataset.handleid)"""
        )
        assert hidden == []
        # The preview folds away, from the keyboard too.
        fold = node(page, "Render text").get_by_role("button", name="Hide output")
        fold.focus()
        page.keyboard.press("Enter")
        expect(node(page, "Render text").locator("img")).to_have_count(0)
        node(page, "Render text").get_by_role("button", name="Show output").click()
        expect(node(page, "Render text").locator("img")).to_be_visible()
        page.emulate_media(color_scheme="dark")
        shot(page, "29-editor-previews-dark-1280")
        page.emulate_media(color_scheme="light")

    def test_save_warnings_are_shown_on_their_node(self, page: Page, server: ServerProcess) -> None:
        graph = text_and_image_graph()
        graph["nodes"].append(
            {"id": "pic", "type": "TextToImage", "position": {"x": 300, "y": 260}, "data": {}}
        )
        graph["edges"].append({"id": "e4", "source": "in", "target": "pic"})
        with api(server, page) as client:
            made = client.post("/workflows", json={"name": "Needs a provider", "graph_json": graph})
        if made.status_code == 400 and "unavailable" in made.text:
            pytest.skip("this server refuses unavailable node types instead of warning")
        assert made.status_code == 201, made.text
        page.goto(f"/workflows/{made.json()['id']}")
        page.get_by_role("button", name="Save", exact=True).click()
        banner = page.get_by_test_id("editor-banner")
        expect(banner).to_contain_text("Saved with 1 warning")
        picture = node(page, "Text to image")
        expect(picture).to_have_class(re.compile(r"\bhas-warning\b"))
        expect(picture.get_by_role("note")).to_contain_text("unavailable")
        expect(node(page, "Render text").get_by_role("note")).to_have_count(0)
        shot(page, "27-editor-save-warning-1280")


class TestPhone:
    def test_add_a_node_edit_its_params_and_run_at_390_wide(
        self, browser: Browser, server: ServerProcess, page: Page
    ) -> None:
        with api(server, page) as client:
            wf = make_workflow(
                client,
                "On the phone",
                {"nodes": [], "edges": [], "viewport": {"x": 0, "y": 0, "zoom": 1}},
            )
        context = browser.new_context(
            base_url=server.base_url, viewport={"width": 390, "height": 844}, has_touch=True
        )
        context.set_default_timeout(15_000)
        phone = context.new_page()
        errors: list[str] = []
        phone.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            log_in(phone)
            shot(phone, "30-workflows-390")
            phone.goto(f"/workflows/{wf}")
            toolbar = phone.get_by_role("toolbar", name="Editor")
            expect(toolbar.get_by_role("button", name="Run", exact=True)).to_be_in_viewport()
            palette = phone.get_by_role("complementary", name="Node palette")
            expect(palette).to_be_hidden()
            toolbar.get_by_role("button", name="Nodes").click()
            expect(palette).to_be_visible()
            expect(palette.get_by_role("searchbox")).to_be_focused()
            shot(phone, "31-editor-palette-390")
            palette.get_by_role("searchbox").fill("input")
            palette.get_by_role("button", name="Add Text input").click()
            expect(palette).to_be_hidden()
            expect(node(phone, "Text input")).to_be_in_viewport()

            node(phone, "Text input").locator("header").tap()
            toolbar.get_by_role("button", name="Details").click()
            details = phone.get_by_role("complementary", name="Details")
            expect(details.get_by_role("heading", name="Text input")).to_be_visible()
            details.get_by_label("Text", exact=True).fill("Hello from a phone.")
            shot(phone, "32-editor-details-390")
            details.get_by_role("button", name="Close").click()
            expect(details).to_be_hidden()

            toolbar.get_by_role("button", name="Run", exact=True).click()
            dialog = phone.get_by_role("dialog")
            expect(dialog.get_by_label("Input “text”")).to_have_value("Hello from a phone.")
            shot(phone, "33-editor-run-dialog-390")
            dialog.get_by_role("button", name="Start run").click()
            expect(node(phone, "Text input")).to_have_attribute("data-status", "completed")
            expect(node(phone, "Text input").locator("pre")).to_have_text("Hello from a phone.")
            shot(phone, "34-editor-run-390")

            # Every other page fits the width (nothing scrolls sideways but tables).
            pages = {
                "35-runs-390": "/runs",
                "36-profile-390": "/profile",
                "37-webhooks-390": f"/workflows/{wf}/webhooks",
            }
            for name, url in pages.items():
                phone.goto(url)
                phone.wait_for_load_state("networkidle")
                assert phone.evaluate("() => document.documentElement.scrollWidth") <= 390
                shot(phone, name)
            phone.goto(f"/workflows/{wf}/runs")
            phone.locator("tbody a").first.click()
            expect(phone.get_by_role("list", name="Run events")).to_contain_text("run.completed")
            assert phone.evaluate("() => document.documentElement.scrollWidth") <= 390
            shot(phone, "38-run-page-390")
        finally:
            context.close()
        assert not errors, errors
