"""Durability of branches: a server killed with SIGKILL while the taken branch of an If is
still running comes back with the branch not taken still skipped — never started, never
charged — and the taken branch finished from where it was, its completed nodes not run
again."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live import account, wait_run
from tests.runs_helpers import edge, g, n
from tests.server import ServerProcess

pytestmark = pytest.mark.slow


# in -> if: "go" in the text -> slow (Delay) -> done; else -> other -> other2
GRAPH = g(
    [
        n("in", "TextInput"),
        n("if", "If", operator="contains", value="go"),
        n("slow", "Delay", seconds=2),
        n("done", "TextTemplate", template="done: {{ text }}"),
        n("other", "TextTemplate", template="other: {{ text }}"),
        n("other2", "TextTemplate", template="{{ text }}!"),
    ],
    [
        edge("in", "if"),
        edge("if", "slow", "true"),
        edge("slow", "done"),
        edge("if", "other", "false"),
        edge("other", "other2"),
    ],
)
SKIPPED = ("other", "other2")


def _nodes(http: httpx.Client, wf: str, run_id: str) -> dict[str, dict[str, Any]]:
    r = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}")
    assert r.status_code == 200, r.text
    return {node["node_id"]: node for node in r.json()["node_runs"]}


def test_a_branch_not_taken_stays_skipped_after_a_crash(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", env={"NODELOOM_RATE_LIMIT_API_KEY": "10000"})
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            _jwt, key = account(http, "branches@example.com")
            http.headers["Authorization"] = f"Bearer {key}"
            start_balance = http.get("/api/v1/me").json()["credits_balance"]
            r = http.post("/api/v1/workflows", json={"name": "branches", "graph_json": GRAPH})
            assert r.status_code == 201, r.text
            wf = r.json()["id"]
            run_ids = []
            for i in range(3):
                r = http.post(
                    f"/api/v1/workflows/{wf}/execute", json={"input": {"text": f"go {i}"}}
                )
                assert r.status_code == 202, r.text
                run_ids.append(r.json()["run_id"])
            # Every run inside the Delay: the If decided, the other branch skipped.
            deadline = time.monotonic() + 30
            while True:
                states = {run_id: _nodes(http, wf, run_id) for run_id in run_ids}
                if all(
                    s["slow"]["status"] == "running"
                    and all(s[k]["status"] == "skipped" for k in SKIPPED)
                    for s in states.values()
                ):
                    break
                assert time.monotonic() < deadline, states
                time.sleep(0.05)

        server.kill()
        server.start()

        with httpx.Client(
            base_url=server.base_url, timeout=10, headers={"Authorization": f"Bearer {key}"}
        ) as http:
            used = 0
            for run_id in run_ids:
                run = wait_run(http, wf, run_id, timeout=60)
                assert run["status"] == "completed", run
                nodes = {node["node_id"]: node for node in run["node_runs"]}
                before = states[run_id]
                assert nodes["if"]["artifact_id"] == before["if"]["artifact_id"]
                assert nodes["if"]["started_at"] == before["if"]["started_at"]
                for skipped in SKIPPED:
                    assert nodes[skipped]["status"] == "skipped"
                    assert nodes[skipped]["started_at"] is None
                    assert nodes[skipped]["credits_used"] == 0
                text = http.get(f"/api/v1/artifacts/{nodes['done']['artifact_id']}").text
                assert text == f"done: go {run_ids.index(run_id)}"
                used += run["credits_used"]
            assert http.get("/api/v1/me").json()["credits_balance"] == start_balance - used
    finally:
        server.stop()
    with sqlite3.connect(tmp_path / "data" / "nodeloom.db") as db:
        charged = db.execute(
            "select node_id, count(*) from credit_ledger where kind = 'charge'"
            " group by run_id, node_id"
        ).fetchall()
        attempts = dict(
            db.execute("select node_id, max(attempts) from node_runs group by node_id").fetchall()
        )
    assert {node for node, _ in charged}.isdisjoint(SKIPPED)
    assert all(count == 1 for _, count in charged)
    assert attempts["if"] == 1 and attempts["slow"] == 2
