"""Every workflow in examples/ pushed to a real server, run end to end with its example input,
and each output decoded: text as UTF-8, PNG with Pillow, MP3 and MP4 with PyAV. The
provider-backed example runs against the fake OpenAI-compatible server (tests/fakes.py)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import httpx
import pytest
from PIL import Image

from nodeloom.client import Client
from tests.comfyui_fake import FakeComfyUI, running
from tests.conftest import PASSWORD
from tests.fakes import FakeServer, fake_provider
from tests.server import ServerProcess

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = sorted(EXAMPLES.glob("*.json"))


@dataclass
class Setup:
    client: Client
    provider: FakeServer


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with fake_provider(tmp_path_factory.mktemp("provider")) as provider:
        server = ServerProcess(
            tmp_path_factory.mktemp("examples-server"),
            env={
                "NODELOOM_PROVIDER_BASE_URL": provider.url + "/v1",
                "NODELOOM_PROVIDER_API_KEY": "sk-test-key",
                "NODELOOM_LOG_LEVEL": "WARNING",
                # One key runs every example, well over the default 100 requests a minute:
                # the client would wait out a 429's Retry-After (most of a minute) mid-module.
                "NODELOOM_RATE_LIMIT_API_KEY": "1000000",
                # The fake ComfyUI server of the ComfyUI example listens on 127.0.0.1.
                "NODELOOM_HTTP_ALLOWLIST": '["127.0.0.1/32"]',
            },
        )
        server.start()
        try:
            body = {"email": "examples@example.com", "password": PASSWORD}
            with httpx.Client(base_url=server.base_url, timeout=10) as http:
                assert http.post("/api/v1/auth/signup", json=body).status_code == 201
            with Client.login(server.base_url, body["email"], PASSWORD) as session:
                key = session.keys.create("examples").key
            with Client(server.base_url, key) as client:
                yield Setup(client, provider)
        finally:
            server.stop()


def decode(content_type: str, data: bytes) -> dict[str, Any]:
    """What the file really holds, read back by a decoder, never trusted from metadata."""
    if content_type == "text/plain":
        return {"text": data.decode("utf-8")}
    if content_type == "image/png":
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "PNG"
            image.load()
            return {"size": image.size}
    with av.open(io.BytesIO(data)) as container:
        info: dict[str, Any] = {"seconds": container.duration / av.time_base}
        for stream in container.streams:
            info[stream.type] = stream.codec_context.codec.canonical_name
        if container.streams.video:
            frame = next(container.decode(video=0))
            info["size"] = (frame.width, frame.height)
        else:
            info["samples"] = sum(f.samples for f in container.decode(audio=0))
        return info


def run_example(
    setup: Setup, name: str, replace: dict[str, str] | None = None, tmp: Path | None = None
) -> dict[str, dict[str, Any]]:
    path = EXAMPLES / name
    text = path.read_text(encoding="utf-8")
    for old, new in (replace or {}).items():  # what the user fills in (a credential id)
        assert old in text
        assert tmp is not None
        text = text.replace(old, new)
        path = tmp / name
        path.write_text(text, encoding="utf-8")
    document = json.loads(text)
    workflow = setup.client.workflows.create(path)
    assert workflow.name == document["name"]
    run = setup.client.workflows.execute(workflow.id, document["input"]).wait(timeout=300)
    failed = [(n.node_id, n.error) for n in run.node_runs if n.status != "completed"]
    assert run.status == "completed", failed
    decoded: dict[str, dict[str, Any]] = {}
    for node_id, meta in run.outputs().items():
        data = setup.client.artifacts.read(meta.id)
        assert len(data) == meta.size_bytes
        decoded[node_id] = {"type": meta.content_type, **decode(meta.content_type, data)}
    return decoded


def test_every_example_has_a_readme_line() -> None:
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    assert len(FILES) >= 6
    for path in FILES:
        assert f"- `{path.name}` — " in readme
        document = json.loads(path.read_text(encoding="utf-8"))
        assert set(document) == {"name", "description", "input", "graph_json"}


def test_greeting(setup: Setup) -> None:
    assert run_example(setup, "greeting.json") == {
        "tpl": {"type": "text/plain", "text": "Hello there!"}
    }


def test_narrated_video(setup: Setup) -> None:
    out = run_example(setup, "narrated-video.json")["video"]
    assert (out["video"], out["audio"], out["size"]) == ("h264", "aac", (1280, 720))
    assert out["seconds"] > 3 + 4  # the 3 s title card, then several seconds of speech


def test_slideshow_with_music(setup: Setup) -> None:
    out = run_example(setup, "slideshow-music.json")["video"]
    assert (out["video"], out["audio"], out["size"]) == ("h264", "aac", (1280, 720))
    assert out["seconds"] == pytest.approx(9, abs=0.3)  # three slides of 3 s


def test_podcast_snippet(setup: Setup) -> None:
    out = run_example(setup, "podcast-snippet.json")["episode"]
    assert out["audio"] == "mp3" and out["seconds"] > 0.4 + 0.6 + 0.8 + 2
    assert out["samples"] > 44_100 * 3


def test_social_thumbnails(setup: Setup) -> None:
    out = run_example(setup, "social-thumbnails.json")
    assert sorted(out) == ["contact_sheet", "thumb_1", "thumb_2", "thumb_3"]
    for index in (1, 2, 3):
        assert out[f"thumb_{index}"]["size"] == (640, 360)
    width, height = out["contact_sheet"]["size"]
    assert width >= 3 * 426 and height >= 240


def test_llm_summary_to_speech(setup: Setup) -> None:
    before = len(setup.provider.requests)
    out = run_example(setup, "llm-summary-speech.json")["speech"]
    assert out["audio"] == "mp3" and out["samples"] > 0
    calls = setup.provider.requests[before:]
    assert [c.path for c in calls] == ["/v1/chat/completions", "/v1/audio/speech"]
    chat = json.loads(calls[0].body)
    assert chat["messages"][0]["content"].startswith("Summarize the text")
    assert "rail yard" in chat["messages"][-1]["content"]
    assert json.loads(calls[1].body)["input"].startswith("echo: ")


def test_narration_with_captions(setup: Setup) -> None:
    before = len(setup.provider.requests)
    out = run_example(setup, "narration-captions.json")
    assert list(out) == ["captions"]  # the transcript and the clip feed it
    video = out["captions"]
    assert (video["video"], video["audio"], video["size"]) == ("h264", "aac", (1280, 720))
    assert video["seconds"] > 4  # the whole narration, captioned where the cues are
    calls = setup.provider.requests[before:]
    assert [c.path for c in calls] == ["/v1/audio/transcriptions"]


def test_animate_product_photo(setup: Setup) -> None:
    """The photo comes with the run as a data: URI (an asset id or an https URL work alike)."""
    out = run_example(setup, "animate-product-photo.json")
    assert list(out) == ["titled"]
    video = out["titled"]
    assert (video["video"], video["size"]) == ("h264", (1280, 720))
    assert 3.9 <= video["seconds"] <= 4.2


def test_transcribe_voice_memo(setup: Setup) -> None:
    before = len(setup.provider.requests)
    out = run_example(setup, "transcribe-voice-memo.json")
    assert list(out) == ["transcript"]
    assert out["transcript"]["text"].strip() == "Hello there. General Kenobi."
    calls = setup.provider.requests[before:]
    assert [c.path for c in calls] == ["/v1/audio/transcriptions"]


def test_caption_my_video(setup: Setup) -> None:
    before = len(setup.provider.requests)
    out = run_example(setup, "caption-my-video.json")
    assert list(out) == ["captions"]  # the sound and the transcript feed it
    video = out["captions"]
    assert (video["video"], video["audio"], video["size"]) == ("h264", "aac", (160, 90))
    assert 1.9 <= video["seconds"] <= 2.3  # the whole video, its sound kept
    calls = setup.provider.requests[before:]
    assert [c.path for c in calls] == ["/v1/audio/transcriptions"]


def test_comfyui_text_to_image(setup: Setup, tmp_path: Path) -> None:
    with running(FakeComfyUI(steps=3)) as comfy:
        credential = setup.client.credentials.create(
            "my GPU box", "comfyui", {"base_url": comfy.url}
        )
        out = run_example(
            setup,
            "comfyui-text-to-image.json",
            {"REPLACE-WITH-YOUR-COMFYUI-CREDENTIAL-ID": credential.id},
            tmp_path,
        )
        (submitted,) = comfy.submissions
    assert out == {"thumb": {"type": "image/png", "size": (256, 256)}}
    prompt = submitted["prompt"]
    assert prompt["6"]["inputs"]["text"] == "a lighthouse on a cliff at dusk, oil painting"
    assert prompt["3"]["inputs"]["seed"] == 1234


def test_comfyui_video_with_sound(setup: Setup, tmp_path: Path) -> None:
    with running(FakeComfyUI(steps=3)) as comfy:
        credential = setup.client.credentials.create(
            "my GPU box", "comfyui", {"base_url": comfy.url}
        )
        out = run_example(
            setup,
            "comfyui-video-with-sound.json",
            {"REPLACE-WITH-YOUR-COMFYUI-CREDENTIAL-ID": credential.id},
            tmp_path,
        )
        prompts = {s["prompt"]["6"]["inputs"]["text"] for s in comfy.submissions}
    assert list(out) == ["video"]
    video = out["video"]
    assert (video["video"], video["audio"], video["size"]) == ("h264", "aac", (64, 48))
    assert abs(video["seconds"] - 2.0) < 0.2  # the fake's 16 frames at 8 fps
    assert prompts == {
        "a red fox trotting through fresh snow at dawn, cinematic",
        "soft wind over snow, distant birds",
    }


def test_route_by_the_llm_json_answer(setup: Setup) -> None:
    before = len(setup.provider.requests)
    out = run_example(setup, "route-llm-json.json")
    # The fake answers the schema's first category, "billing", with severity 1.
    assert out == {
        "reply": {
            "type": "text/plain",
            "text": "Forwarded to the billing team: they answer within one working day.",
        }
    }
    calls = setup.provider.requests[before:]
    assert [c.path for c in calls] == ["/v1/chat/completions"]
    asked = json.loads(calls[0].body)["response_format"]
    assert asked["type"] == "json_schema"
    assert asked["json_schema"]["schema"]["required"] == ["category", "severity"]


def test_generate_judge_retry_until_good(setup: Setup) -> None:
    before = len(setup.provider.requests)
    out = run_example(setup, "generate-judge-retry.json")
    # The fake judge scores every prompt 1: the loop runs its 3 iterations and ends
    # exhausted, so the note is the output and no image is generated (or charged).
    assert set(out) == {"note"}
    assert out["note"]["text"].startswith("No prompt passed the review in 3 tries")
    verdict = json.loads(out["note"]["text"].split("the last verdict: ", 1)[1])
    assert verdict["score"] == 1
    calls = setup.provider.requests[before:]
    assert [c.path for c in calls] == ["/v1/chat/completions"] * 6  # write, judge; 3 times
    # Iterations 2 and 3 were asked to answer the previous verdict.
    asks = [json.loads(c.body)["messages"][-1]["content"] for c in calls[::2]]
    assert "A reviewer judged" not in asks[0]
    assert all("A reviewer judged your last attempt" in ask for ask in asks[1:])


def test_approve_before_video(setup: Setup) -> None:
    document = json.loads((EXAMPLES / "approve-before-video.json").read_text(encoding="utf-8"))
    client = setup.client
    workflow = client.workflows.create(EXAMPLES / "approve-before-video.json")
    run = client.workflows.execute(workflow.id, document["input"])
    deadline = time.monotonic() + 60
    while not (pending := [a for a in client.approvals.list().data if a.run_id == run.id]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert pending[0].input is not None and pending[0].input.text == document["input"]["script"]
    waiting = client.runs.get(workflow.id, run.id)
    assert {n.node_id: n.status for n in waiting.node_runs}["video"] == "pending"
    client.approvals.approve(pending[0].id, text="The tide came in at dawn.", comment="shorter")
    done = run.wait(timeout=300)
    assert done.status == "completed"
    out = decode("video/mp4", client.artifacts.read(done.outputs()["video"].id))
    assert (out["video"], out["size"]) == ("h264", (1280, 720)) and out["audio"]
