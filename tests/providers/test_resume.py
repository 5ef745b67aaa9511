"""Against a real ``nodeloom serve`` process: a provider node's wait survives a SIGKILL of the
server — the restarted server attaches to the prediction (or fal request) the killed one
submitted instead of paying for it twice — and its progress reaches a WebSocket subscriber
as ``node.progress`` events while the provider works."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from tests.conftest import PASSWORD
from tests.providers.fakes import FAL_KEY, REPLICATE_TOKEN, FakeFal, FakeReplicate
from tests.runs_helpers import e, g, n
from tests.server import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def server(
    tmp_path: Path, replicate_fake: FakeReplicate, fal_fake: FakeFal
) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path / "data",
        env={
            "NODELOOM_RATE_LIMIT_API_KEY": "100000",
            "NODELOOM_HTTP_ALLOWLIST": json.dumps(["127.0.0.1/32"]),
            "NODELOOM_REPLICATE_API_URL": replicate_fake.url + "/v1",
            "NODELOOM_FAL_QUEUE_URL": fal_fake.url,
        },
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _login(http: httpx.Client) -> None:
    body = {"email": "resume@example.com", "password": PASSWORD}
    assert http.post("/api/v1/auth/signup", json=body).status_code == 201
    jwt = http.post("/api/v1/auth/login", json=body).json()["access_token"]
    key = http.post(
        "/api/v1/api-keys", json={"name": "k"}, headers={"Authorization": f"Bearer {jwt}"}
    ).json()["key"]
    http.headers["Authorization"] = f"Bearer {key}"


def _graph(http: httpx.Client, kind: str) -> dict[str, Any]:
    fields = {"api_token": REPLICATE_TOKEN} if kind == "replicate" else {"api_key": FAL_KEY}
    r = http.post("/api/v1/credentials", json={"name": kind, "kind": kind, "fields": fields})
    assert r.status_code == 201, r.text
    node_type, model = (
        ("ReplicateModel", "black-forest-labs/flux-schnell")
        if kind == "replicate"
        else ("FalModel", "fal-ai/flux/dev")
    )
    return g(
        [
            n("in", "TextInput", text="a lighthouse"),
            n(
                "gen",
                node_type,
                credential=r.json()["id"],
                model=model,
                bindings={"prompt": "text"},
            ),
        ],
        [e("in", "gen", "text")],
    )


def _wait_run(http: httpx.Client, wf: str, run_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
        if run["status"] != "running":
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


@pytest.mark.parametrize("kind", ["replicate", "fal"])
def test_sigkill_mid_wait_then_resume_attaches(
    kind: str, server: ServerProcess, replicate_fake: FakeReplicate, fal_fake: FakeFal
) -> None:
    fake = replicate_fake if kind == "replicate" else fal_fake
    fake.script.seconds = 6
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        _login(http)
        start_balance = http.get("/api/v1/me").json()["credits_balance"]
        wf = http.post(
            "/api/v1/workflows", json={"name": "resume", "graph_json": _graph(http, kind)}
        ).json()["id"]
        run_id = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False}).json()[
            "run_id"
        ]
        # Submitted, and the job polled at least once: its id was committed before the wait.
        # (A GET of anything else does not tell: Replicate's signing secret is read before
        # the submission, and a kill right after the POST may precede the commit.)
        deadline = time.monotonic() + 20

        def job_polled() -> bool:
            jobs = list(fake.jobs)  # the fake's threads add to it
            return any(r[0] == "GET" and any(j in r[1] for j in jobs) for r in fake.requests)

        while not job_polled():
            assert time.monotonic() < deadline, fake.requests
            time.sleep(0.05)
        headers = dict(http.headers)

    server.kill()
    polls_before = sum(r[0] == "GET" for r in fake.requests)
    server.start()

    with httpx.Client(base_url=server.base_url, timeout=10, headers=headers) as http:
        run = _wait_run(http, wf, run_id, 40)
        assert run["status"] == "completed", run
        gen = next(x for x in run["node_runs"] if x["node_id"] == "gen")
        assert gen["credits_used"] == 10
        content = http.get(f"/api/v1/artifacts/{gen['artifact_id']}")
        assert content.status_code == 200
        assert content.content[:8] == b"\x89PNG\r\n\x1a\n"
        assert http.get("/api/v1/me").json()["credits_balance"] == start_balance - 10
    assert fake.submissions == 1  # attached: no second paid submission
    assert sum(r[0] == "GET" for r in fake.requests) > polls_before  # followed after restart
    assert fake.cancels == []  # a crash is not a cancel


async def test_progress_reaches_a_websocket_subscriber(
    server: ServerProcess, replicate_fake: FakeReplicate
) -> None:
    replicate_fake.script.seconds = 3.5
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        _login(http)
        graph = _graph(http, "replicate")
        wf = http.post("/api/v1/workflows", json={"name": "p", "graph_json": graph}).json()["id"]
        key = http.headers["Authorization"].removeprefix("Bearer ")
    ws_url = server.base_url.replace("http://", "ws://") + "/api/v1/ws"
    async with (
        httpx.AsyncClient(
            base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}
        ) as client,
        connect(ws_url, additional_headers={"Authorization": f"Bearer {key}"}) as ws,
    ):
        run_id = (
            await client.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False})
        ).json()["run_id"]
        await ws.send(orjson.dumps({"type": "subscribe", "run_id": run_id}).decode())
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while not events or events[-1]["type"] not in ("run.completed", "run.failed"):
            assert time.monotonic() < deadline, events
            message = orjson.loads(await ws.recv())
            if "seq" in message:
                events.append(message)
    types = [m["type"] for m in events]
    assert types[-1] == "run.completed", events
    progress = [m for m in events if m["type"] == "node.progress" and m["node_id"] == "gen"]
    fractions = [m["data"]["progress"] for m in progress]
    assert len([f for f in fractions if 0 < f < 1]) >= 2, fractions  # while Replicate works
    assert fractions == sorted(fractions)
    started = types.index("node.started", types.index("node.completed"))
    assert started < events.index(progress[0]) < types.index("node.completed", started)


def test_a_killed_queue_worker_is_resumed_without_a_second_submission(
    tmp_path: Path, replicate_fake: FakeReplicate, fal_fake: FakeFal
) -> None:
    """Scale-out (PostgreSQL queue): the worker waiting on the prediction is SIGKILLed; the
    node is claimed again by another worker, which attaches to the same prediction."""
    from tests.server import WorkerProcess
    from tests.topology.fleet import postgres_database, replicate_fleet_env

    replicate_fake.script.seconds = 8
    with postgres_database() as url:
        env = replicate_fleet_env(url, replicate_fake.url + "/v1")
        api = ServerProcess(tmp_path / "api", env, args=["--no-worker"])
        first = WorkerProcess(tmp_path / "w1", env, concurrency=2)
        second = WorkerProcess(tmp_path / "w2", env, concurrency=2)
        try:
            api.start()
            first.start()
            with httpx.Client(base_url=api.base_url, timeout=10) as http:
                _login(http)
                wf = http.post(
                    "/api/v1/workflows",
                    json={"name": "q", "graph_json": _graph(http, "replicate")},
                ).json()["id"]
                run_id = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False}).json()[
                    "run_id"
                ]
                deadline = time.monotonic() + 30
                while not any(r[0] == "GET" for r in replicate_fake.requests):
                    assert time.monotonic() < deadline, replicate_fake.requests
                    time.sleep(0.05)
                first.kill()
                second.start()
                run = _wait_run(http, wf, run_id, 90)
                assert run["status"] == "completed", run
                gen = next(x for x in run["node_runs"] if x["node_id"] == "gen")
                assert gen["credits_used"] == 10
        finally:
            for process in (second, first, api):
                process.stop()
    assert replicate_fake.submissions == 1
