"""``nodeloom serve --processes 2`` on the embedded default (SQLite, no Redis), as a user
runs it: one port, two server processes behind it.

Checked from outside and from the database: runs accepted by either process complete, and
each process drives some; nothing runs twice and the books balance; one WebSocket sees live
the runs the other process drives; a rate limit holds for the whole server, not per process;
a killed process is replaced and its runs are adopted; SIGTERM stops everything cleanly.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.sync.client import connect

from tests.live import account
from tests.server import ServerProcess
from tests.topology.fleet import (
    OPEN_LIMITS,
    SLOW,
    TEXT,
    assert_nothing_ran_twice_and_the_books_balance,
    query,
    wait_runs,
)

pytestmark = pytest.mark.slow

KEY_LIMIT = 30


def _fresh_connections(base_url: str, token: str) -> httpx.Client:
    """No keep-alive: the kernel spreads connections, not requests, over the processes."""
    return httpx.Client(
        base_url=base_url,
        timeout=30,
        headers={"Authorization": f"Bearer {token}"},
        limits=httpx.Limits(max_keepalive_connections=0),
    )


class Follower(threading.Thread):
    """A WebSocket subscribed to one workflow, recording each run's final event."""

    def __init__(self, base_url: str, token: str, workflow_id: str) -> None:
        super().__init__(daemon=True)
        self.url = base_url.replace("http://", "ws://") + "/api/v1/ws"
        self.token = token
        self.workflow_id = workflow_id
        self.finals: dict[str, str] = {}
        self.subscribed = threading.Event()
        self.halt = threading.Event()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with connect(self.url, additional_headers=headers) as ws:
            ws.send(orjson.dumps({"type": "subscribe", "workflow_id": self.workflow_id}).decode())
            assert orjson.loads(ws.recv(10))["type"] == "subscribed"
            self.subscribed.set()
            while not self.halt.is_set():
                try:
                    message: dict[str, Any] = orjson.loads(ws.recv(0.5))
                except TimeoutError:
                    continue
                if message.get("type") in ("run.completed", "run.failed"):
                    self.finals[message["run_id"]] = message["type"]


def _children(server: ServerProcess) -> list[int]:
    found = re.search(r"with 2 processes \(pids (\d+), (\d+)\)", server.log_path.read_text())
    assert found, server.log_path.read_text()
    return [int(found.group(1)), int(found.group(2))]


def _execute(http: httpx.Client, wf: str, count: int) -> dict[str, str]:
    runs: dict[str, str] = {}
    for i in range(count):
        r = http.post(f"/api/v1/workflows/{wf}/execute", json={"input": {"text": str(i)}})
        assert r.status_code == 202, r.text
        runs[r.json()["run_id"]] = wf
    return runs


def test_two_processes_on_one_port_share_runs_events_and_limits(tmp_path: Path) -> None:
    data = tmp_path / "data"
    url = f"sqlite+aiosqlite:///{data / 'nodeloom.db'}"
    env = {**OPEN_LIMITS, "NODELOOM_RATE_LIMIT_API_KEY": str(KEY_LIMIT)}
    server = ServerProcess(data, env, args=["--processes", "2"])
    server.start(timeout=90)
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as setup:
            jwt, key = account(setup, "two@example.com")
        http = _fresh_connections(server.base_url, jwt)
        wf = http.post("/api/v1/workflows", json={"name": "t", "graph_json": TEXT}).json()["id"]

        # Runs accepted on both processes complete; one WebSocket sees all of them live.
        follower = Follower(server.base_url, jwt, wf)
        follower.start()
        assert follower.subscribed.wait(20)
        runs = _execute(http, wf, 30)
        results = wait_runs(http, runs, timeout=90)
        assert all(r["status"] == "completed" for r in results.values())
        drivers = query(url, "SELECT DISTINCT driver FROM runs")
        assert len({d[0].split("-", 1)[0] for d in drivers}) == 2, drivers
        deadline = time.monotonic() + 20
        while set(follower.finals) != set(runs):
            assert time.monotonic() < deadline, f"{len(set(runs) - set(follower.finals))} unseen"
            time.sleep(0.1)
        follower.halt.set()
        follower.join(5)  # closed before a process (maybe its own) is killed below
        assert set(follower.finals.values()) == {"run.completed"}

        # A limit of KEY_LIMIT a minute per key holds for the server, whichever process answers.
        with _fresh_connections(server.base_url, key) as by_key:
            codes = [by_key.get("/api/v1/workflows").status_code for _ in range(KEY_LIMIT + 10)]
        assert codes.count(200) == KEY_LIMIT and codes.count(429) == 10, codes

        # A process killed while driving runs is replaced; its runs finish elsewhere.
        slow = http.post("/api/v1/workflows", json={"name": "s", "graph_json": SLOW}).json()["id"]
        slow_runs = _execute(http, slow, 6)
        deadline = time.monotonic() + 30
        while (
            len(query(url, "SELECT 1 FROM node_runs WHERE node_id='wait' AND status='running'")) < 6
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        victim = _children(server)[0]
        os.kill(victim, signal.SIGKILL)
        results = wait_runs(http, slow_runs, timeout=90)
        assert all(r["status"] == "completed" for r in results.values()), results
        assert "starting another" in server.log_path.read_text()
        assert http.get("/api/v1/workflows").status_code == 200

        # A cancel reaches the run whichever process took the request and drives the run.
        cancelled = _execute(http, slow, 4)
        for run_id in cancelled:
            r = http.post(f"/api/v1/workflows/{slow}/runs/{run_id}/cancel")
            assert r.status_code == 202, r.text
        results = wait_runs(http, cancelled, timeout=30)
        assert {r["error"]["code"] for r in results.values()} == {"cancelled"}, results
        assert_nothing_ran_twice_and_the_books_balance(url)
        http.close()
    finally:
        server.stop()
    assert server.proc is not None and server.proc.returncode == 0
    # No child is left listening on the port.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.base_url}/healthz", timeout=2)
