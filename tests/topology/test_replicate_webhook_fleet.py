"""The scaled-out deployment (PostgreSQL, Redis, an API process and a worker process) with a
Replicate node and webhooks: the worker runs the node and waits, Replicate's deliveries land
on the API process (the public address), and the signal crosses to the worker over Redis —
the run completes long before the fallback poll would have seen the prediction end."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import httpx
import pytest

from tests.live import account
from tests.providers.fakes import REPLICATE_TOKEN, FakeReplicate
from tests.providers.test_hosted import image_graph
from tests.server import ServerProcess, WorkerProcess
from tests.services import RedisServer, redis_server_available
from tests.topology.fleet import postgres_database, replicate_fleet_env

pytestmark = pytest.mark.slow

FALLBACK_POLL = 120  # seconds: the run must not wait for it


def test_a_webhook_on_the_api_process_wakes_the_worker(tmp_path: Path) -> None:
    redis_server_available()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    data = tmp_path / "data"  # one artifact directory for both processes
    fake = FakeReplicate(tmp_path)
    fake.script.webhooks = True
    fake.script.seconds = 2.0
    try:
        with postgres_database() as url, contextlib.ExitStack() as stops:
            env = replicate_fleet_env(
                url,
                fake.url + "/v1",
                NODELOOM_REDIS_URL=redis.url,
                NODELOOM_REPLICATE_WEBHOOK_POLL_SECONDS=str(FALLBACK_POLL),
            )
            api = ServerProcess(data, env, args=["--no-worker"])
            stops.callback(api.stop)
            api.start()
            # The worker hands out the API's address: the base URL is the fleet's.
            worker = WorkerProcess(data, {**env, "NODELOOM_BASE_URL": api.base_url})
            stops.callback(worker.stop)
            worker.start()
            with httpx.Client(base_url=api.base_url, timeout=30) as http:
                _, key = account(http, "replicate-fleet@example.com")
                http.headers["Authorization"] = f"Bearer {key}"
                credential = http.post(
                    "/api/v1/credentials",
                    json={
                        "name": "r",
                        "kind": "replicate",
                        "fields": {"api_token": REPLICATE_TOKEN},
                    },
                ).json()["id"]
                r = http.post(
                    "/api/v1/workflows", json={"name": "r", "graph_json": image_graph(credential)}
                )
                assert r.status_code == 201, r.text
                wf = r.json()["id"]
                started = time.monotonic()
                run_id = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False}).json()[
                    "run_id"
                ]
                deadline = started + 60
                while True:
                    run = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
                    if run["status"] != "running":
                        break
                    assert time.monotonic() < deadline, run
                    time.sleep(0.25)
                assert run["status"] == "completed", run
                # Woken by the Redis signal: not by the fallback poll, nor by the worker's
                # own re-read of its node run (every hook_signals.RECHECK = 10 s).
                took = time.monotonic() - started
                assert took < fake.script.seconds + 6, took
                (job,) = fake.jobs.values()
                assert job.webhook and job.webhook.startswith(
                    api.base_url + "/api/v1/provider-hooks/"
                )
                assert ("completed", "succeeded", 200) in fake.deliveries
                polls = [q for q in fake.requests if q[0] == "GET" and "/v1/predictions/" in q[1]]
                assert len(polls) == 1  # the one read after storing the job; then webhooks only
    finally:
        fake.stop()
        redis.stop()
