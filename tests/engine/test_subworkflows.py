"""Sub-workflows at the engine (engine/subworkflows.py), on SQLite (a driver) and PostgreSQL
(queue workers): a Workflow node's child is a real run linked both ways, each run charged
what it ran once, a child's failure fails the node and its parent, and workflows nested
deeper than MAX_DEPTH are refused when the run is accepted."""

from __future__ import annotations

from typing import Any

import pytest

from nodeloom.engine.subworkflows import MAX_DEPTH
from nodeloom.errors import InvalidGraph
from tests.engine.accepting import Engine, assert_balanced, engine
from tests.runs_helpers import e, g, n

__all__ = ["engine"]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# The child: its TextInput "topic" is the Workflow node's input; its template (1 credit)
# the node's output.
CHILD = g(
    [
        n("in", "TextInput", key="topic", text="nothing"),
        n("t", "TextTemplate", template="<{{ text }}>"),
    ],
    [e("in", "t")],
)
FAILING_CHILD = g(
    [n("in", "TextInput", key="topic"), n("boom", "TextTemplate", template="{{ 1 / 0 }}")],
    [e("in", "boom")],
)


def parent_of(child_id: str) -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput", text="cats"),
            n("sub", "Workflow", workflow_id=child_id),
            n("out", "TextTemplate", template="[{{ text }}]"),
        ],
        [e("in", "sub", "topic"), e("sub", "out")],
    )


def middle_of(child_id: str) -> dict[str, Any]:
    """A workflow whose one output is a Workflow node running ``child_id``."""
    return g(
        [n("in", "TextInput", key="topic"), n("sub", "Workflow", workflow_id=child_id)],
        [e("in", "sub", "topic")],
    )


def charged(ledger: dict[tuple[str, str], int]) -> set[str]:
    return {node for (node, kind) in ledger if kind == "charge"}


class TestChildRuns:
    async def test_the_child_is_a_linked_run_and_each_run_charges_what_it_ran(
        self, engine: Engine
    ) -> None:
        child = await engine.workflow(CHILD, "child")
        parent = await engine.workflow(parent_of(child), "parent")
        run_id = await engine.accept(parent)
        run = await engine.wait(run_id)
        assert run.status == "completed", run.error
        nodes = await engine.nodes(run_id)
        child_run_id = nodes["sub"].child_run_id
        assert child_run_id is not None
        child_run = await engine.run(child_run_id)
        assert child_run.status == "completed" and child_run.workflow_id == child
        assert (child_run.parent_run_id, child_run.parent_node_id) == (run_id, "sub")
        assert child_run.trigger == "workflow" and child_run.input == {"topic": "cats"}
        # The node's output is the child's artifact, shared, and costs the parent nothing.
        assert nodes["sub"].artifact_id == (await engine.nodes(child_run_id))["t"].artifact_id
        assert nodes["sub"].credits_used == 0
        parent_ledger, child_ledger = await engine.ledger(run_id), await engine.ledger(child_run_id)
        assert run.estimated_credits == 2  # its own template and the child's
        assert charged(parent_ledger) == {"out"} and charged(child_ledger) == {"t"}
        assert assert_balanced(parent_ledger) == run.credits_used == 1
        assert assert_balanced(child_ledger) == child_run.credits_used == 1
        assert await engine.balance() == 1000 - 2

    async def test_a_failing_child_fails_the_node_and_the_parent(self, engine: Engine) -> None:
        child = await engine.workflow(FAILING_CHILD, "child")
        parent = await engine.workflow(parent_of(child), "parent")
        run_id = await engine.accept(parent)
        run = await engine.wait(run_id)
        assert run.status == "failed"
        assert (run.error["node_id"], run.error["code"]) == ("sub", "child_failed")
        nodes = await engine.nodes(run_id)
        assert nodes["sub"].status == "failed" and nodes["out"].status == "skipped"
        child_run = await engine.run(nodes["sub"].child_run_id)
        assert child_run.status == "failed" and child_run.error["node_id"] == "boom"
        assert child_run.error["message"] in run.error["message"]
        assert "(node boom)" in run.error["message"]
        assert assert_balanced(await engine.ledger(run_id)) == 0
        assert assert_balanced(await engine.ledger(child_run.id)) == 0
        assert await engine.balance() == 1000

    async def test_a_child_cancelled_on_its_own_fails_the_parent_node(self, engine: Engine) -> None:
        slow = g([n("in", "TextInput", key="topic"), n("d", "Delay", seconds=30)], [e("in", "d")])
        child = await engine.workflow(slow, "child")
        parent = await engine.workflow(parent_of(child), "parent")
        run_id = await engine.accept(parent)
        run = await engine.until(run_id, lambda _, nodes: nodes["sub"].child_run_id is not None)
        child_run_id = (await engine.nodes(run_id))["sub"].child_run_id
        await engine.until(child_run_id, lambda _, nodes: nodes["d"].status == "running")
        await engine.cancel(child_run_id)
        run = await engine.wait(run_id)
        assert run.status == "failed"
        assert (run.error["node_id"], run.error["code"]) == ("sub", "child_cancelled")
        assert (await engine.run(child_run_id)).status == "cancelled"


class TestDepth:
    async def test_nesting_deeper_than_the_limit_is_refused_at_acceptance(
        self, engine: Engine
    ) -> None:
        # chain[0] runs CHILD; chain[k] runs chain[k - 1]: a run of chain[k] is a tree of
        # k + 2 workflows, the run's own counted.
        chain = [await engine.workflow(middle_of(await engine.workflow(CHILD, "leaf")), "w0")]
        for k in range(1, MAX_DEPTH):
            chain.append(await engine.workflow(middle_of(chain[-1]), f"w{k}"))
        deepest = await engine.accept(chain[MAX_DEPTH - 2], {"topic": "x"})
        run = await engine.wait(deepest, timeout=60)
        assert run.status == "completed", run.error
        with pytest.raises(InvalidGraph) as refused:
            await engine.accept(chain[MAX_DEPTH - 1], {"topic": "x"})
        [problem] = refused.value.errors
        assert problem.pointer == "/graph_json/nodes/1/data/workflow_id"
        assert problem.message.endswith(f"workflows are nested at most {MAX_DEPTH} deep")
