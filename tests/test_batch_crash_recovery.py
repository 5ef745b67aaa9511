"""Durability of batches: kill a real server with SIGKILL in the middle of a ForEach's items,
restart it, and the run completes with the items that had finished neither re-run nor
re-charged, and the collected list in item order."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import PASSWORD
from tests.runs_helpers import e, g, n
from tests.server import ServerProcess

pytestmark = pytest.mark.slow

ITEMS = 6
GRAPH = g(
    [
        n("in", "TextInput"),
        n("each", "ForEach", concurrency=2),
        n("t", "TextTemplate", template="<{{ text }}>"),  # 1 credit an item
        n("d", "Delay", seconds=1),
        n("all", "Collect"),
    ],
    [e("in", "each"), e("each", "t"), e("t", "d"), e("d", "all")],
)


def _run(http: httpx.Client, wf: str, run_id: str) -> dict[str, Any]:
    r = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _items(run: dict[str, Any], node_id: str) -> dict[int, dict[str, Any]]:
    return {nr["item_index"]: nr for nr in run["node_runs"] if nr["node_id"] == node_id}


def test_sigkill_mid_batch_then_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", env={"NODELOOM_RATE_LIMIT_API_KEY": "10000"})
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            body = {"email": "crash@example.com", "password": PASSWORD}
            assert http.post("/api/v1/auth/signup", json=body).status_code == 201
            jwt = http.post("/api/v1/auth/login", json=body).json()["access_token"]
            key = http.post(
                "/api/v1/api-keys", json={"name": "k"}, headers={"Authorization": f"Bearer {jwt}"}
            ).json()["key"]
            http.headers["Authorization"] = f"Bearer {key}"
            start_balance = http.get("/api/v1/me").json()["credits_balance"]
            wf = http.post("/api/v1/workflows", json={"name": "b", "graph_json": GRAPH}).json()[
                "id"
            ]
            lines = "\n".join(f"item {i}" for i in range(ITEMS))
            run_id = http.post(
                f"/api/v1/workflows/{wf}/execute", json={"input": {"text": lines}}
            ).json()["run_id"]
            # Wait until some items are done and others still waiting or running.
            deadline = time.monotonic() + 20
            while True:
                run = _run(http, wf, run_id)
                done = {k for k, nr in _items(run, "d").items() if nr["status"] == "completed"}
                if 2 <= len(done) < ITEMS:
                    break
                assert time.monotonic() < deadline, run
                time.sleep(0.05)
            before = {k: nr for k, nr in _items(run, "d").items() if k in done}

        server.kill()
        server.start()

        with httpx.Client(
            base_url=server.base_url, timeout=10, headers={"Authorization": f"Bearer {key}"}
        ) as http:
            deadline = time.monotonic() + 30
            run = _run(http, wf, run_id)
            while run["status"] == "running":
                assert time.monotonic() < deadline, run
                time.sleep(0.1)
                run = _run(http, wf, run_id)
            assert run["status"] == "completed", run
            after = _items(run, "d")
            for k, node in before.items():
                assert after[k]["artifact_id"] == node["artifact_id"]
                assert after[k]["started_at"] == node["started_at"]
            assert sorted(after) == list(range(ITEMS))
            assert run["credits_used"] == ITEMS
            [collect] = [nr for nr in run["node_runs"] if nr["node_id"] == "all"]
            text = http.get(f"/api/v1/artifacts/{collect['artifact_id']}").text
            assert json.loads(text) == [f"<item {i}>" for i in range(ITEMS)]
            assert http.get("/api/v1/me").json()["credits_balance"] == start_balance - ITEMS
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "data" / "nodeloom.db") as db:
        charges = db.execute(
            "select node_id, count(*) from credit_ledger where kind = 'charge' group by node_id"
        ).fetchall()
        attempts = dict(db.execute("select node_id, attempts from node_runs").fetchall())
    assert sorted(node for node, _ in charges) == [f"t#{k}" for k in range(ITEMS)]
    assert all(count == 1 for _, count in charges)
    assert all(attempts[f"d#{k}"] == 1 for k in done)
