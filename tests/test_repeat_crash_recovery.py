"""Durability of Repeat loops: kill the process running an iteration with SIGKILL — the
server on SQLite, the queue worker on PostgreSQL — and the run resumes at the iteration it
was at: the iterations that finished are neither re-run nor re-charged, the loop goes on
until its condition holds, and the books balance."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_SECRET
from tests.live import account
from tests.server import ServerProcess, WorkerProcess
from tests.topology.fleet import (
    OPEN_LIMITS,
    postgres_database,
    query,
)

pytestmark = pytest.mark.slow

# a -> ax -> axx -> axxx -> axxxx: the condition holds at iteration 4 of at most 6.
ITERATIONS = 4
GRAPH = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {
            "id": "rep",
            "type": "Repeat",
            "position": {"x": 0, "y": 0},
            "data": {"max_iterations": 6},
        },
        {
            "id": "t",
            "type": "TextTemplate",  # 1 credit an iteration
            "position": {"x": 0, "y": 0},
            "data": {"template": "{{ text }}x"},
        },
        {"id": "d", "type": "Delay", "position": {"x": 0, "y": 0}, "data": {"seconds": 1}},
        {
            "id": "until",
            "type": "Until",
            "position": {"x": 0, "y": 0},
            "data": {"operator": "contains", "value": "xxxx"},
        },
    ],
    "edges": [
        {"id": f"{s}->{t}", "source": s, "target": t}
        for s, t in [("in", "rep"), ("rep", "t"), ("t", "d"), ("d", "until")]
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}


def _run(http: httpx.Client, wf: str, run_id: str) -> dict[str, Any]:
    r = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _iterations(run: dict[str, Any], node_id: str) -> dict[int, dict[str, Any]]:
    return {nr["item_index"]: nr for nr in run["node_runs"] if nr["node_id"] == node_id}


def _scenario(base_url: str, crash: Callable[[], None], timeout: float) -> tuple[str, set[int]]:
    """Start the loop, crash while iteration 2 or later runs its Delay, check the run
    completes as it should; the run id and the iterations done before the crash."""
    with httpx.Client(base_url=base_url, timeout=10) as http:
        _, key = account(http, "loop@example.com")
        http.headers["Authorization"] = f"Bearer {key}"
        start_balance = http.get("/api/v1/me").json()["credits_balance"]
        wf = http.post("/api/v1/workflows", json={"name": "l", "graph_json": GRAPH}).json()["id"]
        r = http.post(f"/api/v1/workflows/{wf}/execute", json={"input": {"text": "a"}})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        deadline = time.monotonic() + 30
        while True:
            run = _run(http, wf, run_id)
            waits = _iterations(run, "d")
            done = {k for k, nr in waits.items() if nr["status"] == "completed"}
            if done and any(nr["status"] == "running" for nr in waits.values()):
                break
            assert time.monotonic() < deadline, run
            time.sleep(0.05)
        before = {k: nr for k, nr in _iterations(run, "t").items() if k in done}

        crash()

        deadline = time.monotonic() + timeout
        run = _run(http, wf, run_id)
        while run["status"] == "running":
            assert time.monotonic() < deadline, run
            time.sleep(0.2)
            run = _run(http, wf, run_id)
        assert run["status"] == "completed", run
        after = _iterations(run, "t")
        assert sorted(after) == list(range(ITERATIONS))
        for k, node in before.items():
            assert after[k]["artifact_id"] == node["artifact_id"]
            assert after[k]["started_at"] == node["started_at"]
        [until] = [
            nr for nr in run["node_runs"] if nr["node_id"] == "until" and nr["item_index"] is None
        ]
        assert http.get(f"/api/v1/artifacts/{until['artifact_id']}").text == "axxxx"
        assert run["credits_used"] == ITERATIONS
        assert http.get("/api/v1/me").json()["credits_balance"] == start_balance - ITERATIONS
    return run_id, done


def test_sigkill_mid_iteration_then_restart_on_sqlite(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", env={"NODELOOM_RATE_LIMIT_API_KEY": "10000"})
    server.start()

    def crash() -> None:  # the server keeps its port
        server.kill()
        server.start()

    try:
        _, done = _scenario(server.base_url, crash, timeout=60)
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "data" / "nodeloom.db") as db:
        charges = db.execute(
            "select node_id, count(*) from credit_ledger where kind = 'charge' group by node_id"
        ).fetchall()
        attempts = dict(db.execute("select node_id, attempts from node_runs").fetchall())
    assert sorted(node for node, _ in charges) == [f"t#{k}" for k in range(ITERATIONS)]
    assert all(count == 1 for _, count in charges)
    assert all(attempts[f"d#{k}"] == 1 and attempts[f"t#{k}"] == 1 for k in done)


def test_sigkill_of_the_worker_mid_iteration_on_postgres(tmp_path: Path) -> None:
    with postgres_database() as url:
        env = {**OPEN_LIMITS, "NODELOOM_DATABASE_URL": url, "NODELOOM_SECRET_KEY": TEST_SECRET}
        api = ServerProcess(tmp_path / "api", env, args=["--no-worker"])
        first = WorkerProcess(tmp_path / "w1", env, concurrency=2)
        second = WorkerProcess(tmp_path / "w2", env, concurrency=2)
        try:
            api.start()
            first.start()

            def crash() -> None:
                first.kill()
                second.start()

            run_id, done = _scenario(api.base_url, crash, timeout=120)
        finally:
            for process in (api, first, second):
                process.stop()
        charges = query(
            url,
            "SELECT node_id, count(*) FROM credit_ledger WHERE kind = 'charge' AND run_id = :r "
            "GROUP BY node_id",
            r=run_id,
        )
        assert sorted(node for node, _ in charges) == [f"t#{k}" for k in range(ITERATIONS)]
        attempts = dict(
            query(url, "SELECT node_id, attempts FROM node_runs WHERE run_id = :r", r=run_id)
        )
        assert all(attempts[f"d#{k}"] == 1 and attempts[f"t#{k}"] == 1 for k in done)
        # Events name an iteration's node as drawn, with its index in their data.
        starts = query(
            url,
            "SELECT node_id, data FROM run_events WHERE type = 'node.started' AND run_id = :r",
            r=run_id,
        )
        started: dict[str, int] = {}
        for node_id, data in starts:
            index = data.get("item_index")
            key = node_id if index is None else f"{node_id}#{index}"
            started[key] = started.get(key, 0) + 1
        assert started == {k: v for k, v in attempts.items() if v}
        balance, ledger = query(
            url,
            "SELECT b.credits_balance, (SELECT coalesce(sum(CASE kind WHEN 'grant' THEN amount "
            "WHEN 'hold' THEN -amount WHEN 'release' THEN amount ELSE 0 END), 0) "
            "FROM credit_ledger l WHERE l.account_id = b.account_id) FROM account_balances b",
        )[0]
        assert balance == ledger
