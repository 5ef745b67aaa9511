"""A run that goes on after it is accepted (a node for queue workers), accepted on PostgreSQL
as one statement of its own: the run's rows, its hold, its jobs and its Idempotency-Key
together, or nothing (ADR 0035). What it leaves is what the transaction leaves: the run
completes on the workers, a replay of its key answers the same run, a key reused for another
body is refused, and a balance short of the hold is refused with nothing written."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from tests.conftest import User
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


@pytest.fixture
def backend() -> str:
    return "postgres"


def delayed_graph() -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput"),
            n("wait", "Delay", seconds=1),
            n("out", "TextTemplate", template="<{{ text }}>"),
        ],
        [e("in", "wait"), e("wait", "out")],
    )


async def jobs_of(app: FastAPI, run_id: str) -> list[tuple[str, str]]:
    """(node, queue) of the run's queue jobs, done or not."""
    query = sa.text(
        "SELECT args->>'node_id', queue_name FROM procrastinate_jobs "
        "WHERE args->>'run_id' = :run ORDER BY id"
    )
    rows = await app.state.ctx.db.read(lambda c: c.execute(query, {"run": run_id}).all())
    return [(str(a), str(b)) for a, b in rows]


async def test_an_execute_with_a_key_is_one_statement_and_the_run_completes(
    client: httpx.AsyncClient, owner: User, app: FastAPI
) -> None:
    wf = await create_workflow(client, owner, delayed_graph())
    db = app.state.ctx.db
    # The first run reads the workflow's graph into the process's cache.
    first = await execute(client, owner, wf, {"input": {"text": "warm"}})
    assert first.status_code == 202, first.text
    await wait_for_run(client, owner, wf, first.json()["run_id"])
    key = {"Idempotency-Key": uuid.uuid4().hex}
    body = {"input": {"text": "a"}, "cache": False}
    # The request's own statements: the API key's look-up, one look-ahead (the key's earlier
    # answer and the workflow's version together: engine/look_ahead.py), and the acceptance
    # as one statement (no BEGIN, cache look-up, INSERTs, hand-over, key insert, COMMIT;
    # ADR 0035).
    with db.counting() as sent:
        r = await client.post(
            f"/api/v1/workflows/{wf}/execute", json=body, headers={**owner.headers, **key}
        )
    assert r.status_code == 202, r.text
    assert sent.n == 3
    run_id = r.json()["run_id"]
    # TextInput executed while accepted; the Delay handed over by that statement, as the
    # run's job (a job is deleted when it succeeds: read while the Delay waits).
    assert await jobs_of(app, run_id) == [("wait", "nodes")]
    done = await wait_for_run(client, owner, wf, run_id)
    assert done["status"] == "completed"
    assert [nr["status"] for nr in done["node_runs"]] == ["completed"] * 3

    again = await client.post(
        f"/api/v1/workflows/{wf}/execute", json=body, headers={**owner.headers, **key}
    )
    assert again.status_code == 202 and again.json()["run_id"] == run_id
    other = await client.post(
        f"/api/v1/workflows/{wf}/execute",
        json={"input": {"text": "b"}, "cache": False},
        headers={**owner.headers, **key},
    )
    assert other.status_code == 422, other.text
    assert other.headers["content-type"] == "application/problem+json"
    runs = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
    assert len(runs.json()) == 2


async def test_a_hold_the_balance_cannot_cover_writes_nothing(
    client: httpx.AsyncClient, owner: User, app: FastAPI
) -> None:
    from nodeloom.store import accounts

    wf = await create_workflow(client, owner, delayed_graph())
    await app.state.ctx.db.write(lambda c: accounts.set_credits(c, owner.id, 0))
    key = {"Idempotency-Key": uuid.uuid4().hex}
    r = await client.post(
        f"/api/v1/workflows/{wf}/execute",
        json={"input": {"text": "a"}},
        headers={**owner.headers, **key},
    )
    assert r.status_code == 402, r.text
    assert r.headers["content-type"] == "application/problem+json"
    runs = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
    assert runs.json() == []
    assert await balance(client, owner) == 0
    jobs = sa.text("SELECT count(*) FROM procrastinate_jobs")
    assert await app.state.ctx.db.read(lambda c: c.execute(jobs).scalar()) == 0
