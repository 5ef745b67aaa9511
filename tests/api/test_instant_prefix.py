"""Scale-out (PostgreSQL, queue workers): the instant prefix of a run that needs a worker —
the TextInput before a Delay — is executed while the run is accepted (ADR 0018), and the
instant nodes after the worker's node are executed by that node's job before its finish
step and recorded by it. What the run leaves behind (events, ledger, node rows) is what a
run driven node by node leaves."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from nodeloom.engine.credits import ledger_balance
from tests.api.test_instant_runs import events_of, ledger_of, run_now, shape
from tests.conftest import User
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


@pytest.fixture(params=["postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """Queue workers only: the embedded driver executes instant nodes in its own steps."""
    return str(request.param)


def delayed(template: str = "{{ text }} / done") -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput"),
            n("wait", "Delay", seconds=0),
            n("tpl", "TextTemplate", template=template),
        ],
        [e("in", "wait"), e("wait", "tpl")],
    )


async def claims(app: FastAPI, run_id: str) -> dict[str, tuple[str, str | None, bool]]:
    query = sa.text("select node_id, status, claimed_by, cached from node_runs where run_id = :run")
    rows = await app.state.ctx.db.read(lambda c: c.execute(query, {"run": run_id}).all())
    return {node: (status, claim, cached) for node, status, claim, cached in rows}


EXPECTED = [
    (1, "run.started", None),
    (2, "node.started", "in"),
    (3, "node.completed", "in"),
    (4, "node.started", "wait"),
    (5, "node.completed", "wait"),
    (6, "node.started", "tpl"),
    (7, "node.completed", "tpl"),
    (8, "run.completed", None),
]


class TestInstantPrefix:
    async def test_the_prefix_runs_at_acceptance_and_the_rest_in_one_job(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(client, owner, delayed())
        before = await balance(client, owner)
        r = await execute(client, owner, wf, {"input": {"text": "x"}})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        # Committed with the acceptance: the input completed under the accepting process's
        # claim (no job), the Delay queued for a worker.
        accepted = await claims(app, run_id)
        status, claim, _ = accepted["in"]
        assert status == "completed" and claim is not None and not claim.startswith("job:")
        run = await wait_for_run(client, owner, wf, run_id)
        assert run["status"] == "completed", run
        done = await claims(app, run_id)
        # The Delay's job executed the template ahead and its finish step recorded both.
        assert done["wait"][1] == done["tpl"][1] and str(done["wait"][1]).startswith("job:")
        assert shape(await events_of(client, owner, wf, run_id)) == EXPECTED
        assert await ledger_of(app, run_id) == [("", "hold", 1), ("tpl", "charge", 1)]
        assert await balance(client, owner) == before - 1
        assert await app.state.ctx.db.read(lambda c: ledger_balance(c, owner.id)) == before - 1
        download = await client.get(
            f"/api/v1/artifacts/{run['node_runs'][-1]['artifact_id']}", headers=owner.headers
        )
        assert download.text == "x / done"
        for node in run["node_runs"]:
            assert node["started_at"] <= node["finished_at"]

    async def test_a_stored_output_is_reused_by_the_prefix(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(client, owner, delayed())
        first = (await execute(client, owner, wf, {"input": {"text": "same"}})).json()
        await wait_for_run(client, owner, wf, first["run_id"])
        second = (await execute(client, owner, wf, {"input": {"text": "same"}})).json()
        assert (await claims(app, second["run_id"]))["in"][2] is True  # cached
        run = await wait_for_run(client, owner, wf, second["run_id"])
        assert run["status"] == "completed"
        assert shape(await events_of(client, owner, wf, second["run_id"])) == EXPECTED

    async def test_a_prefix_that_needs_a_sandbox_leaves_the_run_to_the_workers(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        # A substituting template that turns out to be ambiguous for this input (a dict's
        # ``items`` is a method to Jinja): it needs the sandbox after all, so the run is
        # accepted as before, its root queued for a job.
        graph = g(
            [
                n("in", "TextInput"),
                n("tpl", "TextTemplate", template="{{ input.items }}!"),
                n("wait", "Delay", seconds=0),
            ],
            [e("in", "tpl"), e("tpl", "wait")],
        )
        wf = await create_workflow(client, owner, graph)
        r = await execute(client, owner, wf, {"input": {"text": "y", "items": "z"}})
        run_id = r.json()["run_id"]
        run = await wait_for_run(client, owner, wf, run_id)
        assert run["status"] == "completed", run
        assert all(str(c).startswith("job:") for _, c, _ in (await claims(app, run_id)).values())

    async def test_a_failing_prefix_fails_the_run_at_acceptance(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        graph = delayed()
        graph["nodes"][0]["data"] = {"key": "missing"}  # names nothing in the input: fails
        wf = await create_workflow(client, owner, graph)
        before = await balance(client, owner)
        r = await execute(client, owner, wf, {"input": {"text": "z"}})
        assert r.status_code == 202, r.text
        run = await run_now(client, owner, wf, r.json()["run_id"])  # ended when answered
        assert run["status"] == "failed" and run["error"]["node_id"] == "in"
        assert [nr["status"] for nr in run["node_runs"]] == ["failed", "skipped", "skipped"]
        assert await balance(client, owner) == before
