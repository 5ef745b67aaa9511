"""The dispatcher contract: ``LocalDispatcher`` (SQLite: each process drives the runs it
accepted, and adopts those of dead processes sharing the file) and ``QueueDispatcher``
(PostgreSQL: every node a job of the queue, taken by any worker) keep the same promises.

Two real ``nodeloom serve`` processes share one database and one data directory, as two
servers started on one host would: a submitted run completes; no node runs twice and the
credit books balance however the runs are spread over the two; a run is cancelled from the
process that does not execute it; and a run whose process is killed (SIGKILL) mid-node is
finished by the other, the interrupted node started once more.

Every claim is read from the database itself (tests/topology/fleet.py): one ``node.started``
event per start, node attempts, the ledger against the balances, event logs without gaps.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_SECRET
from tests.live import account
from tests.runs_helpers import e, g, n
from tests.server import ServerProcess
from tests.topology.fleet import (
    OPEN_LIMITS,
    TEXT,
    assert_nothing_ran_twice_and_the_books_balance,
    postgres_database,
    query,
    wait_runs,
)

pytestmark = pytest.mark.slow


def slow(seconds: float) -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput"),
            n("wait", "Delay", seconds=seconds),
            n("out", "TextTemplate", template="done {{ text }}"),
        ],
        [e("in", "wait"), e("wait", "out")],
    )


@dataclass
class Pair:
    """Two serves on one database, and a client of each with one account's key."""

    backend: str
    url: str
    serves: list[ServerProcess]
    clients: list[httpx.Client]

    def workflow(self, graph: dict[str, Any]) -> str:
        r = self.clients[0].post("/api/v1/workflows", json={"name": "c", "graph_json": graph})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def execute(self, which: int, workflow: str, text: str = "x") -> str:
        r = self.clients[which].post(
            f"/api/v1/workflows/{workflow}/execute", json={"input": {"text": text}}
        )
        assert r.status_code in (200, 202), r.text
        return str(r.json()["run_id"])

    def executing(self, node_id: str, runs: list[str], timeout: float = 20) -> list[int]:
        """Wait until ``node_id`` runs in every one of ``runs``; the pid of the process
        executing each (the run's driver on SQLite, the job's worker on PostgreSQL)."""
        column = "r.driver" if self.backend == "sqlite" else "n.claimed_by"
        deadline = time.monotonic() + timeout
        while True:
            rows = query(
                self.url,
                f"SELECT {column} FROM node_runs n JOIN runs r ON r.id = n.run_id "
                "WHERE n.node_id = :node AND n.status = 'running'",
                node=node_id,
            )
            if len(rows) >= len(runs):
                # "<pid>-<random>" or "job:<id>@<pid>-<random>"
                return [int(str(row[0]).split("@")[-1].split("-", 1)[0]) for row in rows]
            assert time.monotonic() < deadline, f"{node_id} never started in every run"
            time.sleep(0.05)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    data = tmp_path_factory.mktemp(f"dispatch-{request.param}")
    with _database(request.param, data) as url:
        env = {**OPEN_LIMITS, "NODELOOM_SECRET_KEY": TEST_SECRET}
        if request.param == "postgres":
            env["NODELOOM_DATABASE_URL"] = url
        serves = [ServerProcess(data, env) for _ in range(2)]
        clients = [httpx.Client(base_url=s.base_url, timeout=30) for s in serves]
        try:
            for serve in serves:
                serve.start()
            _, key = account(clients[0], f"contract-{request.param}@example.com")
            for client in clients:
                client.headers["Authorization"] = f"Bearer {key}"
            yield Pair(request.param, url, serves, clients)
        finally:
            for client in clients:
                client.close()
            for serve in serves:
                serve.stop()


@contextlib.contextmanager
def _database(backend: str, data: Path) -> Iterator[str]:
    if backend == "postgres":
        with postgres_database() as url:
            yield url
    else:
        yield f"sqlite+aiosqlite:///{data / 'nodeloom.db'}"


def test_a_submitted_run_completes(pair: Pair) -> None:
    workflow = pair.workflow(TEXT)
    run_id = pair.execute(1, workflow, "hi")
    run = wait_runs(pair.clients[0], {run_id: workflow}, timeout=30)[run_id]
    assert run["status"] == "completed"
    join = next(node for node in run["node_runs"] if node["node_id"] == "join")
    text = pair.clients[0].get(f"/api/v1/artifacts/{join['artifact_id']}").text
    assert "a hi" in text and "b hi" in text


def test_two_dispatchers_on_one_database_never_run_a_node_twice(pair: Pair) -> None:
    workflow = pair.workflow(TEXT)
    runs = {pair.execute(i % 2, workflow, str(i)): workflow for i in range(40)}
    results = wait_runs(pair.clients[1], runs, timeout=120)
    assert all(r["status"] == "completed" for r in results.values())
    assert_nothing_ran_twice_and_the_books_balance(pair.url)


def test_a_run_is_cancelled_from_the_other_process(pair: Pair) -> None:
    workflow = pair.workflow(slow(30))
    run_id = pair.execute(0, workflow)
    (pid,) = pair.executing("wait", [run_id])
    other = next(i for i, s in enumerate(pair.serves) if s.proc and s.proc.pid != pid)
    r = pair.clients[other].post(f"/api/v1/workflows/{workflow}/runs/{run_id}/cancel")
    assert r.status_code == 202, r.text
    run = wait_runs(pair.clients[0], {run_id: workflow}, timeout=20)[run_id]
    assert run["status"] == "cancelled" and run["error"]["code"] == "cancelled"
    status = {node["node_id"]: node["status"] for node in run["node_runs"]}
    assert status == {"in": "completed", "wait": "cancelled", "out": "cancelled"}
    assert_nothing_ran_twice_and_the_books_balance(pair.url)


def test_a_run_whose_process_died_is_finished_by_the_other(pair: Pair) -> None:
    """Last in the module: one serve of this pair is killed."""
    workflow = pair.workflow(slow(3))
    runs = [pair.execute(i % 2, workflow, f"r{i}") for i in range(4)]
    pids = pair.executing("wait", runs)
    victim_index = next(i for i, s in enumerate(pair.serves) if s.proc and s.proc.pid in pids)
    victim = pair.serves[victim_index]
    assert victim.proc is not None
    lost = pids.count(victim.proc.pid)
    victim.kill()
    survivor = pair.clients[1 - victim_index]
    results = wait_runs(survivor, dict.fromkeys(runs, workflow), timeout=90)
    assert all(r["status"] == "completed" for r in results.values()), results
    again = query(pair.url, "SELECT count(*) FROM node_runs WHERE node_id='wait' AND attempts=2")
    assert again[0][0] == lost  # exactly the interrupted nodes started once more
    assert_nothing_ran_twice_and_the_books_balance(pair.url)
