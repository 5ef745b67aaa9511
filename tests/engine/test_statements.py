"""What a run costs the embedded database (SQLite), in statements: the figure operators size
it by (``nodeloom_db_statements``) and the one bench/bench_runs.py reports. A two-node run of
instant nodes costs at most eight with its execute's authentication; a run its driver
executes step by step costs what its steps write, with nothing read between them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.conftest import User
from tests.runs_helpers import create_workflow, e, execute, g, n

RUNS = 20
# Counted over the whole process: a loaded machine makes the runs slower and the background
# loops' statements more. Run alone, after the parallel part of the suite.
pytestmark = pytest.mark.serial


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


def two_nodes(template: str) -> dict[str, Any]:
    return g([n("n0", "TextInput"), n("n1", "TextTemplate", template=template)], [e("n0", "n1")])


async def idle(app: FastAPI, timeout: float = 60.0) -> None:
    """Until no run is driven (asked of the dispatcher: no statement)."""
    deadline = time.monotonic() + timeout
    while app.state.ctx.dispatcher.active_runs or app.state.ctx.dispatcher.waiting_runs:
        assert time.monotonic() < deadline, "runs still driven"
        await asyncio.sleep(0.01)


async def per_run(client: httpx.AsyncClient, app: FastAPI, owner: User, wf: str) -> float:
    """Statements per run of ``wf``, executed RUNS times. The server's background work (the
    run sweep, the revocation feed) sends a statement now and then; it only ever adds, so
    the least of three measures is the runs' own cost."""
    db = app.state.ctx.db
    measures = []
    for _ in range(3):
        before = db.statements
        for i in range(RUNS):
            r = await execute(client, owner, wf, {"input": {"text": f"s{i}"}, "cache": False})
            assert r.status_code == 202, r.text
        await idle(app)
        measures.append(float(db.statements - before) / RUNS)
    return min(measures)


class TestStatementsPerRun:
    async def test_a_run_of_instant_nodes_costs_eight(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, two_nodes("{{ text }}."))
        await execute(client, owner, wf, {"cache": False})  # warm: the graph cache, the key
        await idle(app)
        # Authentication, the workflow's version, the hold and the run with its nodes,
        # artifacts, ledger rows and events: every run finished at acceptance.
        assert await per_run(client, app, owner, wf) <= 8.0

    async def test_a_driven_run_reads_nothing_between_its_steps(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User
    ) -> None:
        # Jinja must render this template: the driver runs it in the sandbox, as a task.
        wf = await create_workflow(client, owner, two_nodes("{{ input.items }}"))
        await execute(client, owner, wf, {"cache": False})
        await idle(app)
        # Accepting it, then the driver's two steps: the first executes the text input and
        # starts the template, the second records the template and ends the run.
        assert await per_run(client, app, owner, wf) <= 16.0
