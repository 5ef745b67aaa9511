"""What a new user does in the web app, in a real browser against a real server: set up the
owner account, draw the narrated-video workflow from the palette, run it and watch every node
complete and the video play, manage an API key, and see a validation error on its node."""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any

import httpx
import pytest

from tests import launcher
from tests.e2e.conftest import api, drag, node, shot, token, wait_for_run
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "owner@example.com"
PASSWORD = "a long password"


def drag_from_palette(page: Page, title: str, x: int, y: int) -> None:
    canvas = page.locator(".react-flow__pane")
    page.get_by_role("button", name=f"Add {title}", exact=True).drag_to(
        canvas, target_position={"x": x, "y": y}
    )
    expect(node(page, title)).to_be_visible()


def connect(page: Page, source: str, target: str, input_name: str) -> None:
    """Press on the source's output handle and release on the target's input handle."""
    drag(
        page,
        node(page, source).locator(".react-flow__handle.source"),
        node(page, target).locator(f'.react-flow__handle.target[data-handleid="{input_name}"]'),
    )


def select_node(page: Page, title: str) -> None:
    node(page, title).locator("header").click()
    expect(
        page.get_by_role("complementary", name="Details").get_by_role("heading", level=2)
    ).to_have_text(title)


NARRATION = (
    "Every night for forty years, the keeper climbed the hundred and twelve steps. "
    "Ships he never met passed safely because of a light he never saw from the sea. "
) * 4
NARRATED_GRAPH: dict[str, Any] = {
    "nodes": [
        {
            "id": "in",
            "type": "TextInput",
            "position": {"x": 0, "y": 0},
            "data": {"text": NARRATION},
        },
        {
            "id": "card",
            "type": "RenderText",
            "position": {"x": 300, "y": 0},
            "data": {"width": 640, "height": 360, "background": "#1e293b"},
        },
        {
            "id": "speech",
            "type": "TextToSpeech",
            "position": {"x": 300, "y": 200},
            "data": {"engine": "local", "max_seconds": 60},
        },
        {
            "id": "clip",
            "type": "ImageAudioToVideo",
            "position": {"x": 600, "y": 100},
            "data": {"max_seconds": 60},
        },
        {
            "id": "title",
            "type": "KenBurns",
            "position": {"x": 600, "y": -100},
            "data": {"seconds": 2, "width": 640, "height": 360, "zoom_end": 1.2},
        },
        {
            "id": "joined",
            "type": "VideoConcat",
            "position": {"x": 900, "y": 0},
            "data": {"max_seconds": 60},
        },
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "card"},
        {"id": "e2", "source": "in", "target": "speech"},
        {"id": "e3", "source": "card", "target": "clip", "targetHandle": "image"},
        {"id": "e4", "source": "speech", "target": "clip", "targetHandle": "audio"},
        {"id": "e5", "source": "card", "target": "title"},
        {"id": "e6", "source": "title", "target": "joined"},
        {"id": "e7", "source": "clip", "target": "joined"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}
# In the page: load a media element, play it muted for a moment, seek to the middle (and for
# video, read a pixel of what is on screen), then seek near the end and play until it ends.
PLAY_AND_SEEK = """async ({src, tag}) => {
  const media = document.createElement(tag);
  media.muted = true;
  media.preload = "auto";
  document.body.append(media);
  const once = (name) => new Promise((resolve, reject) => {
    media.addEventListener(name, resolve, {once: true});
    media.addEventListener("error", () => reject(new Error(media.error.message)), {once: true});
  });
  const loaded = once("loadeddata");
  media.src = src;
  await loaded;
  await media.play();
  while (media.currentTime < 0.6) await new Promise((r) => setTimeout(r, 50));
  media.pause();
  const result = {
    error: media.error, duration: media.duration, played_to: media.currentTime,
    audio_bytes: media.webkitAudioDecodedByteCount,
  };
  let seeked = once("seeked");
  media.currentTime = media.duration / 2;
  await seeked;
  result.seeked_to = media.currentTime;
  if (tag === "video") {
    while (media.readyState < 2) await new Promise((r) => setTimeout(r, 50));
    const canvas = document.createElement("canvas");
    canvas.width = media.videoWidth;
    canvas.height = media.videoHeight;
    const context = canvas.getContext("2d");
    context.drawImage(media, 0, 0);
    result.pixel = Array.from(context.getImageData(3, 3, 1, 1).data.slice(0, 3));
  }
  seeked = once("seeked");
  media.currentTime = media.duration - 0.3;
  await seeked;
  const ended = once("ended");
  await media.play();
  await ended;
  result.ended_at = media.currentTime;
  media.remove();
  return result;
}"""


class TestNewUser:
    def test_first_run_setup_then_log_out_and_in(self, page: Page) -> None:
        page.goto("/")
        expect(page).to_have_url(re.compile(r"/setup$"))
        expect(page.get_by_role("heading", name="Welcome to Nodeloom")).to_be_visible()
        page.get_by_label("Email").fill(EMAIL)
        page.get_by_label("Password").fill(PASSWORD)
        shot(page, "01-setup")
        page.get_by_role("button", name="Sign up", exact=True).click()
        expect(page.get_by_role("heading", name="Workflows")).to_be_visible()

        page.get_by_role("button", name="Log out").click()
        expect(page.get_by_role("button", name="Log in", exact=True)).to_be_visible()
        assert page.url.endswith("/login")
        page.get_by_label("Email").fill(EMAIL)
        page.get_by_label("Password").fill("not the password")
        page.get_by_role("button", name="Log in", exact=True).click()
        expect(page.get_by_role("alert")).to_contain_text("Wrong e-mail or password")
        # A page asked for while logged out is where logging in leads.
        page.goto("/profile")
        expect(page).to_have_url(re.compile(r"/login$"))
        page.get_by_label("Email").fill(EMAIL)
        page.get_by_label("Password").fill(PASSWORD)
        shot(page, "02-login")
        page.get_by_role("button", name="Log in", exact=True).click()
        expect(page.get_by_role("heading", name="API keys")).to_be_visible()
        page.goto("/workflows")
        # The session survives a reload (the JWT is in sessionStorage).
        page.reload()
        expect(page.get_by_role("heading", name="Workflows")).to_be_visible()

    @pytest.mark.timeout(240)
    def test_draw_run_and_play_the_narrated_video(self, page: Page, server: ServerProcess) -> None:
        page.goto("/workflows")
        page.get_by_label("Name").fill("Narrated video")
        page.get_by_role("button", name="Create workflow").click()
        expect(page.get_by_role("button", name="Save", exact=True)).to_be_visible()

        drag_from_palette(page, "Text input", 90, 220)
        drag_from_palette(page, "Render text", 340, 60)
        drag_from_palette(page, "Text to speech", 340, 360)
        drag_from_palette(page, "Image + audio to video", 600, 210)

        # An incompatible connection is refused, and the editor says why.
        connect(page, "Text input", "Image + audio to video", "image")
        expect(page.get_by_role("status").filter(has_text="Not connected")).to_contain_text(
            "takes image"
        )
        expect(page.locator(".react-flow__edge")).to_have_count(0)

        connect(page, "Text input", "Render text", "text")
        connect(page, "Text input", "Text to speech", "text")
        connect(page, "Render text", "Image + audio to video", "image")
        connect(page, "Text to speech", "Image + audio to video", "audio")
        expect(page.locator(".react-flow__edge")).to_have_count(4)

        select_node(page, "Text input")
        page.get_by_label("Text", exact=True).fill("Hello from Nodeloom.")
        select_node(page, "Render text")
        page.get_by_label("Width").fill("640")
        page.get_by_label("Height").fill("360")
        page.keyboard.press("Escape")
        page.keyboard.press("Control+s")
        expect(page.get_by_role("status").filter(has_text="Saved.")).to_be_visible()

        jwt = token(page)
        with api(server, jwt) as client:
            workflows = client.get("/workflows").json()
            wf = workflows[0]["id"]
            graph = client.get(f"/workflows/{wf}").json()["graph_json"]
            estimate = client.get(f"/workflows/{wf}/estimate").json()["estimated_credits"]
        assert sorted(n["type"] for n in graph["nodes"]) == [
            "ImageAudioToVideo",
            "RenderText",
            "TextInput",
            "TextToSpeech",
        ]
        assert len(graph["edges"]) == 4
        render = next(n for n in graph["nodes"] if n["type"] == "RenderText")
        assert render["data"] == {"width": 640, "height": 360}

        page.get_by_role("button", name="Run", exact=True).click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_test_id("estimated-credits")).to_have_text(str(estimate))
        expect(dialog.get_by_label("Input “text”")).to_have_value("Hello from Nodeloom.")
        shot(page, "04-run-dialog")
        dialog.get_by_role("button", name="Start run").click()
        expect(dialog).to_be_hidden()

        titles = ["Text input", "Render text", "Text to speech", "Image + audio to video"]
        for title in titles:
            expect(node(page, title)).to_have_attribute("data-status", "completed", timeout=120_000)
        video = node(page, "Image + audio to video").locator("video")
        expect(video).to_be_visible()
        page.wait_for_function("v => v.readyState >= 2", arg=video.element_handle(), timeout=30_000)
        video.evaluate("v => { v.muted = true; return v.play(); }")
        page.wait_for_function("v => v.currentTime > 0", arg=video.element_handle(), timeout=15_000)
        expect(node(page, "Text to speech").locator("audio")).to_be_visible()
        expect(node(page, "Render text").locator("img")).to_be_visible()
        expect(node(page, "Text input").locator("pre")).to_have_text("Hello from Nodeloom.")
        shot(page, "03-editor-run-completed")

        # Range works on the signed URL, so the player can seek.
        src = video.get_attribute("src")
        assert src is not None
        r = httpx.get(f"{server.base_url}{src}", headers={"Range": "bytes=0-99"})
        assert r.status_code == 206 and len(r.content) == 100

        # The run is listed with its trigger, and its page replays the events.
        page.get_by_role("link", name="Runs", exact=True).first.click()
        expect(page.get_by_role("cell", name="Editor")).to_be_visible()
        page.get_by_role("link", name="Runs", exact=True).first.click()
        page.goto("/runs")
        expect(page.get_by_role("cell", name="Narrated video")).to_be_visible()
        shot(page, "05-runs")
        page.locator("tbody a").first.click()
        expect(page.get_by_role("list", name="Run events")).to_contain_text("run.completed")
        expect(page.locator(".artifact-list video")).to_be_visible()
        expect(page.get_by_role("link", name="Download").first).to_be_visible()
        shot(page, "06-run-page")

    @pytest.mark.timeout(240)
    def test_a_narrated_half_minute_plays_and_seeks(
        self, page: Page, server: ServerProcess
    ) -> None:
        """The cheap encodings as a browser sees them: the video's still is held one frame a
        second with the speech's MP3 copied in, the speech was encoded in pieces, and a Ken
        Burns title joined before the video keeps the still held. All three play with sound,
        seek to the middle and play to the end at the right length."""
        with api(server, token(page)) as client:
            wf = client.post(
                "/workflows", json={"name": "Half a minute", "graph_json": NARRATED_GRAPH}
            ).json()["id"]
            run = client.post(f"/workflows/{wf}/execute", json={}).json()["run_id"]
            done = wait_for_run(client, wf, run)
            assert done["status"] == "completed", done
            urls = {
                n["node_id"]: client.get(f"/artifacts/{n['artifact_id']}/metadata").json()
                for n in done["node_runs"]
            }
        video, speech, joined = urls["clip"], urls["speech"], urls["joined"]
        assert video["duration_ms"] > 20_000 and speech["duration_ms"] > 20_000
        assert joined["duration_ms"] == pytest.approx(video["duration_ms"] + 2000, abs=50)

        page.goto("/workflows")
        for played in (video, joined):
            checks = page.evaluate(PLAY_AND_SEEK, {"src": played["download_url"], "tag": "video"})
            assert checks["error"] is None
            assert checks["duration"] == pytest.approx(played["duration_ms"] / 1000, abs=0.05)
            assert checks["audio_bytes"] > 0 and checks["played_to"] > 0.5
            assert checks["seeked_to"] == pytest.approx(checks["duration"] / 2, abs=0.05)
            # The card's background (#1e293b) is on screen after the seek.
            assert all(abs(a - b) < 12 for a, b in zip(checks["pixel"], (30, 41, 59), strict=True))
            assert checks["ended_at"] == pytest.approx(checks["duration"], abs=0.05)

        checks = page.evaluate(PLAY_AND_SEEK, {"src": speech["download_url"], "tag": "audio"})
        assert checks["error"] is None
        assert checks["duration"] == pytest.approx(speech["duration_ms"] / 1000, abs=0.05)
        assert checks["audio_bytes"] > 0 and checks["played_to"] > 0.5
        assert checks["seeked_to"] == pytest.approx(checks["duration"] / 2, abs=0.05)
        assert checks["ended_at"] == pytest.approx(checks["duration"], abs=0.05)
        with api(server, token(page)) as client:  # the pages tested next list one workflow
            assert client.delete(f"/workflows/{wf}").status_code == 204

    def test_api_key_generate_use_revoke(self, page: Page, server: ServerProcess) -> None:
        page.goto("/profile")
        expect(page.get_by_role("heading", name="API keys")).to_be_visible()
        page.get_by_label("Key name").fill("laptop")
        page.get_by_role("button", name="Generate key").click()
        key = page.get_by_test_id("new-api-key").inner_text().strip()
        assert key.startswith("nlk_")
        page.get_by_role("button", name="Copy", exact=True).click()
        expect(page.get_by_role("status").filter(has_text="Copied")).to_be_visible()
        assert page.evaluate("() => navigator.clipboard.readText()") == key
        shot(page, "07-profile-new-key")

        with api(server, key) as client:
            assert client.get("/workflows").status_code == 200
            row = page.get_by_role("row").filter(has_text="laptop")
            row.get_by_role("button", name="Revoke", exact=True).click()
            page.get_by_role("dialog").get_by_role("button", name="Revoke", exact=True).click()
            expect(page.get_by_role("row").filter(has_text="laptop")).to_have_count(0)
            r = client.get("/workflows")
            assert r.status_code == 401
            assert r.json()["code"] == "unauthorized"

    def test_validation_error_is_shown_on_its_node(self, page: Page) -> None:
        page.goto("/workflows")
        page.get_by_label("Name").fill("Broken")
        page.get_by_role("button", name="Create workflow").click()
        expect(page.get_by_role("button", name="Save", exact=True)).to_be_visible()
        # Added from the keyboard this time: focus the palette entry and press Enter.
        page.get_by_role("button", name="Add Text input", exact=True).focus()
        page.keyboard.press("Enter")
        page.get_by_role("button", name="Add Text to speech", exact=True).focus()
        page.keyboard.press("Enter")
        page.get_by_role("button", name="Save", exact=True).click()
        tts = node(page, "Text to speech")
        expect(tts.get_by_role("alert")).to_contain_text("required input 'text'")
        expect(tts).to_have_class("nl-node has-problem")
        expect(node(page, "Text input").get_by_role("alert")).to_have_count(0)
        expect(page.get_by_role("alert").filter(has_text="Not saved: 1 problem")).to_be_visible()
        shot(page, "08-editor-validation-error")

        # Fixed from the keyboard too: pick the input's source in the side panel.
        select_node(page, "Text to speech")
        page.get_by_label("text (text)").select_option(label="Text input (TextInput_1)")
        page.keyboard.press("Control+s")
        expect(page.get_by_role("status").filter(has_text="Saved.")).to_be_visible()
        expect(tts.get_by_role("alert")).to_have_count(0)

        # Copy and paste, then undo and redo the paste.
        select_node(page, "Text to speech")
        page.keyboard.press("Control+c")
        page.keyboard.press("Control+v")
        expect(node(page, "Text to speech")).to_have_count(2)
        page.keyboard.press("Control+z")
        expect(node(page, "Text to speech")).to_have_count(1)
        page.keyboard.press("Control+Shift+z")
        expect(node(page, "Text to speech")).to_have_count(2)
        page.get_by_role("button", name="Undo").click()
        expect(node(page, "Text to speech")).to_have_count(1)
        expect(page.locator(".react-flow__edge")).to_have_count(1)
        page.keyboard.press("Control+s")  # else leaving the editor asks first
        expect(page.get_by_role("status").filter(has_text="Saved.")).to_be_visible()

    def test_a_graph_made_by_api_saves_back_unchanged(
        self, page: Page, server: ServerProcess
    ) -> None:
        graph: dict[str, Any] = {
            "nodes": [
                {
                    "id": "in",
                    "type": "TextInput",
                    "position": {"x": 12.5, "y": -40},
                    "data": {"text": "round trip"},
                    "width": 200,
                    "custom": {"kept": [1, 2]},
                },
                {
                    "id": "speak",
                    "type": "TextToSpeech",
                    "position": {"x": 320, "y": 10},
                    "data": {"voice": "en", "speed": 1.25},
                },
            ],
            "edges": [{"id": "e1", "source": "in", "target": "speak", "label": "narration"}],
            "viewport": {"x": 40.5, "y": -12, "zoom": 0.8},
            "meta": {"author": "api"},
        }
        with api(server, token(page)) as client:
            made = client.post("/workflows", json={"name": "By API", "graph_json": graph})
            assert made.status_code == 201, made.text
            wf = made.json()["id"]
            page.goto(f"/workflows/{wf}")
            expect(node(page, "Text to speech")).to_be_visible()
            page.keyboard.press("Control+s")
            expect(page.get_by_role("status").filter(has_text="Saved.")).to_be_visible()
            saved = client.get(f"/workflows/{wf}").json()["graph_json"]
            assert saved == graph

            # Zoom, then Ctrl+S: the view stays where it is, and that view is what is saved.
            page.get_by_role("button", name="Zoom in").click()
            view = page.locator(".react-flow__viewport")
            before = view.get_attribute("style")
            page.keyboard.press("Control+s")
            deadline = time.monotonic() + 10
            while True:
                viewport = client.get(f"/workflows/{wf}").json()["graph_json"]["viewport"]
                if viewport["zoom"] != graph["viewport"]["zoom"] or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert view.get_attribute("style") == before
        assert viewport["zoom"] > graph["viewport"]["zoom"]
        assert f"scale({viewport['zoom']})" in str(before)
        assert json.dumps(saved, sort_keys=True) == json.dumps(copy.deepcopy(graph), sort_keys=True)

    def test_cancel_a_running_run(self, page: Page, server: ServerProcess) -> None:
        graph = {
            "nodes": [
                {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
                {
                    "id": "wait",
                    "type": "Delay",
                    "position": {"x": 300, "y": 0},
                    "data": {"seconds": 60},
                },
            ],
            "edges": [{"id": "e1", "source": "in", "target": "wait"}],
            "viewport": {"x": 0, "y": 0, "zoom": 1},
        }
        with api(server, token(page)) as client:
            wf = client.post("/workflows", json={"name": "Slow", "graph_json": graph}).json()["id"]
        page.goto(f"/workflows/{wf}")
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_role("dialog").get_by_role("button", name="Start run").click()
        expect(node(page, "Delay")).to_have_attribute("data-status", "running")
        page.get_by_role("button", name="Cancel run").click()
        expect(node(page, "Delay")).to_have_attribute("data-status", "cancelled")
        toolbar = page.get_by_role("toolbar", name="Editor")
        expect(toolbar).to_contain_text("Run cancelled")
        expect(toolbar.locator('.status[data-status="cancelled"]')).to_be_visible()
        expect(page.get_by_role("button", name="Cancel run")).to_be_hidden()

        # Cancelled is a status of its own in the runs list, with its own filter option.
        page.goto(f"/workflows/{wf}/runs")
        page.get_by_label("Status").select_option("cancelled")
        expect(page).to_have_url(re.compile(r"status=cancelled"))
        expect(page.locator("tbody tr")).to_have_count(1)
        expect(page.locator("tbody .status")).to_have_text("cancelled")
        shot(page, "14-runs-cancelled")
        page.get_by_label("Status").select_option("completed")
        expect(page.get_by_text("No completed runs.")).to_be_visible()

    def test_a_failed_node_shows_its_error(self, page: Page, server: ServerProcess) -> None:
        # Network nodes refuse loopback addresses: the request fails, its child is skipped.
        graph = {
            "nodes": [
                {
                    "id": "fetch",
                    "type": "HttpRequest",
                    "position": {"x": 0, "y": 0},
                    "data": {"url": "http://127.0.0.1:9/"},
                },
                {"id": "wait", "type": "Delay", "position": {"x": 320, "y": 0}, "data": {}},
            ],
            "edges": [{"id": "e1", "source": "fetch", "target": "wait"}],
            "viewport": {"x": 0, "y": 0, "zoom": 1},
        }
        with api(server, token(page)) as client:
            made = client.post("/workflows", json={"name": "Fails", "graph_json": graph})
            assert made.status_code == 201, made.text
        page.goto(f"/workflows/{made.json()['id']}")
        page.get_by_role("button", name="Run", exact=True).click()
        page.get_by_role("dialog").get_by_role("button", name="Start run").click()
        fetch = node(page, "HTTP request")
        expect(fetch).to_have_attribute("data-status", "failed")
        expect(fetch.get_by_role("alert")).not_to_have_count(0)
        expect(node(page, "Delay")).to_have_attribute("data-status", "skipped")
        expect(page.get_by_role("toolbar", name="Editor")).to_contain_text("Run failed")
        shot(page, "13-editor-failed-node")

    def test_workflow_list_actions(self, page: Page, server: ServerProcess) -> None:
        page.goto("/workflows")
        row = page.get_by_role("row").filter(has_text="Broken")
        row.get_by_role("button", name="Rename").click()
        page.get_by_label("New name").fill("Fixed")
        page.get_by_role("button", name="OK").click()
        fixed = page.get_by_role("row").filter(has_text="Fixed")
        expect(fixed).to_be_visible()

        fixed.get_by_role("button", name="Duplicate").click()
        copy_row = page.get_by_role("row").filter(has_text="Fixed (copy)")
        expect(copy_row).to_be_visible()

        with page.expect_download() as download:
            copy_row.get_by_role("button", name="Export").click()
        exported = json.loads(download.value.path().read_text())
        with api(server, token(page)) as client:
            listed = {w["name"]: w["id"] for w in client.get("/workflows").json()}
            original = client.get(f"/workflows/{listed['Fixed']}").json()["graph_json"]
        assert exported == original

        copy_row.get_by_role("button", name="Delete").click()
        page.get_by_role("dialog").get_by_role("button", name="Delete").click()
        expect(page.get_by_role("row").filter(has_text="Fixed (copy)")).to_have_count(0)

        # Importing the exported file makes a new workflow with the same graph.
        page.get_by_label("Import a workflow from a JSON file").set_input_files(
            download.value.path()
        )
        expect(page.get_by_role("button", name="Save", exact=True)).to_be_visible()
        with api(server, token(page)) as client:
            imported = client.get("/workflows").json()[0]
            assert client.get(f"/workflows/{imported['id']}").json()["graph_json"] == original

    def test_webhooks_panel_and_other_pages(self, page: Page, server: ServerProcess) -> None:
        page.goto("/workflows")
        expect(page.get_by_role("cell", name="completed")).to_be_visible()  # last run status
        shot(page, "09-workflows")
        page.get_by_role("row").filter(has_text="Narrated video").get_by_role("link").first.click()
        page.get_by_role("link", name="Webhooks").click()
        page.get_by_label("Webhook name").fill("from the CMS")
        page.get_by_role("button", name="Create webhook").click()
        url = (
            page.get_by_role("row").filter(has_text="from the CMS").locator("td.mono").inner_text()
        )
        r = httpx.post(url.strip(), json={"text": "From a webhook."}, timeout=10)
        assert r.status_code == 202, r.text
        page.reload()
        expect(page.get_by_role("heading", name="Recent triggers")).to_be_visible()
        expect(page.get_by_role("cell", name="from the CMS").nth(1)).to_be_visible()
        shot(page, "10-webhooks")

        # Below Business the panel says why it is unavailable.
        done = launcher.run(
            ["accounts", "set", "--email", EMAIL, "--plan", "pro"], server_env(server)
        )
        assert done.returncode == 0, done.stderr
        page.reload()
        expect(page.get_by_role("note")).to_contain_text("not available on the pro plan")

        # The same editor in dark mode.
        page.emulate_media(color_scheme="dark")
        page.goto("/workflows")
        page.get_by_role("link", name="Narrated video").click()
        # Opening the editor shows the newest run (here the webhook's): states and outputs.
        expect(node(page, "Image + audio to video")).to_have_attribute("data-status", "completed")
        expect(node(page, "Image + audio to video").locator("video")).to_be_visible()
        expect(node(page, "Render text").locator("img")).to_be_visible()
        shot(page, "12-editor-dark")
        page.emulate_media(color_scheme="light")

        page.goto("/api/v1/docs")
        expect(page.locator(".swagger-ui .title").first).to_contain_text("Nodeloom")
        shot(page, "11-api-docs")


def server_env(server: ServerProcess) -> dict[str, str]:
    import os

    return {**os.environ, "NODELOOM_DATA_DIR": str(server.data_dir)}
