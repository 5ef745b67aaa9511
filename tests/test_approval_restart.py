"""An approval outlives its server and is decided on any replica: a real server is stopped
while two runs wait for a person, started again, and one run is approved (it completes down
``approved``) while the other's timeout, passed while no server ran, decides it from the
database; a decision made through a second server wakes the node on the first."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live import account as signed_up
from tests.live import wait_run
from tests.runs_helpers import g, n
from tests.server import ServerProcess
from tests.services import REDIS_URL, require_redis

pytestmark = pytest.mark.slow


def graph(**approval: Any) -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput", text="cut"),
            n("gate", "Approval", **approval),
            n("yes", "TextTemplate", template="made: {{ text }}"),
            n("no", "TextTemplate", template="dropped: {{ text }}"),
        ],
        [
            {"id": "1", "source": "in", "target": "gate"},
            {"id": "2", "source": "gate", "target": "yes", "sourceHandle": "approved"},
            {"id": "3", "source": "gate", "target": "no", "sourceHandle": "rejected"},
        ],
    )


def listed(http: httpx.Client, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        body = http.get("/api/v1/approvals").json()
        if body["count"] == count:
            return list(body["data"])
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def statuses(run: dict[str, Any]) -> dict[str, str]:
    return {node["node_id"]: node["status"] for node in run["node_runs"]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A real server on SQLite, stopped by its own PID whatever the test did."""
    process = ServerProcess(
        tmp_path / "data",
        # A long grace: a stop must not spend it on runs that only wait for a person.
        env={"NODELOOM_RATE_LIMIT_API_KEY": "10000", "NODELOOM_SHUTDOWN_GRACE_SECONDS": "60"},
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_an_approval_survives_a_restart(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        _, key = signed_up(http, "gate@example.com")
        http.headers["Authorization"] = f"Bearer {key}"
        runs = {}
        for name, params in (
            ("person", {}),
            ("timeout", {"timeout_seconds": 2, "timeout_outcome": "approve"}),
        ):
            body = {"name": name, "graph_json": graph(**params)}
            wf = http.post("/api/v1/workflows", json=body).json()["id"]
            r = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False})
            assert r.status_code == 202, r.text
            runs[name] = (wf, r.json()["run_id"])
        # Only the person's approval is left once the other's 2 s have passed.
        approval = listed(http, 1)[0]
        assert approval["run_id"] == runs["person"][1]
    # A graceful stop while the person's run waits, then a new process adopts the run.
    # Nothing runs, so nothing is waited for: the stop takes far less than the 60 s grace.
    stopping = time.monotonic()
    server.stop()
    assert time.monotonic() - stopping < 30
    assert server.proc is not None and server.proc.returncode != -signal.SIGKILL
    server.start()
    with httpx.Client(
        base_url=server.base_url, timeout=10, headers={"Authorization": f"Bearer {key}"}
    ) as http:
        assert listed(http, 1)[0]["id"] == approval["id"]
        wf, run_id = runs["person"]
        assert http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()["status"] == "running"
        r = http.post(f"/api/v1/approvals/{approval['id']}/approve", json={"comment": "go"})
        assert r.status_code == 200, r.text
        run = wait_run(http, wf, run_id, 60)
        assert run["status"] == "completed", run
        assert statuses(run) == {
            "in": "completed",
            "gate": "completed",
            "yes": "completed",
            "no": "skipped",
        }
        done = wait_run(http, *runs["timeout"], 60)
        assert statuses(done)["yes"] == "completed", done


def test_a_timeout_passed_while_no_server_ran_decides_at_restart(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        _, key = signed_up(http, "late@example.com")
        http.headers["Authorization"] = f"Bearer {key}"
        body = {"name": "w", "graph_json": graph(timeout_seconds=4, timeout_outcome="reject")}
        wf = http.post("/api/v1/workflows", json=body).json()["id"]
        run_id = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False}).json()[
            "run_id"
        ]
        expires = listed(http, 1)[0]["expires_at"]
    server.kill()  # a crash: nothing in the process survives
    # Down until the approval has expired (observable: its expiry is in the past).
    while datetime.now(UTC) < datetime.fromisoformat(expires.replace("Z", "+00:00")):
        time.sleep(0.1)
    server.start()
    with httpx.Client(
        base_url=server.base_url, timeout=10, headers={"Authorization": f"Bearer {key}"}
    ) as http:
        run = wait_run(http, wf, run_id, 60)
        assert run["status"] == "completed", run
        assert statuses(run)["no"] == "completed" and statuses(run)["yes"] == "skipped"


def test_a_decision_on_another_replica_wakes_the_node(tmp_path: Path) -> None:
    """Two servers on one database, linked by Redis: the run waits on the first, the person
    approves through the second, and the first's node goes on at once (the signal)."""
    require_redis()
    env = {"NODELOOM_RATE_LIMIT_API_KEY": "10000", "NODELOOM_REDIS_URL": REDIS_URL}
    first = ServerProcess(tmp_path / "data", env=env)
    second = ServerProcess(tmp_path / "data", env=env)
    first.start()
    try:
        second.start()
        with httpx.Client(base_url=first.base_url, timeout=10) as http:
            _, key = signed_up(http, "replica@example.com")
            http.headers["Authorization"] = f"Bearer {key}"
            body = {"name": "w", "graph_json": graph()}
            wf = http.post("/api/v1/workflows", json=body).json()["id"]
            run_id = http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False}).json()[
                "run_id"
            ]
            approval = listed(http, 1)[0]
        auth = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=second.base_url, timeout=10, headers=auth) as other:
            assert listed(other, 1)[0]["id"] == approval["id"]
            decided = time.monotonic()
            r = other.post(f"/api/v1/approvals/{approval['id']}/approve")
            assert r.status_code == 200, r.text
        with httpx.Client(base_url=first.base_url, timeout=10, headers=auth) as http:
            run = wait_run(http, wf, run_id, 60)
            assert run["status"] == "completed", run
            assert statuses(run)["yes"] == "completed"
        # Woken by the signal, not by the 10 s re-read.
        assert time.monotonic() - decided < 8
    finally:
        second.stop()
        first.stop()
