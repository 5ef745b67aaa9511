"""Nodeloom as a fleet, with real processes and real services on 127.0.0.1: API replicas and
queue workers on one PostgreSQL database, events through Redis, artifacts in S3-compatible
storage. Nothing is run twice, nothing is lost, and a killed worker's node runs elsewhere.
(Two plain ``nodeloom serve`` sharing one database, PostgreSQL or SQLite, are the dispatcher
contract: tests/contracts/test_dispatchers.py.)

Every claim is checked from the database itself: one ``node.started`` event per start, node
attempts, the credit ledger against the balance, and each run's event log without gaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.conftest import TEST_SECRET
from tests.live import account
from tests.s3 import S3Server
from tests.s3 import s3_server as s3_server  # the fixture
from tests.server import ServerProcess, WorkerProcess
from tests.services import RedisServer, redis_server_available
from tests.topology.fleet import (
    INSTANT,
    MEDIA,
    OPEN_LIMITS,
    SLOW,
    TEXT,
    assert_nothing_ran_twice_and_the_books_balance,
    postgres_database,
    query,
    wait_runs,
)

pytestmark = pytest.mark.slow


# -- the fleet ----------------------------------------------------------------------------


def test_api_replicas_and_workers_share_the_work_and_lose_nothing(
    tmp_path: Path, s3_server: S3Server
) -> None:
    redis_server_available()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    processes: list[ServerProcess | WorkerProcess] = []
    try:
        with postgres_database() as url, contextlib.ExitStack() as stops:
            stops.callback(lambda: [p.stop() for p in processes])
            env = {
                **OPEN_LIMITS,
                "NODELOOM_DATABASE_URL": url,
                "NODELOOM_SECRET_KEY": TEST_SECRET,
                "NODELOOM_REDIS_URL": redis.url,
                **{
                    f"NODELOOM_{k.upper()}": str(v)
                    for k, v in s3_server.settings(s3_server.new_bucket()).items()
                },
            }
            apis = [
                ServerProcess(tmp_path / f"api{i}", env, args=["--no-worker"]) for i in range(2)
            ]
            workers = [WorkerProcess(tmp_path / f"worker{i}", env, concurrency=4) for i in range(2)]
            processes.extend([*apis, *workers])
            for process in processes:
                process.start()
            clients = [httpx.Client(base_url=api.base_url, timeout=30) for api in apis]
            try:
                _fleet_scenario(url, apis, workers, clients, redis)
            finally:
                for client in clients:
                    client.close()
    finally:
        for process in processes:
            process.stop()
        redis.stop()


def _fleet_scenario(
    url: str,
    apis: list[ServerProcess],
    workers: list[WorkerProcess],
    clients: list[httpx.Client],
    redis: RedisServer,
) -> None:
    _, key = account(clients[0], "fleet@example.com")
    for client in clients:
        client.headers["Authorization"] = f"Bearer {key}"
    hooks: dict[str, tuple[str, str]] = {}
    for name, graph in (("text", TEXT), ("media", MEDIA), ("slow", SLOW)):
        wf = (
            clients[0]
            .post("/api/v1/workflows", json={"name": name, "graph_json": graph})
            .json()["id"]
        )
        token = (
            clients[1]
            .post(f"/api/v1/workflows/{wf}/webhooks", json={"name": name, "active": True})
            .json()["token"]
        )
        hooks[name] = (wf, token)

    # A WebSocket on replica 0 follows both workflows: events of nodes that workers run reach it.
    finals: dict[str, str] = {}
    follower = Follower(apis[0], key, [hooks["text"][0], hooks["media"][0]], finals)
    follower.start()

    runs: dict[str, str] = {}
    for i in range(200):
        kind = "media" if i % 10 == 0 else "text"
        wf, token = hooks[kind]
        r = clients[i % 2].post(f"/api/v1/webhooks/{token}", json={"text": f"n{i}"})
        assert r.status_code == 202, r.text
        runs[r.json()["run_id"]] = wf
        if i == 100:  # Redis goes away mid-load and comes back: accepted runs are not lost
            redis.stop()
            time.sleep(1.0)
            redis.start()
    results = wait_runs(clients[1], runs, timeout=240)
    assert all(r["status"] == "completed" for r in results.values()), [
        r for r in results.values() if r["status"] != "completed"
    ][:2]
    deadline = time.monotonic() + 30
    while not set(runs) <= set(finals):
        assert time.monotonic() < deadline, f"{len(set(runs) - set(finals))} runs never seen live"
        time.sleep(0.1)
    follower.stop()
    assert all(finals[r] == "run.completed" for r in runs)

    # Both workers took part, with parallel branches of one run on different processes.
    claims = query(url, "SELECT claimed_by FROM node_runs WHERE claimed_by LIKE 'job:%'")
    pids = {int(c[0].split("@", 1)[1].split("-", 1)[0]) for c in claims}
    assert pids == {w.pid for w in workers}
    # The instant prefix of every run (its TextInput, and the text run's two templates) was
    # executed by the API replica that accepted it (ADR 0018): no job, no worker.
    prefix = query(
        url,
        "SELECT node_id, claimed_by FROM node_runs WHERE claimed_by NOT LIKE 'job:%'",
    )
    assert {node for node, _ in prefix} == {"in", "a", "b"}, prefix
    assert len(prefix) == 200 + 180 * 2  # every run's input; the text runs' templates
    assert not {int(c.split("-", 1)[0]) for _, c in prefix} & {w.pid for w in workers}
    assert_nothing_ran_twice_and_the_books_balance(url)

    # A run of instant nodes only is executed by the API replica that accepts it, within
    # the acceptance: completed when the trigger is answered, no queue job, no worker claim.
    instant_wf = (
        clients[0]
        .post("/api/v1/workflows", json={"name": "instant", "graph_json": INSTANT})
        .json()["id"]
    )
    instant_token = (
        clients[0]
        .post(f"/api/v1/workflows/{instant_wf}/webhooks", json={"name": "i", "active": True})
        .json()["token"]
    )
    answer = clients[1].post(f"/api/v1/webhooks/{instant_token}", json={"text": "now"})
    assert answer.status_code == 202, answer.text
    instant_run = answer.json()["run_id"]
    status = clients[0].get(f"/api/v1/workflows/{instant_wf}/runs/{instant_run}").json()
    assert status["status"] == "completed", status
    claims = query(url, f"SELECT claimed_by FROM node_runs WHERE run_id = '{instant_run}'")
    assert len(claims) == 2 and not any(c[0].startswith("job:") for c in claims), claims
    jobs = query(
        url,
        f"SELECT count(*) FROM procrastinate_jobs WHERE args->>'run_id' = '{instant_run}'",
    )
    assert jobs[0][0] == 0

    # A worker killed while it holds a node: the node runs again on the other worker.
    wf, token = hooks["slow"]
    slow = {
        clients[0].post(f"/api/v1/webhooks/{token}", json={"text": f"s{i}"}).json()["run_id"]: wf
        for i in range(2)
    }
    holder = None
    deadline = time.monotonic() + 20
    while holder is None:
        rows = query(
            url, "SELECT claimed_by FROM node_runs WHERE node_id = 'wait' AND status = 'running'"
        )
        if rows:
            holder = int(rows[0][0].split("@", 1)[1].split("-", 1)[0])
        assert time.monotonic() < deadline, "the slow node never started"
        time.sleep(0.1)
    victim = next(w for w in workers if w.pid == holder)
    killed_at = time.monotonic()
    victim.kill()
    results = wait_runs(clients[0], slow, timeout=60)
    assert all(r["status"] == "completed" for r in results.values()), results
    retried = query(url, "SELECT run_id FROM node_runs WHERE node_id = 'wait' AND attempts = 2")
    assert len(retried) >= 1
    assert time.monotonic() - killed_at < 40
    assert_nothing_ran_twice_and_the_books_balance(url)


class Follower(threading.Thread):
    """A WebSocket client in its own thread, subscribed to ``workflows`` on one API replica
    (reconnecting if it drops): remembers the final event of every run it sees."""

    def __init__(
        self, api: ServerProcess, key: str, workflows: list[str], finals: dict[str, str]
    ) -> None:
        super().__init__(daemon=True)
        self.url = api.base_url.replace("http://", "ws://") + "/api/v1/ws"
        self.key = key
        self.workflows = workflows
        self.finals = finals
        self.subscribed = threading.Event()
        self._halt = threading.Event()

    def start(self) -> None:
        super().start()
        assert self.subscribed.wait(10), "the WebSocket did not subscribe"

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def run(self) -> None:
        asyncio.run(self._follow())

    async def _follow(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        while not self._halt.is_set():
            try:
                async with connect(self.url, additional_headers=headers) as ws:
                    for wf in self.workflows:
                        await ws.send(json.dumps({"type": "subscribe", "workflow_id": wf}))
                        assert json.loads(await ws.recv())["type"] == "subscribed"
                    self.subscribed.set()
                    while not self._halt.is_set():
                        try:
                            raw = await asyncio.wait_for(ws.recv(), 0.5)
                        except TimeoutError:
                            continue
                        message = json.loads(raw)
                        if message.get("type") in ("run.completed", "run.failed"):
                            self.finals[message["run_id"]] = message["type"]
            except Exception:
                await asyncio.sleep(0.2)
