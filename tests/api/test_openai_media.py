"""OpenAI media and ElevenLabs through our API, over HTTP on SQLite and PostgreSQL, against
small real servers on 127.0.0.1 speaking their published protocols (tests/fakes.py):
image edits with a mask (multipart), speech with a voice and model, transcription with timed
segments, captions burned from that transcription into a video (decoded and checked frame by
frame), ElevenLabs speech picked by the credential's kind, retries on 429 with Retry-After and
on 5xx, the provider's error quoted, credential isolation, and the SSRF refusal of a private
credential address. No operator provider is configured: the credentials are the endpoints."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
import pytest
from PIL import Image

from tests.api.test_auth import assert_problem
from tests.api.test_credentials import create, run
from tests.conftest import User
from tests.fakes import (
    EDITED_COLOR,
    ELEVENLABS_VOICE,
    FakeServer,
    fake_elevenlabs,
    fake_provider,
)
from tests.runs_helpers import create_workflow, e, g, n

KEY = "sk-openaimedia-0123456789abcdef"
XI_KEY = "xi-elevenlabs-fedcba9876543210"


@pytest.fixture
def openai(tmp_path: Path) -> Iterator[FakeServer]:
    with fake_provider(tmp_path) as server:
        yield server


@pytest.fixture
def eleven(tmp_path: Path) -> Iterator[FakeServer]:
    with fake_elevenlabs(tmp_path) as server:
        yield server


def node(run_body: dict[str, Any], node_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(x for x in run_body["node_runs"] if x["node_id"] == node_id)
    return found


async def content(
    client: httpx.AsyncClient, user: User, run_body: dict[str, Any], node_id: str
) -> bytes:
    artifact = node(run_body, node_id)["artifact_id"]
    r = await client.get(f"/api/v1/artifacts/{artifact}", headers=user.headers)
    assert r.status_code == 200, r.text
    return r.content


async def openai_credential(client: httpx.AsyncClient, user: User, server: FakeServer) -> str:
    return str((await create(client, user, {"base_url": server.url + "/v1", "api_key": KEY}))["id"])


def frames(data: bytes) -> list[tuple[float, np.ndarray[Any, Any]]]:
    """Every frame of an MP4 as (time, RGB array), decoded with PyAV."""
    out = []
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        for frame in container.decode(video=0):
            out.append((float(frame.time or 0.0), frame.to_ndarray(format="rgb24").astype(int)))
    return out


def at(decoded: list[tuple[float, np.ndarray[Any, Any]]], seconds: float) -> np.ndarray[Any, Any]:
    """The frame on screen at ``seconds``."""
    shown = decoded[0][1]
    for when, image in decoded:
        if when > seconds + 1e-6:
            break
        shown = image
    return shown


class TestOpenAIMedia:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {
            "http_allowlist": ["127.0.0.1"],
            "rate_limit_api_key": 10_000,
            "provider_max_retries": 1,
        }

    async def test_an_image_edit_sends_image_prompt_and_mask(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        cred = await openai_credential(client, owner, openai)
        graph = g(
            [
                n("prompt", "TextInput", text="paint it blue"),
                n(
                    "photo",
                    "GradientBackground",
                    width=40,
                    height=30,
                    color_from="#ff0000",
                    color_to="#ff0000",
                ),
                # A grey-level mask of another size: white (the right half) is what to edit.
                n(
                    "mask",
                    "GradientBackground",
                    width=20,
                    height=16,
                    color_from="#000000",
                    color_to="#ffffff",
                    direction="horizontal",
                ),
                n("edit", "ImageToImage", model="gpt-image-1", size="auto", credential=cred),
            ],
            [
                e("photo", "edit", "image"),
                e("prompt", "edit", "text"),
                e("mask", "edit", "mask"),
            ],
        )
        done = await run(client, owner, await create_workflow(client, owner, graph))
        assert done["status"] == "completed", done
        (request,) = [q for q in openai.requests if q.path == "/v1/images/edits"]
        assert request.headers["Authorization"] == f"Bearer {KEY}"
        (form,) = openai.forms
        assert {k: v[1].decode() for k, v in form.items() if k not in ("image", "mask")} == {
            "model": "gpt-image-1",
            "prompt": "paint it blue",
            "n": "1",
            "size": "auto",
        }
        with Image.open(io.BytesIO(form["image"][1])) as sent:
            assert sent.format == "PNG" and sent.size == (40, 30)
            assert sent.convert("RGB").getpixel((5, 5)) == (255, 0, 0)
        with Image.open(io.BytesIO(form["mask"][1])) as mask:
            assert mask.format == "PNG" and mask.mode == "RGBA" and mask.size == (40, 30)
            alpha = mask.getchannel("A")
            assert alpha.getpixel((1, 15)) > 200  # black: kept
            assert alpha.getpixel((38, 15)) < 55  # white: transparent, to edit
        with Image.open(io.BytesIO(await content(client, owner, done, "edit"))) as result:
            assert result.format == "PNG" and result.size == (40, 30)
            assert result.convert("RGB").getpixel((20, 15)) == EDITED_COLOR
        assert node(done, "edit")["credits_used"] == 25

    async def test_narration_transcribed_and_captioned(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        cred = await openai_credential(client, owner, openai)
        graph = g(
            [
                n("script", "TextInput", text="Hello there. General Kenobi."),
                n("voice", "TextToSpeech", voice="coral", model="gpt-4o-mini-tts", credential=cred),
                n("stt", "SpeechToText", language="en", credential=cred),
                n(
                    "bg",
                    "GradientBackground",
                    width=160,
                    height=96,
                    color_from="#2040a0",
                    color_to="#2040a0",
                ),
                n("video", "ImageAudioToVideo", fps=25),
                n("captioned", "Captions", fps=25, band="#000000ff"),
            ],
            [
                e("script", "voice"),
                e("voice", "stt"),
                e("bg", "video", "image"),
                e("voice", "video", "audio"),
                e("video", "captioned", "video"),
                e("stt", "captioned", "text"),
            ],
        )
        done = await run(client, owner, await create_workflow(client, owner, graph))
        assert done["status"] == "completed", done
        speech = next(q for q in openai.requests if q.path == "/v1/audio/speech")
        assert json.loads(speech.body)["voice"] == "coral"
        assert json.loads(speech.body)["model"] == "gpt-4o-mini-tts"
        (form,) = openai.forms
        assert form["model"][1] == b"whisper-1" and form["language"][1] == b"en"
        assert form["response_format"][1] == b"verbose_json"
        assert form["timestamp_granularities[]"][1] == b"segment"
        filename, audio = form["file"]
        assert filename == "audio.mp3"
        with av.open(io.BytesIO(audio)) as container:  # the narration itself was sent
            assert container.streams.audio[0].codec_context.codec.canonical_name == "mp3"

        vtt = (await content(client, owner, done, "stt")).decode()
        assert vtt == (
            "WEBVTT\n\n1\n00:00:00.000 --> 00:00:00.200\nHello there.\n\n"
            "2\n00:00:00.320 --> 00:00:00.500\nGeneral Kenobi.\n"
        )
        # Priced per started second of audio transcribed, on top of its flat price.
        assert node(done, "stt")["credits_used"] == 3

        source = frames(await content(client, owner, done, "video"))
        captioned = frames(await content(client, owner, done, "captioned"))
        height = source[0][1].shape[0]
        bottom, top = slice(height * 3 // 4, height), slice(0, height // 4)

        def band_changed(seconds: float) -> bool:
            diff = np.abs(at(captioned, seconds) - at(source, seconds))
            assert diff[top].mean() < 4  # the top of the picture is never touched
            return bool(diff[bottom].mean() > 20)

        assert band_changed(0.08)  # "Hello there."
        assert not band_changed(0.26)  # between the cues
        assert band_changed(0.4)  # "General Kenobi."
        assert at(captioned, 0.08)[bottom].mean() < at(source, 0.08)[bottom].mean() - 20

    @pytest.mark.parametrize("model", ["gpt-4o-transcribe", "gpt-4o-mini-transcribe"])
    async def test_the_gpt_4o_transcribers_are_asked_for_json(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer, model: str
    ) -> None:
        # They answer json or text only, without segments: one cue spans the audio.
        cred = await openai_credential(client, owner, openai)
        graph = g(
            [
                n("script", "TextInput", text="Hello there. General Kenobi."),
                n("voice", "TextToSpeech", credential=cred),
                n("stt", "SpeechToText", model=model, credential=cred),
            ],
            [e("script", "voice"), e("voice", "stt")],
        )
        done = await run(client, owner, await create_workflow(client, owner, graph))
        assert done["status"] == "completed", done
        (form,) = openai.forms
        assert form["model"][1] == model.encode()
        assert form["response_format"][1] == b"json"
        assert "timestamp_granularities[]" not in form
        vtt = (await content(client, owner, done, "stt")).decode()
        assert vtt.startswith("WEBVTT\n\n1\n00:00:00.000 --> ")
        assert vtt.endswith("\nHello there. General Kenobi.\n") and vtt.count(" --> ") == 1

    async def test_speech_longer_than_openai_takes_is_not_sent(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        cred = await openai_credential(client, owner, openai)
        graph = g(
            [
                n("script", "TextInput", text="a" * 4097),
                n("voice", "TextToSpeech", credential=cred),
            ],
            [e("script", "voice")],
        )
        done = await run(client, owner, await create_workflow(client, owner, graph))
        voice = node(done, "voice")
        assert voice["status"] == "failed" and voice["credits_used"] == 0
        assert voice["error"]["message"] == (
            "the text to speak is 4,097 characters; OpenAI's speech takes at most 4,096"
        )
        assert openai.requests == []  # nothing paid was sent

    async def test_rate_limited_with_retry_after_then_answered(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        cred = await openai_credential(client, owner, openai)
        graph = g(
            [
                n("t", "TextInput", text="hi"),
                n("voice", "TextToSpeech", credential=cred),
                n("stt", "SpeechToText", format="json", credential=cred),
            ],
            [e("t", "voice"), e("voice", "stt")],
        )
        wf = await create_workflow(client, owner, graph)
        openai.failures.append((429, {"Retry-After": "1"}))  # the speech call waits once
        started = time.monotonic()
        done = await run(client, owner, wf)
        assert done["status"] == "completed", done
        assert time.monotonic() - started >= 1.0
        paths = [q.path for q in openai.requests]
        assert paths == ["/v1/audio/speech", "/v1/audio/speech", "/v1/audio/transcriptions"]
        body = json.loads(await content(client, owner, done, "stt"))
        assert body["text"] == "Hello there. General Kenobi."
        assert body["language"] == "english"
        assert [s["text"] for s in body["segments"]] == ["Hello there.", "General Kenobi."]

    async def test_a_server_error_that_lasts_fails_the_node_and_charges_nothing(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        cred = await openai_credential(client, owner, openai)
        graph = g(
            [
                n("prompt", "TextInput", text="x"),
                n("photo", "GradientBackground", width=8, height=8),
                n("edit", "ImageToImage", credential=cred),
            ],
            [e("photo", "edit", "image"), e("prompt", "edit", "text")],
        )
        # A paid call the provider may have done before failing: not sent again.
        openai.failures.extend([(503, {}), (502, {})])
        done = await run(client, owner, await create_workflow(client, owner, graph))
        assert done["status"] == "failed"
        failed = node(done, "edit")
        assert failed["error"]["code"] == "provider_error"
        assert "HTTP 503" in failed["error"]["message"]
        assert "scripted 503" in failed["error"]["message"]  # the provider's own words
        assert failed["credits_used"] == 0
        assert KEY not in json.dumps(done)
        assert [q.path for q in openai.requests] == ["/v1/images/edits"]

    @pytest.mark.parametrize(
        ("type_", "path"),
        [("TextToSpeech", "/v1/audio/speech"), ("TextToImage", "/v1/images/generations")],
    )
    async def test_a_paid_call_is_not_sent_twice_after_a_server_error(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer, type_: str, path: str
    ) -> None:
        cred = await openai_credential(client, owner, openai)
        graph = g(
            [n("t", "TextInput", text="a lighthouse"), n("paid", type_, credential=cred)],
            [e("t", "paid")],
        )
        wf = await create_workflow(client, owner, graph)
        openai.failures.append((500, {}))
        done = await run(client, owner, wf, cache=False)
        assert done["status"] == "failed"
        assert node(done, "paid")["error"]["message"] == (
            "the AI provider refused the request (HTTP 500): scripted 500"
        )
        assert [q.path for q in openai.requests] == [path]
        # A 429 says the call was not taken: sent again after Retry-After.
        openai.failures.append((429, {"Retry-After": "0"}))
        again = await run(client, owner, wf, cache=False)
        assert again["status"] == "completed", again
        assert [q.path for q in openai.requests] == [path] * 3

    async def test_a_paid_call_that_times_out_is_not_sent_again(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer, app: Any
    ) -> None:
        app.state.ctx.settings.provider_timeout_seconds = 1.0
        cred = await openai_credential(client, owner, openai)
        graph = g(
            [n("t", "TextInput", text="hi"), n("voice", "TextToSpeech", credential=cred)],
            [e("t", "voice")],
        )
        openai.gate = threading.Event()  # the speech call is taken and never answered
        try:
            done = await run(client, owner, await create_workflow(client, owner, graph))
        finally:
            openai.gate.set()
        assert done["status"] == "failed"
        voice = node(done, "voice")
        assert voice["error"]["code"] == "provider_error" and voice["credits_used"] == 0
        assert "did not answer after 1 attempt (ReadTimeout)" in voice["error"]["message"]
        assert [q.path for q in openai.requests] == ["/v1/audio/speech"]

    async def test_a_transcription_is_not_sent_twice_after_a_server_error(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer
    ) -> None:
        """The provider may have done (and billed) the work before its 500: not resent.
        A 429 says it did not take it: resent after Retry-After."""
        cred = await openai_credential(client, owner, openai)
        graph = g(
            [n("tone", "ToneGenerator", seconds=0.5), n("stt", "SpeechToText", credential=cred)],
            [e("tone", "stt")],
        )
        wf = await create_workflow(client, owner, graph)
        openai.failures.append((500, {}))
        done = await run(client, owner, wf)
        assert done["status"] == "failed"
        error = node(done, "stt")["error"]
        assert error["code"] == "provider_error"
        assert error["message"] == ("the AI provider refused the request (HTTP 500): scripted 500")
        assert node(done, "stt")["credits_used"] == 0
        assert len(openai.requests) == 1
        openai.failures.append((429, {"Retry-After": "0"}))
        again = await run(client, owner, wf)
        assert again["status"] == "completed", again
        assert len(openai.requests) == 3

    async def test_another_accounts_credential_is_not_there(
        self, client: httpx.AsyncClient, owner: User, other: User, openai: FakeServer
    ) -> None:
        theirs = await openai_credential(client, other, openai)
        graph = g(
            [n("voice", "ToneGenerator"), n("stt", "SpeechToText", credential=theirs)],
            [e("voice", "stt")],
        )
        r = await client.post(
            "/api/v1/workflows", json={"name": "w", "graph_json": graph}, headers=owner.headers
        )
        problem = assert_problem(r, 400, "invalid_graph")
        assert problem["errors"] == [
            {
                "pointer": "/graph_json/nodes/1/data/credential",
                "message": f"no credential {theirs} in this account",
            }
        ]
        assert openai.requests == []

    async def test_captions_need_timed_text(self, client: httpx.AsyncClient, owner: User) -> None:
        graph = g(
            [
                n("bg", "GradientBackground", width=32, height=32),
                n("tone", "ToneGenerator", seconds=0.5),
                n("video", "ImageAudioToVideo"),
                n("words", "TextInput", text="just words, no timings"),
                n("captioned", "Captions"),
            ],
            [
                e("bg", "video", "image"),
                e("tone", "video", "audio"),
                e("video", "captioned", "video"),
                e("words", "captioned", "text"),
            ],
        )
        done = await run(client, owner, await create_workflow(client, owner, graph))
        assert done["status"] == "failed"
        error = node(done, "captioned")["error"]
        assert "not a transcription with timings" in error["message"]


class TestElevenLabs:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"http_allowlist": ["127.0.0.1"], "rate_limit_api_key": 10_000}

    async def credential(
        self, client: httpx.AsyncClient, user: User, server: FakeServer, key: str = XI_KEY
    ) -> str:
        made = await create(client, user, {"base_url": server.url, "api_key": key}, "elevenlabs")
        assert made["fields"] == {"base_url": server.url}
        return str(made["id"])

    async def test_speech_with_a_voice_id_and_model(
        self, client: httpx.AsyncClient, owner: User, eleven: FakeServer
    ) -> None:
        cred = await self.credential(client, owner, eleven)
        graph = g(
            [
                n("t", "TextInput", text="Welcome to the show."),
                n(
                    "voice",
                    "TextToSpeech",
                    voice=ELEVENLABS_VOICE,
                    model="eleven_flash_v2_5",
                    credential=cred,
                ),
            ],
            [e("t", "voice")],
        )
        done = await run(client, owner, await create_workflow(client, owner, graph))
        assert done["status"] == "completed", done
        (request,) = eleven.requests
        assert request.path == (
            f"/v1/text-to-speech/{ELEVENLABS_VOICE}?output_format=mp3_44100_128"
        )
        assert request.headers["xi-api-key"] == XI_KEY
        assert "Authorization" not in request.headers
        assert json.loads(request.body) == {
            "text": "Welcome to the show.",
            "model_id": "eleven_flash_v2_5",
        }
        mp3 = await content(client, owner, done, "voice")
        with av.open(io.BytesIO(mp3)) as container:
            assert container.streams.audio[0].codec_context.codec.canonical_name == "mp3"
            assert sum(f.samples for f in container.decode(audio=0)) > 0

    async def test_the_providers_error_is_quoted_and_retries_honour_retry_after(
        self, client: httpx.AsyncClient, owner: User, eleven: FakeServer
    ) -> None:
        cred = await self.credential(client, owner, eleven)
        graph = g(
            [
                n("t", "TextInput", text="hi"),
                n("voice", "TextToSpeech", voice="nosuchvoiceid0000000", credential=cred),
            ],
            [e("t", "voice")],
        )
        eleven.failures.append((429, {"Retry-After": "0"}))
        done = await run(client, owner, await create_workflow(client, owner, graph))
        assert done["status"] == "failed"
        error = node(done, "voice")["error"]
        assert error["code"] == "provider_error"
        assert error["message"] == (
            "the AI provider refused the request (HTTP 404): A voice with the voice_id "
            "nosuchvoiceid0000000 was not found."
        )
        assert len(eleven.requests) == 2  # the 429, then the answer
        assert node(done, "voice")["credits_used"] == 0

    async def test_speech_is_not_sent_twice_after_a_server_error(
        self, client: httpx.AsyncClient, owner: User, eleven: FakeServer
    ) -> None:
        cred = await self.credential(client, owner, eleven)
        graph = g(
            [n("t", "TextInput", text="hi"), n("voice", "TextToSpeech", credential=cred)],
            [e("t", "voice")],
        )
        eleven.failures.append((503, {}))
        done = await run(client, owner, await create_workflow(client, owner, graph))
        assert done["status"] == "failed"
        assert "HTTP 503" in node(done, "voice")["error"]["message"]
        assert len(eleven.requests) == 1

    async def test_connection_test(
        self, client: httpx.AsyncClient, owner: User, eleven: FakeServer
    ) -> None:
        good = await self.credential(client, owner, eleven)
        r = await client.post(f"/api/v1/credentials/{good}/test", headers=owner.headers)
        assert r.json() == {
            "ok": True,
            "status": 200,
            "message": "the provider accepted the credential",
        }
        assert eleven.requests[-1].path == "/v1/user"
        assert eleven.requests[-1].headers["xi-api-key"] == XI_KEY
        refused_key = "xi-refused-0011223344556677"
        bad = await self.credential(client, owner, eleven, refused_key)
        r = await client.post(f"/api/v1/credentials/{bad}/test", headers=owner.headers)
        assert r.json()["ok"] is False and r.json()["status"] == 401
        assert "Invalid API key" in r.json()["message"] and refused_key not in r.text

    async def test_each_node_takes_only_its_kinds(
        self, client: httpx.AsyncClient, owner: User, eleven: FakeServer
    ) -> None:
        xi = await self.credential(client, owner, eleven)
        rep = (await create(client, owner, {"api_token": "r8_" + "x" * 20}, "replicate"))["id"]
        graph = g(
            [
                n("t", "TextInput", text="hi"),
                n("llm", "LLMText", credential=xi),
                n("voice", "TextToSpeech", credential=rep),
            ],
            [e("t", "llm"), e("t", "voice")],
        )
        r = await client.post(
            "/api/v1/workflows", json={"name": "w", "graph_json": graph}, headers=owner.headers
        )
        assert assert_problem(r, 400, "invalid_graph")["errors"] == [
            {
                "pointer": "/graph_json/nodes/1/data/credential",
                "message": f"credential {xi} is a elevenlabs credential; this node takes an "
                "openai one",
            },
            {
                "pointer": "/graph_json/nodes/2/data/credential",
                "message": f"credential {rep} is a replicate credential; this node takes an "
                "openai or elevenlabs one",
            },
        ]


class TestPrivateAddressesRefused:
    """Without an allow-list, a credential naming a private address is refused: the node
    fails before any byte is sent, and so does the connection test."""

    async def test_openai_and_elevenlabs(
        self, client: httpx.AsyncClient, owner: User, openai: FakeServer, eleven: FakeServer
    ) -> None:
        cred = await openai_credential(client, owner, openai)
        made = await create(
            client, owner, {"base_url": eleven.url, "api_key": XI_KEY}, "elevenlabs"
        )
        graph = g(
            [
                n("tone", "ToneGenerator", seconds=0.5),
                n("stt", "SpeechToText", credential=cred),
                n("t", "TextInput", text="hi"),
                n("voice", "TextToSpeech", credential=made["id"]),
            ],
            [e("tone", "stt"), e("t", "voice")],
        )
        done = await run(client, owner, await create_workflow(client, owner, graph))
        assert done["status"] == "failed"
        for node_id in ("stt", "voice"):
            assert node(done, node_id)["error"]["code"] == "address_refused", done
        r = await client.post(f"/api/v1/credentials/{made['id']}/test", headers=owner.headers)
        assert r.json()["ok"] is False and "refusing to connect" in r.json()["message"]
        assert openai.requests == [] and eleven.requests == []


class TestCredentialKinds:
    async def test_the_kinds_and_their_fields(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await client.get("/api/v1/credential-kinds", headers=owner.headers)
        assert r.status_code == 200
        kinds = {k["kind"]: k for k in r.json()}
        assert list(kinds) == [
            "openai",
            "replicate",
            "fal",
            "comfyui",
            "elevenlabs",
            "http_bearer",
            "http_header",
        ]
        assert kinds["elevenlabs"]["fields"] == [
            {
                "name": "base_url",
                "title": "Base URL",
                "secret": False,
                "required": False,
                "default": "https://api.elevenlabs.io",
                "placeholder": None,
                "description": "http(s) URL of the API",
            },
            {
                "name": "api_key",
                "title": "API key",
                "secret": True,
                "required": True,
                "default": None,
                "placeholder": None,
                "description": None,
            },
        ]
        assert kinds["elevenlabs"]["testable"] and kinds["openai"]["testable"]
        assert not kinds["http_bearer"]["testable"]
        assert kinds["elevenlabs"]["node_types"] == ["TextToSpeech"]
        assert {"ImageToImage", "LLMText", "SpeechToText", "TextToImage", "TextToSpeech"} <= set(
            kinds["openai"]["node_types"]
        )
        secrets = {k: [f["name"] for f in v["fields"] if f["secret"]] for k, v in kinds.items()}
        assert secrets["comfyui"] == ["bearer_token", "password"]

        # The public ElevenLabs API unless another address is given; the key never shown.
        made = await create(client, owner, {"api_key": XI_KEY}, "elevenlabs")
        assert made["fields"] == {"base_url": "https://api.elevenlabs.io"}
        assert made["hint"] == "xi-…3210"

        types = await client.get("/api/v1/node-types", headers=owner.headers)
        by_type = {t["type"]: t for t in types.json()}
        assert by_type["TextToSpeech"]["credential_kinds"] == ["openai", "elevenlabs"]
        assert by_type["SpeechToText"]["credential_kinds"] == ["openai"]
        assert by_type["Captions"]["credential_kinds"] == []

    async def test_needs_authentication(self, client: httpx.AsyncClient) -> None:
        assert_problem(await client.get("/api/v1/credential-kinds"), 401, "unauthorized")
