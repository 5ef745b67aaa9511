"""``ComfyUIWorkflow`` against a real ``nodeloom serve`` process and a real fake ComfyUI
(HTTP + WebSocket) on 127.0.0.1: ComfyUI's progress reaches our WebSocket subscriber as
``node.progress`` events; the server killed with SIGKILL mid-wait and restarted attaches to
the queued prompt — ComfyUI sees one submission, the run completes with its image — and the
credential's secret is in no log or file of the data directory."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from PIL import Image
from websockets.asyncio.client import connect

from tests.comfyui_fake import SDXL_WORKFLOW, FakeComfyUI, running
from tests.live import account
from tests.runs_helpers import e, g, n
from tests.server import ServerProcess

pytestmark = pytest.mark.slow

TOKEN = "comfy-live-secret-9876"


def _graph(credential: str) -> dict[str, Any]:
    comfy = n(
        "comfy",
        "ComfyUIWorkflow",
        workflow=SDXL_WORKFLOW,
        bindings=[{"source": "text1", "node": "6", "input": "text", "type": "text"}],
        output={"node": "9"},
        credential=credential,
    )
    text = n("in", "TextInput", text="a lighthouse at night")
    return g([text, comfy], [e("in", "comfy", "text1")])


async def _progress_events(ws_url: str, key: str, run_id: str, until: int) -> list[dict[str, Any]]:
    """``node.progress`` events of the ComfyUI node, until ``until`` of them arrived."""
    found: list[dict[str, Any]] = []
    async with connect(ws_url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        await ws.send(orjson.dumps({"type": "subscribe", "run_id": run_id}).decode())
        async with asyncio.timeout(20):
            while len(found) < until:
                message = orjson.loads(await ws.recv())
                if message.get("type") == "node.progress" and message.get("node_id") == "comfy":
                    found.append(message)
    return found


def test_progress_then_sigkill_mid_wait_attaches_without_a_second_prompt(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = ServerProcess(
        data_dir,
        env={
            "NODELOOM_RATE_LIMIT_API_KEY": "100000",
            "NODELOOM_HTTP_ALLOWLIST": '["127.0.0.1/32"]',
            "NODELOOM_LOG_LEVEL": "INFO",
        },
    )
    with running(FakeComfyUI(token=TOKEN, steps=60, step_seconds=0.1)) as fake:
        server.start()
        try:
            with httpx.Client(base_url=server.base_url, timeout=10) as http:
                _jwt, key = account(http, "comfy@example.com")
                http.headers["Authorization"] = f"Bearer {key}"
                r = http.post(
                    "/api/v1/credentials",
                    json={
                        "name": "gpu",
                        "kind": "comfyui",
                        "fields": {"base_url": fake.url, "bearer_token": TOKEN},
                    },
                )
                assert r.status_code == 201, r.text
                r = http.post(
                    "/api/v1/workflows",
                    json={"name": "comfy", "graph_json": _graph(r.json()["id"])},
                )
                assert r.status_code == 201, r.text
                wf = r.json()["id"]
                r = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False})
                assert r.status_code == 202, r.text
                run_id = r.json()["run_id"]

                ws_url = server.base_url.replace("http://", "ws://") + "/api/v1/ws"
                progress = asyncio.run(_progress_events(ws_url, key, run_id, until=3))
                fractions = [m["data"]["progress"] for m in progress]
                assert fractions == sorted(fractions), fractions  # KSampler steps, in order
                assert 0 < fractions[-1] < 1, fractions
                assert fake.running is not None  # still generating

                server.kill()  # SIGKILL while the node waits on ComfyUI
                assert len(fake.submissions) == 1
                server.start()

                deadline = time.monotonic() + 40
                while True:
                    run = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
                    if run["status"] != "running":
                        break
                    assert time.monotonic() < deadline, run
                    time.sleep(0.2)
                assert run["status"] == "completed", run
                assert len(fake.submissions) == 1  # attached, never queued twice
                node = next(x for x in run["node_runs"] if x["node_id"] == "comfy")
                image = http.get(f"/api/v1/artifacts/{node['artifact_id']}")
                with Image.open(io.BytesIO(image.content)) as png:
                    assert png.format == "PNG" and png.size == (96, 64)
        finally:
            server.stop()
    for path in data_dir.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
