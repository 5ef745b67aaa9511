"""Issue 3: on SIGTERM running nodes finish within the grace period and are
committed, nothing new starts, and the rest of the run resumes on the next start."""

from __future__ import annotations

import signal
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
        # t became runnable during the drain: queued, not started.
        assert states == {"in": "completed", "d": "completed", "t": "queued"}
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


def test_while_draining_new_requests_get_503_with_retry_after(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data)
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            http.post("/api/v1/auth/signup", json={"email": "d@example.com", "password": PASSWORD})
            jwt = http.post(
                "/api/v1/auth/login", json={"email": "d@example.com", "password": PASSWORD}
            ).json()["access_token"]
            http.headers["Authorization"] = f"Bearer {jwt}"
            graph = {**GRAPH, "nodes": [dict(n) for n in GRAPH["nodes"]]}  # type: ignore[arg-type]
            graph["nodes"][1]["data"] = {"seconds": 3}  # type: ignore[index]
            wf = http.post("/api/v1/workflows", json={"name": "w", "graph_json": graph}).json()[
                "id"
            ]
            assert http.post(f"/api/v1/workflows/{wf}/execute").status_code == 202
            time.sleep(0.5)
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            # Still listening: a new request is told to come back, not refused a connection.
            r = http.get("/api/v1/workflows")
            assert r.status_code == 503
            assert r.headers["content-type"] == "application/problem+json"
            assert r.json()["code"] == "service_unavailable"
            assert int(r.headers["retry-after"]) > 0
            r = http.post(f"/api/v1/workflows/{wf}/execute")
            assert r.status_code == 503
            assert http.get("/readyz").status_code == 503
            assert http.get("/healthz").status_code == 200
            server.proc.wait(20)
        with sqlite3.connect(data / "nodeloom.db") as db:
            states = dict(db.execute("select node_id, status from node_runs").fetchall())
            runs = db.execute("select count(*) from runs").fetchone()[0]
        assert states["d"] == "completed"  # the running node finished during the drain
        assert runs == 1
    finally:
        server.stop()
