"""``ComfyUIWorkflow`` (and its video and audio variants) through our API, against a real fake
ComfyUI server on 127.0.0.1 (HTTP and WebSocket), on SQLite and PostgreSQL: bindings of
upstream text, number and image, the output image, video or sound as an artifact of our
types, ComfyUI's errors quoted, cancel (also while the prompt is being queued), size limits,
and the checks made when the workflow is saved."""

from __future__ import annotations

import asyncio
import copy
import io
import threading
import time
from collections.abc import Iterator
from typing import Any

import av
import httpx
import pytest
from PIL import Image

from tests.api.test_auth import assert_problem
from tests.comfyui_fake import (
    AUDIO_WORKFLOW,
    SDXL_WORKFLOW,
    VIDEO_FPS,
    VIDEO_FRAMES,
    VIDEO_SIZE,
    VIDEO_WORKFLOW,
    FakeComfyUI,
    running,
)
from tests.conftest import User
from tests.runs_helpers import create_workflow, e, g, n, wait_for_run

TOKEN = "comfy-secret-token-1234"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fake() -> Iterator[FakeComfyUI]:
    with running(FakeComfyUI(token=TOKEN)) as server:
        yield server


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"http_allowlist": ["127.0.0.1"], "rate_limit_api_key": 10_000}


async def comfy_credential(client: httpx.AsyncClient, user: User, fake: FakeComfyUI) -> str:
    r = await client.post(
        "/api/v1/credentials",
        json={
            "name": "gpu box",
            "kind": "comfyui",
            "fields": {"base_url": fake.url, "bearer_token": TOKEN},
        },
        headers=user.headers,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def comfy_node(credential: str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "workflow": copy.deepcopy(SDXL_WORKFLOW),
        "bindings": [
            {"source": "text1", "node": "6", "input": "text", "type": "text"},
            {"source": "text2", "node": "3", "input": "seed", "type": "number"},
        ],
        "output": {"node": "9"},
        "credential": credential,
    }
    data.update(overrides)
    return n("comfy", "ComfyUIWorkflow", **data)


def text_graph(node: dict[str, Any], prompt: str = "a red boat at dawn") -> dict[str, Any]:
    return g(
        [n("prompt", "TextInput", text=prompt), n("seed", "TextInput", text="42"), node],
        [e("prompt", "comfy", "text1"), e("seed", "comfy", "text2")],
    )


def comfy_run(run: dict[str, Any]) -> dict[str, Any]:
    return next(x for x in run["node_runs"] if x["node_id"] == "comfy")


async def run_workflow(
    client: httpx.AsyncClient, user: User, graph: dict[str, Any], timeout: float = 30
) -> dict[str, Any]:
    wf = await create_workflow(client, user, graph)
    r = await client.post(
        f"/api/v1/workflows/{wf}/execute", json={"cache": False}, headers=user.headers
    )
    assert r.status_code == 202, r.text
    return await wait_for_run(client, user, wf, r.json()["run_id"], timeout=timeout)


class TestRuns:
    async def test_text_and_number_bound_and_the_image_kept(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        run = await run_workflow(client, owner, text_graph(comfy_node(credential)))
        assert run["status"] == "completed", run
        node = comfy_run(run)
        assert node["credits_used"] == 10
        (submitted,) = fake.submissions
        prompt = submitted["prompt"]
        assert prompt["6"]["inputs"]["text"] == "a red boat at dawn"
        assert prompt["3"]["inputs"]["seed"] == 42
        assert prompt["7"]["inputs"]["text"] == "blurry"  # not bound: the workflow's own
        assert submitted["client_id"]
        assert submitted["prompt_id"]
        assert set(fake.authorizations) == {f"Bearer {TOKEN}"}
        r = await client.get(f"/api/v1/artifacts/{node['artifact_id']}", headers=owner.headers)
        assert r.status_code == 200
        assert r.headers["content-type"] == "image/png"
        with Image.open(io.BytesIO(r.content)) as image:
            assert image.format == "PNG" and image.size == (96, 64)
        assert r.content == next(iter(fake.files.values()))

    async def test_an_upstream_image_is_uploaded_and_loaded(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        workflow = {
            "1": {"class_type": "LoadImage", "inputs": {"image": "example.png"}},
            "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "x", "clip": ["1", 0]}},
            "3": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}},
        }
        graph = g(
            [
                n("words", "TextInput", text="Hi"),
                n("card", "RenderText", width=120, height=80),
                comfy_node(
                    credential,
                    workflow=workflow,
                    bindings=[
                        {"source": "image1", "node": "1", "input": "image", "type": "image"},
                        {"source": "text1", "node": "2", "input": "text", "type": "text"},
                    ],
                    output={"node": "3"},
                ),
            ],
            [e("words", "card"), e("card", "comfy", "image1"), e("words", "comfy", "text1")],
        )
        run = await run_workflow(client, owner, graph)
        assert run["status"] == "completed", run
        (name,) = fake.uploads
        with Image.open(io.BytesIO(fake.uploads[name])) as uploaded:
            assert uploaded.size == (120, 80)
        prompt = fake.submissions[0]["prompt"]
        assert prompt["1"]["inputs"]["image"] == name
        assert prompt["2"]["inputs"]["text"] == "Hi"
        node = comfy_run(run)
        r = await client.get(f"/api/v1/artifacts/{node['artifact_id']}", headers=owner.headers)
        with Image.open(io.BytesIO(r.content)) as image:
            assert image.size == (120, 80)

    async def test_an_execution_error_is_quoted_and_charges_nothing(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        workflow = copy.deepcopy(SDXL_WORKFLOW)
        workflow["8"] = {"class_type": "Explode", "inputs": {"samples": ["3", 0]}}
        run = await run_workflow(
            client, owner, text_graph(comfy_node(credential, workflow=workflow))
        )
        assert run["status"] == "failed"
        node = comfy_run(run)
        assert node["status"] == "failed" and node["credits_used"] == 0
        assert node["error"]["code"] == "provider_error"
        message = node["error"]["message"]
        assert "node 8 (Explode)" in message
        assert "CUDA out of memory. Tried to allocate 20.00 GiB" in message
        assert TOKEN not in str(run)

    async def test_a_refused_prompt_is_quoted(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        workflow = copy.deepcopy(SDXL_WORKFLOW)
        workflow["8"] = {"class_type": "NoSuchNode", "inputs": {}}
        run = await run_workflow(
            client, owner, text_graph(comfy_node(credential, workflow=workflow))
        )
        message = comfy_run(run)["error"]["message"]
        assert "HTTP 400" in message
        # ComfyUI stops at an unknown class, naming it and the node.
        assert "Cannot execute because node NoSuchNode does not exist" in message
        assert "Node ID '#8'" in message
        assert fake.submissions == []

    async def test_a_missing_input_is_quoted_with_its_meaning(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        workflow = {
            "1": {"class_type": "EmptyImage", "inputs": {"height": 64, "batch_size": 1}},
            "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}},
        }
        node = comfy_node(credential, workflow=workflow, bindings=[], output={"node": "2"})
        run = await run_workflow(client, owner, g([node], []))
        failed = comfy_run(run)
        assert failed["status"] == "failed" and failed["credits_used"] == 0
        message = failed["error"]["message"]
        assert message == (
            "ComfyUI refused the workflow (HTTP 400): Prompt outputs failed validation; "
            "node 1 (EmptyImage): Required input is missing: width; "
            "Required input is missing: color"
        )
        assert fake.submissions == []

    async def test_an_oversized_output_is_refused(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI, app: Any
    ) -> None:
        app.state.ctx.settings.max_artifact_bytes = 4_000  # the fake's 96x64 noise is ~18 KB
        credential = await comfy_credential(client, owner, fake)
        run = await run_workflow(client, owner, text_graph(comfy_node(credential)))
        node = comfy_run(run)
        assert node["status"] == "failed"
        assert node["error"]["code"] == "limit_exceeded", node
        assert node["error"]["message"] == (
            "ComfyUI's output is larger than the download limit of 4,000 bytes"
        )

    async def test_cancel_interrupts_and_deletes_the_prompt(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        fake.steps, fake.step_seconds = 200, 0.05  # 10 s unless stopped
        credential = await comfy_credential(client, owner, fake)
        wf = await create_workflow(client, owner, text_graph(comfy_node(credential)))
        r = await client.post(
            f"/api/v1/workflows/{wf}/execute", json={"cache": False}, headers=owner.headers
        )
        run_id = r.json()["run_id"]
        prompt_id = await asyncio.to_thread(fake.wait_running)
        started = time.monotonic()
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code in (200, 202), r.text
        run = await wait_for_run(client, owner, wf, run_id)
        assert time.monotonic() - started < 5
        assert run["status"] in ("failed", "cancelled"), run
        assert {"prompt_id": prompt_id} in fake.interrupts
        assert prompt_id in fake.deletes
        assert len(fake.submissions) == 1

    async def test_a_cancel_while_the_prompt_is_queued_interrupts_it_once_queued(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        # ComfyUI holds POST /prompt (the prompt not yet queued) until the run is cancelled:
        # an interrupt sent then would miss the prompt, which would run to its end.
        fake.steps, fake.step_seconds = 200, 0.05  # 10 s unless stopped
        fake.hold = threading.Event()
        credential = await comfy_credential(client, owner, fake)
        wf = await create_workflow(client, owner, text_graph(comfy_node(credential)))
        r = await client.post(
            f"/api/v1/workflows/{wf}/execute", json={"cache": False}, headers=owner.headers
        )
        run_id = r.json()["run_id"]
        assert await asyncio.to_thread(fake.received.wait, 10)
        started = time.monotonic()
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202, r.text
        await asyncio.sleep(0.2)  # the engine stops the node mid-call (else just after: alike)
        assert fake.interrupts == []  # nothing sent while the prompt is not queued yet
        fake.hold.set()
        run = await wait_for_run(client, owner, wf, run_id)
        assert run["status"] == "cancelled", run
        assert comfy_run(run)["status"] == "cancelled"
        assert time.monotonic() - started < 5
        (submitted,) = fake.submissions
        prompt_id = submitted["prompt_id"]
        assert {"prompt_id": prompt_id} in fake.interrupts
        assert prompt_id in fake.deletes
        for _ in range(100):  # it stops at the next step instead of running its 10 s
            if fake.running != prompt_id:
                break
            await asyncio.sleep(0.05)
        assert fake.running != prompt_id
        entry = fake.history.get(prompt_id)  # none: deleted before it started
        assert entry is None or entry["status"]["messages"][0][0] == "execution_interrupted"

    async def test_a_private_address_is_refused_without_the_allow_list(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI, app: Any
    ) -> None:
        app.state.ctx.settings.http_allowlist = []
        credential = await comfy_credential(client, owner, fake)
        run = await run_workflow(client, owner, text_graph(comfy_node(credential)))
        node = comfy_run(run)
        assert node["error"]["code"] == "address_refused", node
        assert fake.submissions == [] and fake.authorizations == []


def media_graph(node_type: str, credential: str, workflow: dict[str, Any]) -> dict[str, Any]:
    node = n(
        "comfy",
        node_type,
        workflow=workflow,
        bindings=[{"source": "text1", "node": "6", "input": "text", "type": "text"}],
        credential=credential,
    )
    return g(
        [n("prompt", "TextInput", text="a fox in snow"), node], [e("prompt", "comfy", "text1")]
    )


def video_workflow(output: str) -> dict[str, Any]:
    """The video workflow with its frames saved by ``output``: VideoHelperSuite's combine
    (as MP4, GIF or animated WebP), core SaveVideo (an MP4), or SaveAnimatedWEBP."""
    workflow = copy.deepcopy(VIDEO_WORKFLOW)
    if output.startswith("VHS_VideoCombine"):
        workflow["50"]["inputs"]["format"] = output.partition(":")[2] or "video/h264-mp4"
    elif output == "SaveVideo":
        workflow["50"] = {"class_type": "CreateVideo", "inputs": {"fps": 16, "images": ["8", 0]}}
        workflow["51"] = {
            "class_type": "SaveVideo",
            "inputs": {
                "filename_prefix": "video/ComfyUI",
                "format": "auto",
                "codec": "auto",
                "video": ["50", 0],
            },
        }
    else:
        workflow["50"] = {
            "class_type": output,
            "inputs": {
                "filename_prefix": "ComfyUI",
                "fps": 8.0,
                "lossless": False,
                "quality": 80,
                "method": "default",
                "images": ["8", 0],
            },
        }
    return workflow


def decoded_video(data: bytes) -> tuple[str, str, int, tuple[int, int]]:
    """(container, codec, frames, size) of an MP4, decoded with PyAV."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(stream))
        size = (stream.codec_context.width, stream.codec_context.height)
        return container.format.name, stream.codec_context.name, frames, size


class TestMedia:
    @pytest.mark.parametrize(
        "output",
        ["VHS_VideoCombine", "VHS_VideoCombine:image/gif", "SaveVideo", "SaveAnimatedWEBP"],
    )
    async def test_a_video_output_becomes_an_mp4(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI, output: str
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        graph = media_graph("ComfyUIWorkflowVideo", credential, video_workflow(output))
        run = await run_workflow(client, owner, graph, timeout=60)
        assert run["status"] == "completed", run
        node = comfy_run(run)
        assert node["credits_used"] == 10 + 2  # a run, and 1 a started second of the 2 s
        assert fake.submissions[0]["prompt"]["6"]["inputs"]["text"] == "a fox in snow"
        r = await client.get(f"/api/v1/artifacts/{node['artifact_id']}", headers=owner.headers)
        assert r.status_code == 200
        assert r.headers["content-type"] == "video/mp4"
        formats, codec, frames, size = decoded_video(r.content)
        assert "mp4" in formats.split(",") and codec == "h264"
        assert size == VIDEO_SIZE and frames == VIDEO_FRAMES
        r = await client.get(
            f"/api/v1/artifacts/{node['artifact_id']}/metadata", headers=owner.headers
        )
        meta = r.json()
        assert (meta["width"], meta["height"]) == VIDEO_SIZE
        assert abs(meta["duration_ms"] - 1000 * VIDEO_FRAMES // VIDEO_FPS) <= 150  # 16 at 8 fps

    async def test_a_saved_sound_becomes_an_mp3(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        graph = media_graph("ComfyUIWorkflowAudio", credential, AUDIO_WORKFLOW)
        run = await run_workflow(client, owner, graph, timeout=60)
        assert run["status"] == "completed", run
        node = comfy_run(run)
        assert node["credits_used"] == 10 + 1
        r = await client.get(f"/api/v1/artifacts/{node['artifact_id']}", headers=owner.headers)
        assert r.headers["content-type"] == "audio/mpeg"
        with av.open(io.BytesIO(r.content)) as container:
            assert container.format.name == "mp3"
            stream = container.streams.audio[0]
            samples = sum(frame.samples for frame in container.decode(stream))
            assert abs(samples / stream.codec_context.sample_rate - 1.0) < 0.1  # the 1 s FLAC

    async def test_an_output_of_another_kind_is_named(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        graph = media_graph("ComfyUIWorkflow", credential, VIDEO_WORKFLOW)
        run = await run_workflow(client, owner, graph)
        node = comfy_run(run)
        assert node["status"] == "failed" and node["credits_used"] == 0
        assert node["error"]["message"] == (
            "ComfyUI's workflow produced no image (it made video: use ComfyUIWorkflowVideo)"
        )


class TestConnection:
    async def test_the_credential_is_tested_on_system_stats(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        good = await comfy_credential(client, owner, fake)
        r = await client.post(f"/api/v1/credentials/{good}/test", headers=owner.headers)
        assert r.json() == {
            "ok": True,
            "status": 200,
            "message": "ComfyUI answered (devices: cuda:0 NVIDIA GeForce RTX 4090)",
        }
        r = await client.post(
            "/api/v1/credentials",
            json={
                "name": "stale",
                "kind": "comfyui",
                "fields": {"base_url": fake.url, "bearer_token": "an-old-token-0000"},
            },
            headers=owner.headers,
        )
        bad = r.json()["id"]
        r = await client.post(f"/api/v1/credentials/{bad}/test", headers=owner.headers)
        assert r.json() == {
            "ok": False,
            "status": 401,
            "message": "ComfyUI refused the request (HTTP 401): invalid token",
        }
        assert fake.authorizations == [f"Bearer {TOKEN}", "Bearer an-old-token-0000"]


class TestSaving:
    async def test_bindings_are_checked_with_pointers(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        node = comfy_node(
            credential,
            bindings=[
                {"source": "text1", "node": "60", "input": "text", "type": "text"},
                {"source": "text1", "node": "6", "input": "txt", "type": "text"},
                {"source": "text1", "node": "3", "input": "model", "type": "text"},
                {"source": "text1", "node": "1", "input": "image", "type": "image"},
            ],
            output={"node": "99"},
        )
        r = await client.post(
            "/api/v1/workflows",
            json={"name": "bad", "graph_json": text_graph(node)},
            headers=owner.headers,
        )
        problem = assert_problem(r, 400, "invalid_graph")
        errors = {p["pointer"]: p["message"] for p in problem["errors"]}
        at = "/graph_json/nodes/2/data"
        assert errors[f"{at}/bindings/0/node"].startswith("no node '60' in the workflow")
        assert errors[f"{at}/bindings/1/input"] == (
            "node 6 (CLIPTextEncode) has no input 'txt' (its inputs: text, clip)"
        )
        assert "fed by node 4's output" in errors[f"{at}/bindings/2/input"]
        assert errors[f"{at}/bindings/3/node"].startswith("no node '1'")
        assert errors[f"{at}/output/node"].startswith("no node '99'")

    async def test_the_ui_format_is_refused(
        self, client: httpx.AsyncClient, owner: User, fake: FakeComfyUI
    ) -> None:
        credential = await comfy_credential(client, owner, fake)
        node = comfy_node(credential, workflow={"nodes": [], "links": []}, bindings=[])
        r = await client.post(
            "/api/v1/workflows",
            json={"name": "ui", "graph_json": text_graph(node)},
            headers=owner.headers,
        )
        problem = assert_problem(r, 400, "invalid_graph")
        pointers = [p["pointer"] for p in problem["errors"]]
        assert "/graph_json/nodes/2/data/workflow/nodes" in pointers
        assert "API format" in problem["errors"][0]["message"]

    async def test_a_credential_of_another_kind_or_account_is_refused(
        self, client: httpx.AsyncClient, owner: User, other: User, fake: FakeComfyUI
    ) -> None:
        r = await client.post(
            "/api/v1/credentials",
            json={
                "name": "oai",
                "kind": "openai",
                "fields": {"base_url": "https://api.example.com/v1", "api_key": "sk-x"},
            },
            headers=owner.headers,
        )
        openai = r.json()["id"]
        theirs = await comfy_credential(client, other, fake)
        for credential, message in (
            (openai, f"credential {openai} is a openai credential; this node takes a comfyui one"),
            (theirs, f"no credential {theirs} in this account"),
        ):
            r = await client.post(
                "/api/v1/workflows",
                json={"name": "x", "graph_json": text_graph(comfy_node(credential))},
                headers=owner.headers,
            )
            problem = assert_problem(r, 400, "invalid_graph")
            assert problem["errors"] == [
                {"pointer": "/graph_json/nodes/2/data/credential", "message": message}
            ]
