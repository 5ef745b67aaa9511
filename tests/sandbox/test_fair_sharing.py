"""One account cannot starve the others of sandbox processes: against a real server whose
two sandbox processes an attacker floods with templates that burn their whole budget,
another account's runs that need the sandbox still finish in about their usual time, while
the attacker's wait their turn. On SQLite (runs driven in the server) and on PostgreSQL
(nodes as queue jobs, run by the server's worker: fair among the jobs it has taken)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodeloom.db.migrate import upgrade
from tests.conftest import TEST_SECRET, _admin, _pg_url
from tests.live import account, node, wait_run
from tests.sandbox.test_hostile_nodes import BURN, _graph
from tests.server import ServerProcess
from tests.services import require_postgres

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # fairness measured in wall time

WALL = 3  # seconds each attacker node burns before its budget stops it
ATTACK_RUNS = 24  # 24 x 3 s on two processes: 36 s of work queued ahead of the victim
VICTIM_RUNS = 3
# The victim's template has a filter, so it is rendered in a sandbox process (not inline).
VICTIM_TEMPLATE = "{{ text|upper }}"


@contextlib.contextmanager
def _database(backend: str) -> Iterator[dict[str, str]]:
    """The settings of a server on ``backend``: a PostgreSQL database of its own, dropped
    afterwards, or the SQLite file in the data directory."""
    if backend == "sqlite":
        yield {}
        return
    require_postgres()
    name = f"nl_fair_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    url = _pg_url(name)
    try:
        upgrade(url)
        # The worker takes every queued job (more than it can run) and chooses among them.
        yield {
            "NODELOOM_DATABASE_URL": url,
            "NODELOOM_SECRET_KEY": TEST_SECRET,
            "NODELOOM_WORKER_CONCURRENCY": str(ATTACK_RUNS + 2 * VICTIM_RUNS),
        }
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _client(server: ServerProcess, email: str) -> httpx.Client:
    """A client of a new account, with its API key."""
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        _, key = account(http, email)
    return httpx.Client(
        base_url=server.base_url, timeout=30, headers={"Authorization": f"Bearer {key}"}
    )


def _workflow(http: httpx.Client, template: str) -> str:
    r = http.post("/api/v1/workflows", json={"name": "w", "graph_json": _graph(template)})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _execute(http: httpx.Client, wf: str) -> str:
    r = http.post(f"/api/v1/workflows/{wf}/execute", json={"input": {"text": "hi"}})
    assert r.status_code == 202, r.text
    return str(r.json()["run_id"])


def _run(http: httpx.Client, wf: str, run_id: str) -> dict[str, Any]:
    r = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}")
    assert r.status_code == 200, r.text
    run: dict[str, Any] = r.json()
    return run


@pytest.mark.parametrize(
    ("backend", "share"),
    [
        pytest.param("sqlite", None, id="sqlite-default-share"),
        # Even an account allowed every process gets the next free one only when nobody
        # holding fewer waits: the victim waits for one attacker node at most per node.
        pytest.param("sqlite", "2", id="sqlite-whole-pool-share"),
        pytest.param("postgres", None, id="postgres-default-share", marks=pytest.mark.postgres),
    ],
)
def test_a_flooding_account_does_not_starve_another(
    tmp_path: Path, backend: str, share: str | None
) -> None:
    env = {
        "NODELOOM_RATE_LIMIT_API_KEY": "100000",
        "NODELOOM_RATE_LIMIT_JWT": "100000",  # the per-account limit: the test polls
        "NODELOOM_SIGNUP_ENABLED": "true",
        "NODELOOM_SANDBOX_PROCESSES": "2",
        "NODELOOM_SANDBOX_WARM": "2",
        "NODELOOM_SHUTDOWN_GRACE_SECONDS": "1",  # the flood is not waited for at the end
        # Fewer node and driver slots than attacker runs: those are shared fairly too.
        "NODELOOM_MAX_CONCURRENT_NODES": "4",
        "NODELOOM_MAX_ACTIVE_RUNS": "6",
        "NODELOOM_NODE_BUDGETS": json.dumps({"text": {"wall_seconds": WALL, "cpu_seconds": WALL}}),
    }
    if share is not None:
        env["NODELOOM_SANDBOX_SLOTS_PER_ACCOUNT"] = share
    with _database(backend) as database:
        server = ServerProcess(tmp_path / "data", env={**env, **database})
        # Each victim run takes well under a second here. Before fair sharing it took 31 s
        # (behind the attacker's 36 s of queued work). With a slot always left, it waits for
        # nothing; allowed the whole pool, the attacker makes each victim node wait for at
        # most one of its nodes to end (3 s), and the victim's three runs go one by one.
        _flood_and_serve(server, bound=12 if share is None else 22)


def _flood_and_serve(server: ServerProcess, bound: float) -> None:
    server.start()
    try:
        attacker = _client(server, "attacker@example.com")
        victim = _client(server, "victim@example.com")
        with attacker, victim:
            burn = _workflow(attacker, BURN)
            mine = _workflow(victim, VICTIM_TEMPLATE)

            attack = [_execute(attacker, burn) for _ in range(ATTACK_RUNS)]
            # Wait until the attacker's nodes occupy the sandbox.
            deadline = time.monotonic() + 20
            while node(_run(attacker, burn, attack[0]), "tpl")["status"] != "running":
                assert time.monotonic() < deadline, "the attacker's first node never started"
                time.sleep(0.05)

            with ThreadPoolExecutor(VICTIM_RUNS) as pool:

                def one_run(_: int) -> tuple[dict[str, Any], float]:
                    started = time.monotonic()
                    run = wait_run(victim, mine, _execute(victim, mine), 60)
                    return run, time.monotonic() - started

                results = list(pool.map(one_run, range(VICTIM_RUNS)))

            for run, took in results:
                assert run["status"] == "completed", run
                assert node(run, "tpl")["status"] == "completed"
                assert took < bound, f"the victim's run took {took:.1f} s"

            # The attacker's runs were still queued behind their own: the sandbox was
            # contended the whole time, the victim did not just arrive after the flood.
            unfinished = [
                run_id for run_id in attack if _run(attacker, burn, run_id)["status"] == "running"
            ]
            assert unfinished, "the attacker's flood had drained before the victim was served"
            # Those that did run were stopped by their budget.
            failed = [
                wait_run(attacker, burn, run_id, 10)
                for run_id in attack
                if run_id not in unfinished
            ]
            for run in failed:
                assert node(run, "tpl")["error"]["code"] == "node_timeout", run
    finally:
        server.stop()
