"""The scaled-out deployment (PostgreSQL, an API process, a ``nodeloom worker --concurrency
2``): nodes that only wait on a provider are jobs of their own queue, served with many more
job slots than the computing nodes' queue (engine/dispatch/waits.py). Twenty runs waiting
3 s each on a fake Replicate all wait at once, though the worker runs two computing nodes
at a time — which Delay nodes, on the computing queue, still respect — and a worker killed
with SIGKILL mid-wait leaves its node to the next one, which attaches to the prediction
instead of submitting it again; a run cancelled mid-wait aborts its waiting job."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live import account
from tests.providers.fakes import REPLICATE_TOKEN, FakeReplicate
from tests.runs_helpers import e, g, n
from tests.server import ServerProcess, WorkerProcess
from tests.topology.fleet import postgres_database, query, replicate_fleet_env, wait_runs

pytestmark = pytest.mark.slow

RUNS = 20
SECONDS = 3.0


@pytest.fixture
def replicate_fake(tmp_path: Path) -> Iterator[FakeReplicate]:
    (tmp_path / "fake").mkdir()
    fake = FakeReplicate(tmp_path / "fake")
    yield fake
    fake.stop()


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of ``spans`` (start, end) that overlap at one instant."""
    edges = sorted([(s, 1) for s, _ in spans] + [(f, -1) for _, f in spans])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _execute(http: httpx.Client, wf: str, count: int) -> dict[str, str]:
    runs = {}
    for _ in range(count):
        r = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False})
        assert r.status_code in (200, 202), r.text
        runs[r.json()["run_id"]] = wf
    return runs


def _workflow(http: httpx.Client, name: str, graph: dict[str, Any]) -> str:
    r = http.post("/api/v1/workflows", json={"name": name, "graph_json": graph})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_provider_waits_do_not_take_the_workers_job_slots(
    tmp_path: Path, replicate_fake: FakeReplicate
) -> None:
    replicate_fake.script.seconds = SECONDS
    with postgres_database() as url:
        env = replicate_fleet_env(url, replicate_fake.url + "/v1")
        api = ServerProcess(tmp_path / "api", env, args=["--no-worker"])
        worker = WorkerProcess(tmp_path / "w1", env, concurrency=2)
        second = WorkerProcess(tmp_path / "w2", env, concurrency=2)
        try:
            api.start()
            worker.start()
            with httpx.Client(base_url=api.base_url, timeout=30) as http:
                _, key = account(http, "waits@example.com")
                http.headers["Authorization"] = f"Bearer {key}"
                fields = {"api_token": REPLICATE_TOKEN}
                r = http.post(
                    "/api/v1/credentials", json={"name": "r", "kind": "replicate", "fields": fields}
                )
                assert r.status_code == 201, r.text
                gen = n(
                    "gen",
                    "ReplicateModel",
                    credential=r.json()["id"],
                    model="black-forest-labs/flux-schnell",
                    bindings={"prompt": "text"},
                )
                provider = _workflow(
                    http, "p", g([n("in", "TextInput", text="sea"), gen], [e("in", "gen", "text")])
                )
                delay = n("wait", "Delay", seconds=1)
                slow = _workflow(
                    http, "d", g([n("in", "TextInput", text="x"), delay], [e("in", "wait", "text")])
                )

                # 20 provider waits of 3 s: with two job slots they would take 30 s.
                started = time.monotonic()
                done = wait_runs(http, _execute(http, provider, RUNS), timeout=60)
                elapsed = time.monotonic() - started
                assert all(run["status"] == "completed" for run in done.values()), done
                spans = [
                    (job.started, job.started + SECONDS) for job in replicate_fake.jobs.values()
                ]
                assert replicate_fake.submissions == RUNS
                assert _most_at_once(spans) >= RUNS // 2, spans
                assert elapsed < RUNS * SECONDS / 2 * 0.6, elapsed
                queues = query(url, "SELECT DISTINCT queue_name FROM procrastinate_jobs")
                assert all(q == "waits" for (q,) in queues), queues  # failed ones are kept

                # Delay holds an execution slot: on the computing queue, two at a time.
                done = wait_runs(http, _execute(http, slow, 6), timeout=60)
                assert all(run["status"] == "completed" for run in done.values()), done
                delays = [
                    (_ts(x["started_at"]), _ts(x["finished_at"]))
                    for run in done.values()
                    for x in run["node_runs"]
                    if x["node_id"] == "wait"
                ]
                assert _most_at_once(delays) == 2, delays

                # SIGKILL mid-wait: the next worker attaches to the same prediction.
                replicate_fake.script.seconds = 8
                submitted = replicate_fake.submissions
                (run_id,) = _execute(http, provider, 1)
                deadline = time.monotonic() + 30
                while replicate_fake.submissions == submitted:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
                time.sleep(0.5)
                worker.kill()
                second.start()
                run = wait_runs(http, {run_id: provider}, timeout=90)[run_id]
                assert run["status"] == "completed", run
                assert replicate_fake.submissions == submitted + 1
                killed = query(
                    url,
                    "SELECT queue_name FROM procrastinate_jobs WHERE status = 'failed' "
                    "AND args->>'run_id' = :r",
                    r=run_id,
                )
                assert [q for (q,) in killed] == ["waits"], killed

                # Cancelled mid-wait: the waiting job is aborted, the prediction cancelled.
                submitted = replicate_fake.submissions
                (run_id,) = _execute(http, provider, 1)
                deadline = time.monotonic() + 30
                while replicate_fake.submissions == submitted:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
                r = http.post(f"/api/v1/workflows/{provider}/runs/{run_id}/cancel")
                assert r.status_code in (200, 202), r.text
                run = wait_runs(http, {run_id: provider}, timeout=8)[run_id]
                assert run["status"] == "cancelled", run
                deadline = time.monotonic() + 10
                while not replicate_fake.cancels:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
        finally:
            for process in (second, worker, api):
                process.stop()
