"""The instant prefix (engine/prefix.py): a run accepted for queue workers has its instant
roots, and the instant nodes they alone make runnable, executed in the acceptance, so its
first job is the first node that needs a worker. Pinned in memory (what ``execute_prefix``
leaves in the acceptance's batch, and when it declines) and on PostgreSQL (what an accepted
run's rows show: its prefix never queued, the node after it queued by the acceptance)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest

from nodeloom.engine import prefix
from nodeloom.engine.executor import NodeTask
from nodeloom.engine.graph import Graph
from nodeloom.engine.graph_checks import validate_graph
from nodeloom.engine.new_run import new_run
from nodeloom.engine.run_request import RunRequest, WorkflowVersion
from nodeloom.engine.run_state import Outcome, RunState
from nodeloom.engine.stepper import INSTANT_PER_STEP
from nodeloom.engine.transitions import Batch
from nodeloom.nodes.registry import build_registry
from nodeloom.sdk._node import NeedsSandbox
from nodeloom.settings import Settings
from nodeloom.states import NodeStatus
from tests.engine.accepting import Engine, engine
from tests.engine.test_steps import done
from tests.runs_helpers import e, g, n

__all__ = ["engine"]

REGISTRY = build_registry()
SETTINGS = Settings(secret_key="prefix-" + "x" * 40)
NOW = datetime(2026, 11, 28, tzinfo=UTC)
OWNER = "accepting-process"

# in ─► tpl ─► wait ─► after: an instant root and the instant node it feeds, then a Delay.
PLAIN = g(
    [
        n("in", "TextInput", text="go"),
        n("tpl", "TextTemplate", template="{{ text }}!"),
        n("wait", "Delay", seconds=0.05),
        n("after", "TextTemplate", template="{{ text }}?"),
    ],
    [e("in", "tpl"), e("tpl", "wait"), e("wait", "after")],
)


def checked(graph_json: dict[str, Any]) -> Graph:
    graph = validate_graph(graph_json, REGISTRY, SETTINGS)
    assert not isinstance(graph, list), graph
    return graph


def accepted(graph_json: dict[str, Any]) -> tuple[RunState, Batch]:
    """A run of the graph as accepting it for queue workers leaves it (roots queued)."""
    request = RunRequest("account", "wf", None, False, "business", driver=None)
    return new_run(request, WorkflowVersion("wf", NOW, checked(graph_json)))


async def produce(task: NodeTask) -> Outcome:
    return done(task.node.id, 0)


class TestApplies:
    def test_only_plain_runs_that_are_not_all_instant(self) -> None:
        assert prefix.applies(checked(PLAIN))
        all_instant = g([n("in", "TextInput"), n("t", "TextTemplate")], [e("in", "t")])
        assert not prefix.applies(checked(all_instant))
        batch = g(
            [n("in", "TextInput"), n("each", "ForEach"), n("w", "Delay", seconds=1)],
            [e("in", "each"), e("each", "w")],
        )
        assert not prefix.applies(checked(batch))


class TestExecutePrefix:
    async def test_the_instant_nodes_run_and_the_first_worker_node_is_queued(self) -> None:
        state, batch = accepted(PLAIN)
        assert batch.created is not None and batch.created.queued == {"in"}
        outcomes = await prefix.execute_prefix(state, batch, OWNER, produce)
        assert outcomes is not None and set(outcomes) == {"in", "tpl"}
        # The root is no longer queued for a job: it was started (claimed by the accepting
        # process) and ended in this batch, as the node it fed.
        assert batch.created.queued == frozenset()
        assert [node for node, _ in batch.started] == ["in", "tpl"]
        assert batch.claimed_by == OWNER
        assert [end.node_id for end in batch.ended] == ["in", "tpl"]
        assert [node for node, _ in batch.queued] == ["wait"]
        assert state.status["wait"] == NodeStatus.QUEUED
        assert state.status["after"] == NodeStatus.PENDING
        assert batch.run_end is None

    async def test_nothing_is_done_when_no_root_is_instant(self) -> None:
        # A template with a Jinja statement is rendered in the sandbox, never instantly.
        graph = g(
            [n("jinja", "TextTemplate", template="{% if 1 %}x{% endif %}"), n("t", "TextTemplate")],
            [e("jinja", "t")],
        )
        state, batch = accepted(graph)
        assert await prefix.execute_prefix(state, batch, OWNER, produce) == {}
        assert batch.created is not None and batch.created.queued == {"jinja"}
        assert batch.started == [] and batch.ended == [] and batch.queued == []

    async def test_a_prefix_longer_than_one_step_is_declined(self) -> None:
        count = INSTANT_PER_STEP + 1
        nodes = [n("in", "TextInput", text="go")]
        nodes += [n(f"t{i}", "TextTemplate", template="{{ text }}.") for i in range(count)]
        nodes.append(n("wait", "Delay", seconds=1))
        ids = [str(node["id"]) for node in nodes]
        graph = g(nodes, [e(a, b) for a, b in itertools.pairwise(ids)])
        state, batch = accepted(graph)
        assert await prefix.execute_prefix(state, batch, OWNER, produce) is None

    async def test_a_node_that_needs_the_sandbox_is_the_callers_to_handle(self) -> None:
        state, batch = accepted(PLAIN)

        async def sandboxed(task: NodeTask) -> Outcome:
            raise NeedsSandbox

        with pytest.raises(NeedsSandbox):
            await prefix.execute_prefix(state, batch, OWNER, sandboxed)


class TestAccepted:
    @pytest.fixture
    def backend(self) -> str:
        return "postgres"  # queue workers: the only executor the prefix is for

    async def test_the_prefix_is_never_queued_and_the_run_completes(self, engine: Engine) -> None:
        wf = await engine.workflow(PLAIN)
        run_id = await engine.accept(wf)
        run = await engine.wait(run_id)
        assert run.status == "completed", run.error
        nodes = await engine.nodes(run_id)
        claimant = engine.ctx.acceptor.claimant
        for node_id in ("in", "tpl"):  # executed by the accepting process, never a job
            assert nodes[node_id].queued_at is None, node_id
            assert nodes[node_id].claimed_by == claimant, node_id
            assert nodes[node_id].attempts == 1, node_id
        # The run's first job is the Delay's, queued by the acceptance; the instant node
        # after it is executed ahead by that same job.
        assert nodes["wait"].queued_at is not None
        assert nodes["wait"].claimed_by.startswith("job:")
        assert nodes["after"].claimed_by == nodes["wait"].claimed_by
        assert run.credits_used == 2
