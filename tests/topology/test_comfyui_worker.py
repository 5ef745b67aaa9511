"""The scaled-out deployment (PostgreSQL, Redis, an API process and a worker process) with a
ComfyUI node: the worker is killed with SIGKILL while the node waits on ComfyUI, a new
worker attaches to the stored prompt id — ComfyUI sees one submission — and the run
completes with the image. On a fleet, the worker's view of each server reaches the API's
/metrics through Redis, and the node run names the server."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

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


@dataclass
class Deployment:
    """An API process and a worker on one PostgreSQL, Redis and artifact directory, and an
    HTTP client with an account's key."""

    data: Path
    env: dict[str, str]
    worker: WorkerProcess
    http: httpx.Client

    def start_another_worker(self) -> None:
        """A new worker in place of the one killed (it adopts that one's jobs)."""
        self.worker = WorkerProcess(self.data, self.env, concurrency=2)
        self.worker.start()


@contextlib.contextmanager
def deployment(tmp_path: Path, fake: FakeComfyUI, email: str) -> Iterator[Deployment]:
    redis_server_available()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    data = tmp_path / "data"  # one artifact directory for both processes
    try:
        with postgres_database() as url, contextlib.ExitStack() as stops:
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
            worker.start()
            with httpx.Client(base_url=api.base_url, timeout=30) as http:
                _, key = account(http, email)
                http.headers["Authorization"] = f"Bearer {key}"
                setup = Deployment(data, env, worker, http)
                stops.callback(lambda: setup.worker.stop())
                yield setup
    finally:
        redis.stop()


def finished(http: httpx.Client, wf: str, run_id: str) -> dict[str, Any]:
    """The run once it is no longer running (90 s at most)."""
    deadline = time.monotonic() + 90
    while (run := http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json())["status"] == "running":
        assert time.monotonic() < deadline, run
        time.sleep(0.25)
    return cast(dict[str, Any], run)


def text_workflow(http: httpx.Client, credential: str, text: str) -> str:
    """A saved workflow whose ComfyUI node (on ``credential``) is prompted with ``text``."""
    comfy = n(
        "comfy",
        "ComfyUIWorkflow",
        workflow=SDXL_WORKFLOW,
        bindings=[{"source": "text1", "node": "6", "input": "text", "type": "text"}],
        credential=credential,
    )
    graph = g([n("in", "TextInput", text=text), comfy], [e("in", "comfy", "text1")])
    r = http.post("/api/v1/workflows", json={"name": "c", "graph_json": graph})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_worker_sigkill_mid_wait_attaches_to_the_prompt(tmp_path: Path) -> None:
    with (
        running(FakeComfyUI(steps=50, step_seconds=0.1)) as fake,
        deployment(tmp_path, fake, "comfy-fleet@example.com") as setup,
    ):
        http = setup.http
        credential = http.post(
            "/api/v1/credentials",
            json={"name": "gpu", "kind": "comfyui", "fields": {"base_url": fake.url}},
        ).json()["id"]
        wf = text_workflow(http, credential, "fleet")
        r = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False})
        run_id = r.json()["run_id"]

        fake.wait_running(timeout=30)
        time.sleep(0.5)
        setup.worker.kill()
        assert len(fake.submissions) == 1
        setup.start_another_worker()

        run = finished(http, wf, run_id)
        assert run["status"] == "completed", run
        assert len(fake.submissions) == 1
        assert fake.submissions[0]["prompt"]["6"]["inputs"]["text"] == "fleet"
        node = next(x for x in run["node_runs"] if x["node_id"] == "comfy")
        image = http.get(f"/api/v1/artifacts/{node['artifact_id']}")
        assert image.status_code == 200 and image.content.startswith(b"\x89PNG")


def test_a_workers_fleet_servers_show_in_the_apis_metrics(tmp_path: Path) -> None:
    with (
        running(FakeComfyUI(steps=2, step_seconds=0.05)) as fake,
        deployment(tmp_path, fake, "comfy-metrics@example.com") as setup,
    ):
        http = setup.http
        fields = {"servers": [{"base_url": fake.url, "name": "gpu0"}]}
        credential = http.post(
            "/api/v1/credentials",
            json={"name": "gpus", "kind": "comfyui", "fields": fields},
        ).json()["id"]
        comfy = n("comfy", "ComfyUIWorkflow", workflow=SDXL_WORKFLOW, credential=credential)
        r = http.post("/api/v1/workflows", json={"name": "c", "graph_json": g([comfy], [])})
        wf = r.json()["id"]
        run_id = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False}).json()[
            "run_id"
        ]
        run = finished(http, wf, run_id)
        assert run["status"] == "completed", run
        assert run["node_runs"][0]["server"] == "gpu0"

        wanted = f'nodeloom_comfyui_server_up{{fleet="credential:{credential}",server="gpu0"'
        deadline = time.monotonic() + 60  # the worker reports every 5 s
        while True:
            lines = [
                line for line in http.get("/metrics").text.splitlines() if line.startswith(wanted)
            ]
            if lines:
                break
            assert time.monotonic() < deadline, "the worker's fleet never showed"
            time.sleep(0.5)
        (line,) = lines
        assert ',process="' in line and line.endswith(" 1")


def test_a_server_drained_through_the_api_gets_no_prompt_from_the_worker(tmp_path: Path) -> None:
    """The click lands on the API process, the prompts are routed by the worker: the drain
    reaches it through the database (within a check, seen in the worker's own figures on
    /metrics), holds for prompts sent at once, and holds for a worker started afterwards."""
    servers = [FakeComfyUI(steps=4, step_seconds=0.05) for _ in range(2)]
    with (
        running(servers[0]) as drained,
        running(servers[1]) as other,
        deployment(tmp_path, drained, "comfy-drain@example.com") as setup,
    ):
        http = setup.http
        fields = {
            "servers": [{"base_url": s.url, "name": f"gpu{i}"} for i, s in enumerate(servers)]
        }
        credential = http.post(
            "/api/v1/credentials", json={"name": "gpus", "kind": "comfyui", "fields": fields}
        ).json()["id"]
        wf = text_workflow(http, credential, "x")

        def runs(count: int) -> None:
            started = [
                http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False}).json()
                for _ in range(count)
            ]
            for body in started:
                assert finished(http, wf, body["run_id"])["status"] == "completed"

        runs(1)  # the worker now has the fleet
        (row,) = [
            s
            for s in http.get(f"/api/v1/credentials/{credential}/servers").json()
            if s["base_url"] == drained.url
        ]
        r = http.post(f"/api/v1/credentials/{credential}/servers/{row['id']}/drain")
        assert r.status_code == 200 and r.json()["draining"] is True, r.text
        wanted = (
            f'nodeloom_comfyui_server_draining{{fleet="credential:{credential}",server="gpu0",'
            'process="'
        )
        deadline = time.monotonic() + 60  # the worker reads drains and reports every 5 s
        while not any(
            line.startswith(wanted) and line.endswith(" 1")
            for line in http.get("/metrics").text.splitlines()
        ):
            assert time.monotonic() < deadline, "the worker never saw the drain"
            time.sleep(0.5)
        before = len(drained.submissions)
        runs(4)  # at once: undrained, gpu0 would take its share
        assert len(drained.submissions) == before

        setup.worker.stop()
        setup.start_another_worker()  # reads the drains as it starts
        runs(2)
        assert len(drained.submissions) == before
        assert len(other.submissions) == 7 - before
