"""Long chains of instant nodes (a text input, templates that only substitute): longer than
one step of the in-process driver (64 instant nodes), up to the graph size limit, which is a
setting. Whatever the chain's length: every node completed in order, one event log without
gaps, exact charges, the output cache honoured, and a template that needs Jinja after all
still run (as a task of its own)."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy.engine import Connection

from nodeloom.engine.credits import ledger_balance
from nodeloom.engine.new_run import new_run, read_workflow, write_run
from nodeloom.engine.run_request import RunRequest
from nodeloom.engine.transitions import Batch, apply
from nodeloom.states import StaleTransition
from tests.api.test_auth import assert_problem
from tests.api.test_instant_runs import events_of, ledger_of
from tests.conftest import User
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run

LIMIT = 1000
JINJA = "{{ input.items }}"  # substitution cannot tell a key from the method: Jinja renders it


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000, "max_graph_nodes": LIMIT}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The embedded driver (SQLite) and queue workers (PostgreSQL) alike."""
    return str(request.param)


def chain(length: int, jinja_at: int | None = None) -> dict[str, Any]:
    """TextInput -> TextTemplate("{{ text }}.") x (length - 1); node ``jinja_at`` renders
    ``JINJA`` instead."""
    nodes = [n("n0", "TextInput")]
    for i in range(1, length):
        template = JINJA if i == jinja_at else "{{ text }}."
        nodes.append(n(f"n{i}", "TextTemplate", template=template))
    return g(nodes, [e(f"n{i - 1}", f"n{i}") for i in range(1, length)])


async def run_chain(
    client: httpx.AsyncClient, user: User, wf: str, body: dict[str, Any]
) -> dict[str, Any]:
    r = await execute(client, user, wf, body)
    assert r.status_code == 202, r.text
    return await wait_for_run(client, user, wf, r.json()["run_id"], timeout=120)


async def text_of(client: httpx.AsyncClient, user: User, artifact_id: str) -> str:
    r = await client.get(f"/api/v1/artifacts/{artifact_id}", headers=user.headers)
    assert r.status_code == 200, r.text
    return r.text


async def assert_completed_in_order(app: FastAPI, run: dict[str, Any], length: int) -> None:
    """Every node completed, each after the one feeding it, started once and claimed."""
    nodes = run["node_runs"]
    assert run["status"] == "completed" and run["error"] is None
    assert [nr["node_id"] for nr in nodes] == [f"n{i}" for i in range(length)]
    assert all(nr["status"] == "completed" for nr in nodes)
    for before, after in pairwise(nodes):
        assert before["finished_at"] <= after["started_at"] <= after["finished_at"]
    query = sa.text("select attempts, claimed_by from node_runs where run_id = :run")
    rows = await app.state.ctx.db.read(lambda c: c.execute(query, {"run": run["id"]}).all())
    assert len(rows) == length
    assert all(attempts == 1 and claimed_by for attempts, claimed_by in rows)


async def assert_log_and_charges(
    client: httpx.AsyncClient, user: User, app: FastAPI, wf: str, run: dict[str, Any]
) -> None:
    """Events 1..n without gaps, each node started then completed in chain order; one
    credit per template, held, charged and nothing left to release."""
    templates = len(run["node_runs"]) - 1
    events = await events_of(client, user, wf, run["id"])
    assert [ev["seq"] for ev in events] == list(range(1, len(events) + 1))
    expected = [("run.started", None)]
    for nr in run["node_runs"]:
        expected += [("node.started", nr["node_id"]), ("node.completed", nr["node_id"])]
    expected.append(("run.completed", None))
    assert [(ev["type"], ev.get("node_id")) for ev in events] == expected
    assert run["credits_used"] == templates == run["estimated_credits"]
    ledger = await ledger_of(app, run["id"])
    charges = [amount for _, kind, amount in ledger if kind == "charge"]
    assert ledger[0] == ("", "hold", templates)
    assert len(charges) == templates and sum(charges) == templates
    assert [kind for _, kind, _ in ledger].count("release") == 0
    assert await app.state.ctx.db.read(lambda c: ledger_balance(c, user.id)) == await balance(
        client, user
    )


class TestLongChains:
    async def test_a_chain_of_200_runs_in_order_with_exact_charges(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(client, owner, chain(200))
        before = await balance(client, owner)
        run = await run_chain(client, owner, wf, {"input": {"text": "go"}, "cache": False})
        await assert_completed_in_order(app, run, 200)
        assert await text_of(client, owner, run["node_runs"][-1]["artifact_id"]) == "go" + "." * 199
        await assert_log_and_charges(client, owner, app, wf, run)
        assert await balance(client, owner) == before - 199

    async def test_a_second_identical_run_reuses_every_output(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(client, owner, chain(100))
        body = {"input": {"text": "same"}, "cache": True}
        first = await run_chain(client, owner, wf, body)
        assert [nr["cached"] for nr in first["node_runs"]] == [False] * 100
        before = await balance(client, owner)
        second = await run_chain(client, owner, wf, body)
        await assert_completed_in_order(app, second, 100)
        assert second["credits_used"] == 0
        assert [nr["cached"] for nr in second["node_runs"]] == [True] * 100
        assert [nr["credits_used"] for nr in second["node_runs"]] == [0] * 100
        assert [nr["artifact_id"] for nr in second["node_runs"]] == [
            nr["artifact_id"] for nr in first["node_runs"]
        ]
        assert await balance(client, owner) == before
        assert await ledger_of(app, second["id"]) == [("", "hold", 99), ("", "release", 99)]

    async def test_a_template_that_needs_jinja_midway_still_runs(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(client, owner, chain(150, jinja_at=100))
        run = await run_chain(client, owner, wf, {"input": {"text": "j"}, "cache": False})
        await assert_completed_in_order(app, run, 150)
        nodes = run["node_runs"]
        assert await text_of(client, owner, nodes[99]["artifact_id"]) == "j" + "." * 99
        rendered = await text_of(client, owner, nodes[100]["artifact_id"])
        assert rendered.startswith("<built-in method items")
        assert await text_of(client, owner, nodes[-1]["artifact_id"]) == rendered + "." * 49
        await assert_log_and_charges(client, owner, app, wf, run)


class TestAChainOfTheRaisedLimit:
    @pytest.fixture(params=["sqlite"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        """The in-process driver; with queue workers the 200-node chain above stands for
        it (1,000 jobs one after the other take half a minute)."""
        return str(request.param)

    async def test_it_runs_in_order_with_exact_charges(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        wf = await create_workflow(client, owner, chain(LIMIT))
        run = await run_chain(client, owner, wf, {"input": {"text": "k"}, "cache": False})
        await assert_completed_in_order(app, run, LIMIT)
        last = run["node_runs"][-1]["artifact_id"]
        assert await text_of(client, owner, last) == "k" + "." * (LIMIT - 1)
        await assert_log_and_charges(client, owner, app, wf, run)


class TestTheLimitIsASetting:
    @pytest.fixture(params=["sqlite"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture(params=[None, LIMIT], ids=["default", "raised"])
    def settings_overrides(self, request: pytest.FixtureRequest) -> dict[str, object]:
        return {} if request.param is None else {"max_graph_nodes": request.param}

    async def test_a_longer_graph_is_refused_naming_the_configured_limit(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        limit = app.state.ctx.settings.max_graph_nodes
        nodes = [n(f"n{i}", "TextInput") for i in range(limit + 1)]
        too_big = {"name": "big", "graph_json": g(nodes, [])}
        problem = assert_problem(
            await client.post("/api/v1/workflows", json=too_big, headers=owner.headers),
            400,
            "invalid_graph",
        )
        assert problem["errors"] == [
            {"pointer": "/graph_json/nodes", "message": f"a graph has at most {limit} nodes"}
        ]
        fits = {"name": "fits", "graph_json": g(nodes[:limit], [])}
        r = await client.post("/api/v1/workflows", json=fits, headers=owner.headers)
        assert r.status_code == 201, r.text


class TestStartedAndEndedInOneStep:
    """A node started and ended in one step is written by one UPDATE; it still names the
    states a start may leave and refuses (the whole step rolls back) when the row is
    elsewhere."""

    async def test_the_single_update_checks_its_from_states(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        ctx = app.state.ctx
        wf = await create_workflow(client, owner, chain(3))
        request = RunRequest(owner.id, wf, None, False, "business")
        workflow = await ctx.db.read(lambda c: read_workflow(c, owner.id, wf, ctx.graphs))
        state, created = new_run(request, workflow)
        run_id = created.run_id
        at = datetime.now(UTC)
        seen: list[Any] = []

        def started_and_failed(node_id: str) -> Batch:
            batch = Batch(run_id, wf, owner.id)
            batch.start_node(node_id, at, "test-process")
            batch.fail_node(node_id, at, {"code": "node_failed", "message": "no"})
            return batch

        def step(conn: Connection) -> None:
            # Never committed (it raises below), so no driver ever sees this run.
            write_run(conn, request, state, created, {"run_id": run_id})
            apply(conn, started_and_failed("n0"), 2)  # the root is queued: allowed
            query = sa.text(
                "select status, attempts, claimed_by, started_at is not null, "
                "finished_at is not null from node_runs where run_id = :run and node_id = 'n0'"
            )
            seen.append(tuple(conn.execute(query, {"run": run_id}).one()))
            apply(conn, started_and_failed("n0"), 4)  # failed already: refused

        with pytest.raises(StaleTransition):
            await ctx.db.write(step)
        assert seen == [("failed", 1, "test-process", True, True)]
        runs = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
        assert runs.json() == []
