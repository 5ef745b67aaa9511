"""SPEC §5 / issue 3: on SIGTERM running nodes finish within the grace period and are
committed, nothing new starts, and the rest of the run resumes on the next start."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import PASSWORD
from tests.server import ServerProcess

pytestmark = pytest.mark.slow

GRAPH = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {"text": "x"}},
        {"id": "d", "type": "Delay", "position": {"x": 1, "y": 0}, "data": {"seconds": 1.5}},
        {"id": "t", "type": "TextTemplate", "position": {"x": 2, "y": 0}, "data": {}},
    ],
    "edges": [
        {"id": "a", "source": "in", "target": "d"},
        {"id": "b", "source": "d", "target": "t"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}


def test_sigterm_drains_running_nodes_and_resumes_the_rest(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data)
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            http.post("/api/v1/auth/signup", json={"email": "t@example.com", "password": PASSWORD})
            jwt = http.post(
                "/api/v1/auth/login", json={"email": "t@example.com", "password": PASSWORD}
            ).json()["access_token"]
            http.headers["Authorization"] = f"Bearer {jwt}"
            wf = http.post("/api/v1/workflows", json={"name": "w", "graph_json": GRAPH}).json()[
                "id"
            ]
            run_id = http.post(f"/api/v1/workflows/{wf}/execute").json()["run_id"]
            deadline = time.monotonic() + 5
            while True:
                run = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
                if {n["node_id"]: n["status"] for n in run["node_runs"]}["d"] == "running":
                    break
                assert time.monotonic() < deadline
                time.sleep(0.02)
        started = time.monotonic()
        server.stop()  # SIGTERM, waits for the process to exit
        assert 0.5 < time.monotonic() - started < 15
        with sqlite3.connect(data / "nodeloom.db") as db:
            states = dict(db.execute("select node_id, status from node_runs").fetchall())
            status = db.execute("select status from runs").fetchone()[0]
        assert states == {"in": "completed", "d": "completed", "t": "pending"}
        assert status == "running"

        server.start()
        with httpx.Client(
            base_url=server.base_url, timeout=10, headers={"Authorization": f"Bearer {jwt}"}
        ) as http:
            deadline = time.monotonic() + 10
            while (run := http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json())[
                "status"
            ] == "running":
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert run["status"] == "completed"
        assert all(n["status"] == "completed" for n in run["node_runs"])
    finally:
        server.stop()
    with sqlite3.connect(data / "nodeloom.db") as db:
        attempts = dict(db.execute("select node_id, attempts from node_runs").fetchall())
    assert attempts == {"in": 1, "d": 1, "t": 1}
