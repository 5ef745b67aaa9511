"""The scaled-out deployment (PostgreSQL, Redis, an API process and a worker process) with a
ComfyUI node: the worker is killed with SIGKILL while the node waits on ComfyUI, a new
worker attaches to the stored prompt id — ComfyUI sees one submission — and the run
completes with the image."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import httpx
import pytest

from tests.comfyui_fake import SDXL_WORKFLOW, FakeComfyUI, running
from tests.conftest import TEST_SECRET
from tests.live import account
from tests.runs_helpers import e, g, n
from tests.server import ServerProcess, WorkerProcess
from tests.services import RedisServer, redis_server_available
from tests.topology.fleet import OPEN_LIMITS, postgres_database

pytestmark = pytest.mark.slow


def test_worker_sigkill_mid_wait_attaches_to_the_prompt(tmp_path: Path) -> None:
    redis_server_available()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    data = tmp_path / "data"  # one artifact directory for both processes
    try:
        with (
            postgres_database() as url,
            running(FakeComfyUI(steps=50, step_seconds=0.1)) as fake,
            contextlib.ExitStack() as stops,
        ):
            env = {
                **OPEN_LIMITS,
                "NODELOOM_DATABASE_URL": url,
                "NODELOOM_SECRET_KEY": TEST_SECRET,
                "NODELOOM_REDIS_URL": redis.url,
                "NODELOOM_HTTP_ALLOWLIST": '["127.0.0.1/32"]',
            }
            api = ServerProcess(data, env, args=["--no-worker"])
            stops.callback(api.stop)
            api.start()
            worker = WorkerProcess(data, env, concurrency=2)
            stops.callback(lambda: worker.stop())
            worker.start()
            with httpx.Client(base_url=api.base_url, timeout=30) as http:
                _, key = account(http, "comfy-fleet@example.com")
                http.headers["Authorization"] = f"Bearer {key}"
                credential = http.post(
                    "/api/v1/credentials",
                    json={"name": "gpu", "kind": "comfyui", "fields": {"base_url": fake.url}},
                ).json()["id"]
                comfy = n(
                    "comfy",
                    "ComfyUIWorkflow",
                    workflow=SDXL_WORKFLOW,
                    bindings=[{"source": "text1", "node": "6", "input": "text", "type": "text"}],
                    credential=credential,
                )
                graph = g([n("in", "TextInput", text="fleet"), comfy], [e("in", "comfy", "text1")])
                r = http.post("/api/v1/workflows", json={"name": "c", "graph_json": graph})
                assert r.status_code == 201, r.text
                wf = r.json()["id"]
                r = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False})
                run_id = r.json()["run_id"]

                fake.wait_running(timeout=30)
                time.sleep(0.5)
                worker.kill()
                assert len(fake.submissions) == 1
                worker = WorkerProcess(data, env, concurrency=2)
                worker.start()

                deadline = time.monotonic() + 90
                while True:
                    run = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
                    if run["status"] != "running":
                        break
                    assert time.monotonic() < deadline, run
                    time.sleep(0.25)
                assert run["status"] == "completed", run
                assert len(fake.submissions) == 1
                assert fake.submissions[0]["prompt"]["6"]["inputs"]["text"] == "fleet"
                node = next(x for x in run["node_runs"] if x["node_id"] == "comfy")
                image = http.get(f"/api/v1/artifacts/{node['artifact_id']}")
                assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
    finally:
        redis.stop()
