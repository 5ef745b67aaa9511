"""Sub-workflows: a ``Workflow`` node runs another workflow of the same account as a step.
Over HTTP, on SQLite (in-process driver) and PostgreSQL (queue workers): the child is a
real run linked both ways, the parent node completes with the child's output or fails
quoting its error, cancelling the parent cancels the child, cycles and other accounts'
workflows are validation problems with a pointer, and the parent's estimate counts the
child's cost."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from nodeloom.db.models import Workflow
from nodeloom.engine.credits import ledger_balance
from nodeloom.engine.executor import NodeTask
from nodeloom.engine.new_run import read_workflow
from nodeloom.schemas.events import MESSAGE
from tests.api.test_auth import assert_problem
from tests.api.test_instant_runs import events_of
from tests.conftest import User
from tests.runs_helpers import balance, create_workflow, e, execute, g, n, wait_for_run


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """In-process driving (SQLite) and queue workers (PostgreSQL) alike."""
    return str(request.param)


# The child: its TextInput (key "topic") is the Workflow node's input "topic"; its one
# output node, a template (1 credit), the node's output.
CHILD = g(
    [
        n("in", "TextInput", key="topic", text="nothing"),
        n("t", "TextTemplate", template="About {{ text }}"),
    ],
    [e("in", "t")],
)


def parent_of(child_id: str, sub_data: dict[str, Any] | None = None) -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput", text="cats"),
            n("sub", "Workflow", workflow_id=child_id, **(sub_data or {})),
            n("out", "TextTemplate", template="[{{ text }}]"),
        ],
        [e("in", "sub", "topic"), e("sub", "out")],
    )


def _url(wf: str, run_id: str = "") -> str:
    return f"/api/v1/workflows/{wf}/runs" + (f"/{run_id}" if run_id else "")


def _nodes(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {nr["node_id"]: nr for nr in run["node_runs"]}


async def _text(client: httpx.AsyncClient, user: User, artifact_id: str) -> str:
    r = await client.get(f"/api/v1/artifacts/{artifact_id}", headers=user.headers)
    assert r.status_code == 200, r.text
    return r.text


async def _get(client: httpx.AsyncClient, user: User, wf: str, run_id: str) -> dict[str, Any]:
    r = await client.get(_url(wf, run_id), headers=user.headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _save(
    client: httpx.AsyncClient, user: User, graph: dict[str, Any], wf: str | None = None
) -> httpx.Response:
    body = {"name": "wf", "graph_json": graph}
    if wf is None:
        return await client.post("/api/v1/workflows", json=body, headers=user.headers)
    return await client.patch(f"/api/v1/workflows/{wf}", json=body, headers=user.headers)


async def _child_started(
    client: httpx.AsyncClient, user: User, seconds: float
) -> tuple[str, str, str, str]:
    """A parent run whose child (a Delay of ``seconds``) has started: the child workflow,
    the parent workflow, the parent's run and the child's run."""
    slow = g([n("in", "TextInput", key="topic"), n("d", "Delay", seconds=seconds)], [e("in", "d")])
    child = await create_workflow(client, user, slow, "child")
    parent = await create_workflow(client, user, parent_of(child), "parent")
    run_id = (await execute(client, user, parent)).json()["run_id"]
    child_run_id = None
    deadline = time.monotonic() + 10
    while child_run_id is None:
        assert time.monotonic() < deadline, "the child run never started"
        await asyncio.sleep(0.05)
        child_run_id = _nodes(await _get(client, user, parent, run_id))["sub"]["child_run_id"]
    return child, parent, run_id, child_run_id


class TestRunning:
    async def test_child_runs_as_a_linked_run_and_its_output_feeds_the_parent(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        child = await create_workflow(client, owner, CHILD, "child")
        parent = await create_workflow(client, owner, parent_of(child), "parent")
        before = await balance(client, owner)
        r = await execute(client, owner, parent)
        assert r.status_code == 202, r.text
        # The child's template (1) counts in the parent's estimate, with the parent's own.
        assert r.json()["estimated_credits"] == 2
        run = await wait_for_run(client, owner, parent, r.json()["run_id"])
        assert run["status"] == "completed", run
        nodes = _nodes(run)
        sub = nodes["sub"]
        assert sub["status"] == "completed" and sub["type"] == "Workflow"
        child_run_id = sub["child_run_id"]
        assert child_run_id and sub["child_workflow_id"] == child
        assert await _text(client, owner, nodes["out"]["artifact_id"]) == "[About cats]"

        # The child is a real run of the child workflow, linked back.
        child_run = await _get(client, owner, child, child_run_id)
        assert child_run["status"] == "completed"
        assert child_run["parent_run_id"] == run["id"] and child_run["parent_node_id"] == "sub"
        assert child_run["parent_workflow_id"] == parent and run["parent_workflow_id"] is None
        assert child_run["trigger"] == "workflow"
        assert child_run["input"] == {"topic": "cats"}
        # The parent node's artifact is the child's output (shared, not copied).
        assert sub["artifact_id"] == _nodes(child_run)["t"]["artifact_id"]
        assert run["parent_run_id"] is None and nodes["out"]["child_run_id"] is None
        # Listed among the child workflow's runs, by its trigger.
        r = await client.get(_url(child) + "?trigger=workflow", headers=owner.headers)
        assert [item["id"] for item in r.json()] == [child_run_id]

        # Credits: each run charged what it ran, once; the ledger agrees with the balance.
        assert run["credits_used"] == 1 and sub["credits_used"] == 0
        assert child_run["credits_used"] == 1
        assert await balance(client, owner) == before - 2
        db = app.state.ctx.db
        assert await db.read(lambda c: ledger_balance(c, owner.id)) == await balance(client, owner)

        # The child's first event names its parent; every event is of the published shape.
        events = await events_of(client, owner, child, child_run_id)
        for event in events:
            MESSAGE.validate_python(event)
        assert events[0]["data"]["parent_run_id"] == run["id"]

    async def test_a_failing_child_fails_the_node_quoting_its_error(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        bad = g(
            [n("in", "TextInput", key="topic"), n("boom", "TextTemplate", template="{{ 1 / 0 }}")],
            [e("in", "boom")],
        )
        child = await create_workflow(client, owner, bad, "child")
        parent = await create_workflow(client, owner, parent_of(child), "parent")
        r = await execute(client, owner, parent)
        run = await wait_for_run(client, owner, parent, r.json()["run_id"])
        assert run["status"] == "failed", run
        assert run["error"]["node_id"] == "sub" and run["error"]["code"] == "child_failed"
        nodes = _nodes(run)
        assert nodes["out"]["status"] == "skipped"
        child_run = await _get(client, owner, child, nodes["sub"]["child_run_id"])
        assert child_run["status"] == "failed"
        assert child_run["error"]["message"] in run["error"]["message"]
        assert "(node boom)" in run["error"]["message"]

    async def test_cancelling_the_parent_cancels_the_child(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        child, parent, run_id, child_run_id = await _child_started(client, owner, 30)
        r = await client.post(_url(parent, run_id) + "/cancel", headers=owner.headers)
        assert r.status_code == 202
        run = await wait_for_run(client, owner, parent, run_id, timeout=10)
        assert run["status"] == "cancelled", run
        child_run = await wait_for_run(client, owner, child, child_run_id, timeout=10)
        assert child_run["status"] == "cancelled", child_run
        assert _nodes(child_run)["d"]["status"] == "cancelled"

    async def test_a_child_cancelled_on_its_own_fails_the_parent_node(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        child, parent, run_id, child_run_id = await _child_started(client, owner, 30)
        r = await client.post(_url(child, child_run_id) + "/cancel", headers=owner.headers)
        assert r.status_code == 202
        run = await wait_for_run(client, owner, parent, run_id, timeout=10)
        assert run["status"] == "failed", run
        assert run["error"]["code"] == "child_cancelled" and run["error"]["node_id"] == "sub"

    async def test_estimate_counts_the_child(self, client: httpx.AsyncClient, owner: User) -> None:
        child = await create_workflow(client, owner, CHILD, "child")
        parent = await create_workflow(client, owner, parent_of(child), "parent")
        r = await client.get(f"/api/v1/workflows/{parent}/estimate", headers=owner.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["estimated_credits"] == 2
        assert {x["node_id"]: x["credits"] for x in body["nodes"]} == {"in": 0, "sub": 1, "out": 1}


class TestValidation:
    async def test_another_accounts_workflow_reads_as_no_such_workflow(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        theirs = await create_workflow(client, other, CHILD, "theirs")
        for missing in (theirs, "00000000-0000-0000-0000-000000000000"):
            r = await _save(client, owner, parent_of(missing))
            problem = assert_problem(r, 400, "invalid_graph")
            assert problem["errors"] == [
                {
                    "pointer": "/graph_json/nodes/1/data/workflow_id",
                    "message": f"no workflow {missing!r} in this account",
                }
            ]

    async def test_cycles_between_workflows_are_refused_with_a_pointer(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        a = await create_workflow(client, owner, CHILD, "a")
        b = await create_workflow(client, owner, parent_of(a), "b")
        # a -> b -> a
        r = await _save(client, owner, parent_of(b), wf=a)
        problem = assert_problem(r, 400, "invalid_graph")
        [error] = problem["errors"]
        assert error["pointer"] == "/graph_json/nodes/1/data/workflow_id"
        assert "cycle" in error["message"] and f"{a} -> {b} -> {a}" in error["message"]
        # a -> a
        r = await _save(client, owner, parent_of(a), wf=a)
        [error] = assert_problem(r, 400, "invalid_graph")["errors"]
        assert error["pointer"] == "/graph_json/nodes/1/data/workflow_id"
        assert f"{a} -> {a}" in error["message"]
        # Nothing was saved: a still runs as it was.
        r = await execute(client, owner, a, {"input": {"topic": "x"}})
        run = await wait_for_run(client, owner, a, r.json()["run_id"])
        assert run["status"] == "completed"

    async def test_the_nodes_interface_is_the_childs(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        child = await create_workflow(client, owner, CHILD, "child")
        # An input the child does not have.
        graph = parent_of(child)
        graph["edges"][0]["targetHandle"] = "colour"
        r = await _save(client, owner, graph)
        [error] = assert_problem(r, 400, "invalid_graph")["errors"]
        assert error["pointer"] == "/graph_json/edges/0/targetHandle"
        assert "'colour'" in error["message"] and "topic" in error["message"]
        # A child with two output nodes cannot be a step.
        two = g([n("a", "TextInput"), n("b", "TextInput", key="k")], [])
        two_id = await create_workflow(client, owner, two, "two")
        r = await _save(client, owner, parent_of(two_id))
        [error] = assert_problem(r, 400, "invalid_graph")["errors"]
        assert error["pointer"] == "/graph_json/nodes/1/data/workflow_id"
        assert "2 output nodes" in error["message"]

    async def test_a_child_changed_since_is_seen_at_execute(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        child = await create_workflow(client, owner, CHILD, "child")
        parent = await create_workflow(client, owner, parent_of(child), "parent")
        r = await execute(client, owner, parent)
        assert (await wait_for_run(client, owner, parent, r.json()["run_id"]))["status"] == (
            "completed"
        )
        # The child's input is renamed: the parent's edge to "topic" no longer fits, and
        # execute says so (the parent's checked graph is not kept from before).
        renamed = g(
            [n("in", "TextInput", key="subject"), n("t", "TextTemplate", template="{{ text }}")],
            [e("in", "t")],
        )
        assert (await _save(client, owner, renamed, wf=child)).status_code == 200
        r = await execute(client, owner, parent)
        problem = assert_problem(r, 400, "invalid_graph")
        assert any(
            err["pointer"] == "/graph_json/edges/0/targetHandle" for err in problem["errors"]
        )
        # Deleting the child: the same, at the node's param.
        assert (
            await client.delete(f"/api/v1/workflows/{child}", headers=owner.headers)
        ).status_code == 204
        r = await execute(client, owner, parent)
        problem = assert_problem(r, 400, "invalid_graph")
        assert problem["errors"][0]["pointer"] == "/graph_json/nodes/1/data/workflow_id"

    async def test_the_parent_warns_once_its_child_is_deleted(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        child = await create_workflow(client, owner, CHILD, "child")
        parent = await create_workflow(client, owner, parent_of(child), "parent")
        url = f"/api/v1/workflows/{parent}"
        r = await client.get(url, headers=owner.headers)
        assert r.status_code == 200 and r.json()["warnings"] == []
        assert (
            await client.delete(f"/api/v1/workflows/{child}", headers=owner.headers)
        ).status_code == 204
        # What execute refuses, the workflow shows: the same pointer and message.
        r = await client.get(url, headers=owner.headers)
        assert r.status_code == 200, r.text
        refused = assert_problem(await execute(client, owner, parent), 400, "invalid_graph")
        expected = {(p["pointer"], p["message"]) for p in refused["errors"]}
        assert {(w["pointer"], w["message"]) for w in r.json()["warnings"]} == expected
        assert (
            "/graph_json/nodes/1/data/workflow_id",
            f"no workflow {child!r} in this account",
        ) in expected


class TestNestingAndResume:
    async def test_nested_sub_workflows_run_and_price_through(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        inner = await create_workflow(client, owner, CHILD, "inner")
        # middle: its TextInput "topic" feeds a Workflow node running inner.
        middle_graph = g(
            [n("in", "TextInput", key="topic"), n("sub", "Workflow", workflow_id=inner)],
            [e("in", "sub", "topic")],
        )
        middle = await create_workflow(client, owner, middle_graph, "middle")
        outer = await create_workflow(client, owner, parent_of(middle), "outer")
        r = await execute(client, owner, outer)
        assert r.status_code == 202, r.text
        assert r.json()["estimated_credits"] == 2  # inner's template, outer's own
        run = await wait_for_run(client, owner, outer, r.json()["run_id"])
        assert run["status"] == "completed", run
        assert await _text(client, owner, _nodes(run)["out"]["artifact_id"]) == "[About cats]"
        middle_run = await _get(client, owner, middle, _nodes(run)["sub"]["child_run_id"])
        inner_run_id = _nodes(middle_run)["sub"]["child_run_id"]
        inner_run = await _get(client, owner, inner, inner_run_id)
        assert inner_run["parent_run_id"] == middle_run["id"]
        assert inner_run["input"] == {"topic": "cats"}

    async def test_a_node_started_again_finds_its_child_instead_of_starting_another(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        """What a resumed driver or a queue job given back does: the node's execution looks
        its child up first (one child per parent node, a unique index)."""
        child, parent, run_id, child_run_id = await _child_started(client, owner, 1)
        env = app.state.ctx.dispatcher.env
        graph = env.children.acceptor.graphs
        workflow = await env.db.read(lambda c: read_workflow(c, owner.id, parent, graph))
        task = NodeTask(
            run_id=run_id,
            account_id=owner.id,
            plan="free",
            node=workflow.graph.nodes["sub"],
            inputs={"topic": None},
            run_input=None,
            use_cache=True,
        )
        outcome = await env.children.run(task)
        assert outcome.status == "completed", outcome
        run = await wait_for_run(client, owner, parent, run_id)
        assert run["status"] == "completed"
        assert outcome.artifact is not None
        assert outcome.artifact.id == _nodes(run)["sub"]["artifact_id"]
        r = await client.get(_url(child), headers=owner.headers)
        assert [item["id"] for item in r.json()] == [child_run_id]


# A run's whole tree of runs (engine/work.py): ForEach -> Workflow -> ForEach, every node
# free. Each of the root's items starts a child whose ForEach splits its text into lines.
LINES = g(
    [
        n("in", "TextInput", key="topic"),
        n("each", "ForEach"),
        n("t", "Delay", seconds=0),
        n("all", "Collect"),
    ],
    [e("in", "each"), e("each", "t"), e("t", "all")],
)


def fan_out(child_id: str, concurrency: int = 1) -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput"),
            n("each", "ForEach", split="json", concurrency=concurrency),
            n("sub", "Workflow", workflow_id=child_id),
            n("all", "Collect"),
        ],
        [e("in", "each"), e("each", "sub", "topic"), e("sub", "all")],
    )


async def _tree_work(client: httpx.AsyncClient, user: User, wf: str, run_id: str) -> int:
    """Node runs and runs of the run and its children, as a user counts them."""
    run = await _get(client, user, wf, run_id)
    total = 1 + len(run["node_runs"])
    for nr in run["node_runs"]:
        if nr.get("child_run_id"):
            child = await wait_for_run(client, user, nr["child_workflow_id"], nr["child_run_id"])
            total += 1 + len(child["node_runs"])
    return total


class TestWorkBound:
    """Free nested batches are bounded as a whole (``run_max_work``), not level by level."""

    LIMIT = 60

    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {
            "rate_limit_api_key": 100_000,
            "rate_limit_jwt": 100_000,
            "run_max_work": self.LIMIT,
        }

    async def test_a_run_known_too_large_is_refused_at_execute(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, LINES, "lines")
        text = "\n".join(f"line {i}" for i in range(40))  # 2 x 40 item runs + 4
        r = await execute(client, owner, wf, {"input": {"topic": text}})
        problem = assert_problem(r, 400, "invalid_request")
        assert "too large" in problem["detail"] and str(self.LIMIT) in problem["detail"]
        r = await client.get(_url(wf), headers=owner.headers)
        assert r.json() == []
        r = await execute(client, owner, wf, {"input": {"topic": "a\nb"}})
        assert r.status_code == 202, r.text

    async def test_nested_free_batches_stop_at_the_bound(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        child = await create_workflow(client, owner, LINES, "lines")
        parent = await create_workflow(client, owner, fan_out(child), "fan-out")
        items = ["\n".join(f"{k}.{i}" for i in range(5)) for k in range(10)]
        # Known at execute: the root's 3 nodes, 10 x (item + Workflow), 10 child runs = 33.
        # Each child adds 1 + 4 when started and 5 x 2 when its ForEach completes: 183 in
        # all without a bound.
        r = await execute(client, owner, parent, {"input": {"text": json.dumps(items)}})
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, parent, r.json()["run_id"], timeout=60)
        assert await _tree_work(client, owner, parent, run["id"]) <= self.LIMIT
        errors = [nr["error"] for nr in run["node_runs"] if nr["status"] == "failed"]
        assert errors, run
        assert any(
            err["code"] == "run_too_large" or "run_too_large" in err["message"] for err in errors
        ), errors
        assert run["credits_used"] == 0


class TestCyclesSavedAtOnce:
    async def test_two_saves_at_once_cannot_close_a_cycle(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        """X -> Y and Y -> X saved at the same moment: each alone is fine, together they
        are a cycle. One of them is refused, every time."""
        for _ in range(8):
            x = await create_workflow(client, owner, CHILD, "x")
            y = await create_workflow(client, owner, CHILD, "y")
            answers = await asyncio.gather(
                _save(client, owner, parent_of(y), wf=x), _save(client, owner, parent_of(x), wf=y)
            )
            statuses = sorted(r.status_code for r in answers)
            assert statuses == [200, 400], [r.text for r in answers]
            refused = next(r for r in answers if r.status_code == 400)
            [error] = assert_problem(refused, 400, "invalid_graph")["errors"]
            assert error["pointer"] == "/graph_json/nodes/1/data/workflow_id"
            assert "cycle" in error["message"]

    async def test_a_stored_cycle_says_so_at_execute_and_on_get(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        """A cycle stored before saves were serialized (the race above) is named as such."""
        x = await create_workflow(client, owner, CHILD, "x")
        y = await create_workflow(client, owner, parent_of(x), "y")
        table = Workflow.__table__
        await app.state.ctx.db.write(
            lambda c: c.execute(
                sa.update(table).where(table.c.id == x).values(graph_json=parent_of(y))
            )
        )
        r = await execute(client, owner, x, {"input": {"text": "x"}})
        problem = assert_problem(r, 400, "invalid_graph")
        assert "cycle" in problem["detail"], problem
        assert f"{x} -> {y} -> {x}" in problem["detail"]
        assert "node catalog" not in problem["detail"]
        r = await client.get(f"/api/v1/workflows/{x}", headers=owner.headers)
        assert r.status_code == 200, r.text
        [warning] = r.json()["warnings"]
        assert warning["pointer"] == "/graph_json/nodes/1/data/workflow_id"
        assert "cycle" in warning["message"]
