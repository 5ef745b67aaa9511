"""Durability: kill a real server mid-run with SIGKILL, restart it, and every run
completes with completed nodes neither re-run nor re-charged, and every artifact readable."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import PASSWORD
from tests.server import ServerProcess

pytestmark = pytest.mark.slow

GRAPH = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {
            "id": "t1",
            "type": "TextTemplate",
            "position": {"x": 1, "y": 0},
            "data": {"template": "one {{ text }}"},
        },
        {"id": "d", "type": "Delay", "position": {"x": 2, "y": 0}, "data": {"seconds": 2}},
        {
            "id": "t2",
            "type": "TextTemplate",
            "position": {"x": 3, "y": 0},
            "data": {"template": "two {{ text }}"},
        },
    ],
    "edges": [
        {"id": "a", "source": "in", "target": "t1"},
        {"id": "b", "source": "t1", "target": "d"},
        {"id": "c", "source": "d", "target": "t2"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}


def _run(http: httpx.Client, wf: str, run_id: str) -> dict[str, Any]:
    r = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_sigkill_mid_run_then_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", env={"NODELOOM_RATE_LIMIT_API_KEY": "10000"})
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            assert (
                http.post(
                    "/api/v1/auth/signup", json={"email": "crash@example.com", "password": PASSWORD}
                ).status_code
                == 201
            )
            jwt = http.post(
                "/api/v1/auth/login", json={"email": "crash@example.com", "password": PASSWORD}
            ).json()["access_token"]
            key = http.post(
                "/api/v1/api-keys", json={"name": "k"}, headers={"Authorization": f"Bearer {jwt}"}
            ).json()["key"]
            http.headers["Authorization"] = f"Bearer {key}"
            start_balance = http.get("/api/v1/me").json()["credits_balance"]
            wf = http.post("/api/v1/workflows", json={"name": "crash", "graph_json": GRAPH}).json()[
                "id"
            ]
            run_ids = [
                http.post(
                    f"/api/v1/workflows/{wf}/execute", json={"input": {"text": f"r{i}"}}
                ).json()["run_id"]
                for i in range(5)
            ]
            # Wait until every run is inside the Delay: t1 completed and charged.
            deadline = time.monotonic() + 10
            while True:
                states = [
                    {n["node_id"]: n for n in _run(http, wf, r)["node_runs"]} for r in run_ids
                ]
                if all(
                    s["t1"]["status"] == "completed" and s["d"]["status"] == "running"
                    for s in states
                ):
                    break
                assert time.monotonic() < deadline, states
                time.sleep(0.05)
            t1_before = {r: s["t1"] for r, s in zip(run_ids, states, strict=True)}

        server.kill()
        server.start()

        with httpx.Client(
            base_url=server.base_url, timeout=10, headers={"Authorization": f"Bearer {key}"}
        ) as http:
            deadline = time.monotonic() + 20
            runs = {r: _run(http, wf, r) for r in run_ids}
            while any(run["status"] == "running" for run in runs.values()):
                assert time.monotonic() < deadline, runs
                time.sleep(0.1)
                runs = {r: _run(http, wf, r) for r in run_ids}
            total_used = 0
            for run_id, run in runs.items():
                nodes = {n["node_id"]: n for n in run["node_runs"]}
                assert run["status"] == "completed", run
                assert nodes["t1"]["artifact_id"] == t1_before[run_id]["artifact_id"]
                assert nodes["t1"]["started_at"] == t1_before[run_id]["started_at"]
                assert run["credits_used"] == 2
                total_used += run["credits_used"]
                for node in nodes.values():
                    r = http.get(f"/api/v1/artifacts/{node['artifact_id']}")
                    assert r.status_code == 200
                text = http.get(f"/api/v1/artifacts/{nodes['t2']['artifact_id']}").text
                assert text.startswith("two one r")
            assert http.get("/api/v1/me").json()["credits_balance"] == start_balance - total_used
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "data" / "nodeloom.db") as db:
        charges = db.execute(
            "select run_id, node_id, count(*) from credit_ledger"
            " where kind = 'charge' group by run_id, node_id"
        ).fetchall()
        attempts = dict(
            db.execute("select node_id, max(attempts) from node_runs group by node_id").fetchall()
        )
    assert all(count == 1 for _, _, count in charges) and len(charges) == 10
    assert attempts["t1"] == 1 and attempts["d"] == 2


RETRIED = {
    **GRAPH,
    "nodes": [
        *GRAPH["nodes"][:2],
        {
            "id": "bad",
            "type": "TextTemplate",
            "position": {"x": 2, "y": 1},
            "data": {"template": "{{ 1 / 0 }}"},
        },
        *GRAPH["nodes"][2:],
    ],
    "edges": [
        {"id": "a", "source": "in", "target": "t1"},
        {"id": "x", "source": "t1", "target": "bad"},
        {"id": "b", "source": "bad", "target": "d"},
        {"id": "c", "source": "d", "target": "t2"},
    ],
}


def test_sigkill_mid_retry_then_restart(tmp_path: Path) -> None:
    """A retry killed while its re-run nodes run resumes like any run: the nodes it reused
    stay reused and uncharged, each re-run node is charged once."""
    server = ServerProcess(tmp_path / "data", env={"NODELOOM_RATE_LIMIT_API_KEY": "10000"})
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            account = {"email": "retry-crash@example.com", "password": PASSWORD}
            assert http.post("/api/v1/auth/signup", json=account).status_code == 201
            jwt = http.post("/api/v1/auth/login", json=account).json()["access_token"]
            http.headers["Authorization"] = f"Bearer {jwt}"
            start_balance = http.get("/api/v1/me").json()["credits_balance"]
            made = http.post("/api/v1/workflows", json={"name": "retried", "graph_json": RETRIED})
            wf = made.json()["id"]
            first = http.post(f"/api/v1/workflows/{wf}/execute", json={"input": {"text": "r"}})
            first_id = first.json()["run_id"]
            deadline = time.monotonic() + 20
            while _run(http, wf, first_id)["status"] == "running":
                assert time.monotonic() < deadline
                time.sleep(0.05)
            params = {"params": {"bad": {"template": "fixed {{ text }}"}}}
            retry = http.post(f"/api/v1/workflows/{wf}/runs/{first_id}/retry", json=params)
            assert retry.status_code == 202, retry.text
            retry_id = retry.json()["run_id"]
            deadline = time.monotonic() + 10
            while True:
                nodes = {n["node_id"]: n for n in _run(http, wf, retry_id)["node_runs"]}
                if nodes["d"]["status"] == "running":
                    break
                assert time.monotonic() < deadline, nodes
                time.sleep(0.05)

        server.kill()
        server.start()

        with httpx.Client(
            base_url=server.base_url, timeout=10, headers={"Authorization": f"Bearer {jwt}"}
        ) as http:
            deadline = time.monotonic() + 20
            run = _run(http, wf, retry_id)
            while run["status"] == "running":
                assert time.monotonic() < deadline, run
                time.sleep(0.1)
                run = _run(http, wf, retry_id)
            assert run["status"] == "completed", run
            nodes = {n["node_id"]: n for n in run["node_runs"]}
            old = {n["node_id"]: n for n in _run(http, wf, first_id)["node_runs"]}
            assert nodes["t1"]["cached"] is True and nodes["t1"]["credits_used"] == 0
            assert nodes["t1"]["artifact_id"] == old["t1"]["artifact_id"]
            assert run["credits_used"] == 2  # bad and t2; t1 was paid by the first run
            text = http.get(f"/api/v1/artifacts/{nodes['t2']['artifact_id']}").text
            assert text.startswith("two fixed one r")
            balance = http.get("/api/v1/me").json()["credits_balance"]
            assert balance == start_balance - 1 - 2
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "data" / "nodeloom.db") as db:
        charges = db.execute(
            "select node_id, count(*) from credit_ledger"
            " where kind = 'charge' and run_id = ? group by node_id",
            (retry_id,),
        ).fetchall()
        attempts = dict(
            db.execute(
                "select node_id, attempts from node_runs where run_id = ?", (retry_id,)
            ).fetchall()
        )
    assert sorted(charges) == [("bad", 1), ("t2", 1)]
    assert attempts["t1"] == 0 and attempts["d"] == 2
