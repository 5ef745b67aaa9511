"""A provider credential used from the web app, in a real browser against a real server and a
fake ElevenLabs on 127.0.0.1 (allowed by NODELOOM_HTTP_ALLOWLIST): the credential added on
the profile page with the fields the server declares for its kind, its connection tested,
picked in a Text to speech node (the picker offers the kinds that node takes), the workflow
run while the node shows it is running, and the spoken result playing in an <audio>."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import api as api_client
from tests.e2e.conftest import enter, node, shot, token
from tests.fakes import ELEVENLABS_VOICE, FakeServer, fake_elevenlabs
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

EMAIL = "voices@example.com"
PASSWORD = "a long password"
XI_KEY = "xi-browsertest-00112233445566"
NAME = "My ElevenLabs"


@pytest.fixture(scope="module")
def eleven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with fake_elevenlabs(tmp_path_factory.mktemp("eleven")) as fake:
        yield fake


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, eleven: FakeServer) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("e2e-providers"), env={"NODELOOM_HTTP_ALLOWLIST": '["127.0.0.1"]'}
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def speech_graph() -> dict[str, object]:
    return {
        "nodes": [
            {
                "id": "in",
                "type": "TextInput",
                "position": {"x": 0, "y": 0},
                "data": {"text": "Welcome to the show."},
            },
            {
                "id": "voice",
                "type": "TextToSpeech",
                "position": {"x": 320, "y": 0},
                "data": {"voice": ELEVENLABS_VOICE, "engine": "provider"},
            },
        ],
        "edges": [{"id": "e1", "source": "in", "target": "voice"}],
        "viewport": {"x": 40, "y": 80, "zoom": 1},
    }


class TestElevenLabsInTheBrowser:
    def test_add_test_pick_run_and_play(
        self, page: Page, server: ServerProcess, eleven: FakeServer, tmp_path: Path
    ) -> None:
        page.set_viewport_size({"width": 1280, "height": 900})
        enter(page, EMAIL, PASSWORD, "Sign up")
        page.goto("/profile")
        form = page.get_by_role("form", name="Add a credential")
        form.get_by_label("Kind").select_option("elevenlabs")
        base_url = form.get_by_label("Base URL (optional)")
        expect(base_url).to_have_attribute("placeholder", "https://api.elevenlabs.io")
        form.get_by_label("Name").fill(NAME)
        base_url.fill(eleven.url)
        form.get_by_label("API key").fill(XI_KEY)
        form.get_by_role("button", name="Add credential").click()
        row = page.get_by_role("table", name="Credentials").get_by_role("row").filter(has_text=NAME)
        expect(row.get_by_test_id("credential-hint")).to_have_text("xi-…5566")
        row.get_by_role("button", name=f"Test connection of {NAME}").click()
        expect(row.get_by_test_id("credential-test-result")).to_contain_text(
            "Connection works (HTTP 200)"
        )
        assert eleven.requests[-1].path == "/v1/user"
        assert XI_KEY not in page.content()

        with api_client(server, token(page)) as client:
            [credential] = client.get("/credentials").json()
            made = client.post("/workflows", json={"name": "Voice", "graph_json": speech_graph()})
            assert made.status_code == 201, made.text
            workflow = made.json()["id"]
        page.goto(f"/workflows/{workflow}")
        voice = node(page, "Text to speech")
        voice.locator("header").click()
        details = page.get_by_role("complementary", name="Details")
        picker = details.get_by_role("combobox", name="Credential")
        expect(details).to_contain_text("Which openai or elevenlabs credential")
        picker.select_option(label=f"{NAME} (elevenlabs, xi-…5566)")
        page.get_by_role("button", name="Save", exact=True).click()
        expect(page.get_by_test_id("editor-banner")).to_contain_text("Saved.")

        eleven.delay = 2.0  # long enough to see the node running
        page.get_by_role("button", name="Run", exact=True).click()
        dialog = page.get_by_role("dialog")
        # The price is declared: a flat part and one per second of the longest speech.
        expect(dialog.get_by_test_id("estimated-credits")).to_have_text("121")
        dialog.get_by_role("button", name="Start run").click()
        expect(dialog).to_be_hidden()
        expect(voice).to_have_attribute("data-status", "running", timeout=10_000)
        shot(page, "60-editor-elevenlabs-running-1280")
        expect(voice).to_have_attribute("data-status", "completed", timeout=30_000)
        audio = voice.locator("audio")
        expect(audio).to_be_visible()
        page.wait_for_function(
            "a => a.readyState >= 1 && a.duration > 0", arg=audio.element_handle(), timeout=15_000
        )
        shot(page, "61-editor-elevenlabs-completed-1280")
        [spoken] = [q for q in eleven.requests if q.method == "POST"]
        assert spoken.path.startswith(f"/v1/text-to-speech/{ELEVENLABS_VOICE}")
        assert spoken.headers["xi-api-key"] == XI_KEY
        assert credential["kind"] == "elevenlabs"
