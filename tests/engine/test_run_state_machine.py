"""Property tests of a run's state (``RunState``) and the stepper's rules, both executors'
moves interleaved at random on random DAGs: nodes claimed by queue jobs or started by a
driver, completing (charged, or cached for free), failing, interrupted (queued again or
crashed), stopped, a cancel asked at any moment with nodes running here or elsewhere.

Each rule is one step, as an executor takes it: a batch recorded on the state, then
"committed" — its events numbered on from the state's seq (``transitions.numbered``, what
``stepper.write`` does in the database). Whatever the interleaving:
- every node moves only along ``NODE_FROM``, in memory and in what the batch would write
  (the batch replayed on the statuses before the step gives the statuses after it);
- a failed node's descendants are all skipped (or were cancelled);
- the run ends exactly once, in the step where its last node ends, and only then; it ends
  cancelled when a cancel was asked, else failed when a node failed, else completed;
- the run is charged the credits of its completed, non-cached nodes — never more than its
  estimate — and releases the rest of the hold;
- event seqs are 1, 2, 3, ... with no gap and no repeat.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from nodeloom.engine import stepper
from nodeloom.engine.graph_checks import validate_graph
from nodeloom.engine.new_run import new_run
from nodeloom.engine.run_request import RunRequest, WorkflowVersion
from nodeloom.engine.run_state import ArtifactInfo, Outcome, RunState, failed
from nodeloom.engine.transitions import Batch, numbered
from nodeloom.events.model import Event, EventType
from nodeloom.nodes.registry import build_registry
from nodeloom.settings import Settings
from nodeloom.states import NODE_FROM, NodeStatus, RunStatus, StaleTransition
from tests.runs_helpers import e, g, n

REGISTRY = build_registry()
SETTINGS = Settings(secret_key="state-machine-" + "x" * 40)
NOW = datetime(2026, 11, 25, tzinfo=UTC)
ENDS = {EventType.RUN_COMPLETED, EventType.RUN_FAILED, EventType.RUN_CANCELLED}


@st.composite
def dags(draw: st.DrawFn) -> dict[str, Any]:
    """1-8 nodes, each fed by up to three earlier ones: text inputs (free) at the roots,
    templates (1 credit) after one node, joins (free) after several."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 8))):
        sources = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        if not sources:
            nodes.append(n(f"n{i}", "TextInput", text=f"t{i}"))
        elif len(sources) == 1:
            nodes.append(n(f"n{i}", "TextTemplate", template="{{ text }}!"))
            edges.append(e(f"n{sources[0]}", f"n{i}"))
        else:
            nodes.append(n(f"n{i}", "TextJoin"))
            edges += [e(f"n{s}", f"n{i}", "texts") for s in sources]
    return g(nodes, edges)


def replay(before: dict[str, NodeStatus], batch: Batch) -> dict[str, NodeStatus]:
    """The statuses a batch leaves, applied as the database applies it (transitions.py:
    queued, started, ended, then bulk), every move checked against NODE_FROM."""
    after = dict(before)

    def move(node_id: str, to: NodeStatus) -> None:
        assert after[node_id] in NODE_FROM[to], f"{node_id}: {after[node_id]} -> {to}"
        after[node_id] = to

    for node_id, _ in batch.queued:
        move(node_id, NodeStatus.QUEUED)
    for node_id, _ in batch.started:
        move(node_id, NodeStatus.RUNNING)
    for end in batch.ended:
        move(end.node_id, end.status)
    for status, node_ids, _, _ in batch.bulk:
        for node_id in node_ids:
            move(node_id, status)
    return after


class RunMachine(RuleBasedStateMachine):
    state: RunState

    def __init__(self) -> None:
        super().__init__()
        self.log: list[Event] = []
        self.charged: dict[str, int] = {}
        self.run_ends: list[tuple[Any, ...]] = []
        self.jobs = 0

    # -- steps -----------------------------------------------------------------------------

    @initialize(graph_json=dags(), queue_workers=st.booleans())
    def accept(self, graph_json: dict[str, Any], queue_workers: bool) -> None:
        graph = validate_graph(graph_json, REGISTRY, SETTINGS)
        assert not isinstance(graph, list), graph
        driver = None if queue_workers else "this-process"
        request = RunRequest("account", "wf", None, True, "business", driver=driver)
        self.state, batch = new_run(request, WorkflowVersion("wf", NOW, graph))
        assert batch.created is not None
        roots = batch.created.queued  # the rows are inserted with these queued
        self.before = {
            n: NodeStatus.QUEUED if n in roots else NodeStatus.PENDING for n in graph.nodes
        }
        self.commit(batch)

    def begin(self) -> Batch:
        self.before = dict(self.state.status)
        return self.state.batch()

    def commit(self, batch: Batch) -> None:
        assert replay(self.before, batch) == dict(self.state.status)
        if batch.run_end is not None:
            self.run_ends.append(batch.run_end)
        events = numbered(batch, self.state.seq + 1)
        stepper.committed(self.state, events)
        self.log += events

    @property
    def running(self) -> bool:
        return self.state.run_status == RunStatus.RUNNING

    def in_status(self, *statuses: NodeStatus) -> list[str]:
        return self.state.with_status(*statuses)

    def then(self, batch: Batch, room: int) -> None:
        """After a node ended or stopped: a cancel asked goes on (nodes still running are
        elsewhere), else the run advances — as both executors do."""
        if self.state.cancel_requested:
            stepper.cancel(self.state, batch, NOW, self.in_status(NodeStatus.RUNNING))
        else:
            self.advance_in(batch, room)

    def advance_in(self, batch: Batch, room: int) -> None:
        owner = "this-process" if room else None
        stepper.advance(self.state, batch, NOW, owner, room)

    @precondition(lambda self: self.running and not self.state.cancel_requested)
    @rule(room=st.integers(0, 3))
    def advance(self, room: int) -> None:
        """A driver starting what it has room for (room > 0), or a queue step (0)."""
        batch = self.begin()
        self.advance_in(batch, room)
        self.commit(batch)

    @precondition(lambda self: self.running and self.in_status(NodeStatus.QUEUED))
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        """A queue job claims a queued node (or finds the run being cancelled)."""
        node_id = data.draw(st.sampled_from(self.in_status(NodeStatus.QUEUED)))
        batch = self.begin()
        if self.state.cancel_requested:
            stepper.cancel(self.state, batch, NOW, self.in_status(NodeStatus.RUNNING))
        else:
            self.jobs += 1
            self.state.start(batch, node_id, NOW, f"job:{self.jobs}")
        self.commit(batch)

    @precondition(lambda self: self.running and self.in_status(NodeStatus.RUNNING))
    @rule(data=st.data(), cached=st.booleans(), room=st.integers(0, 3))
    def complete(self, data: st.DataObject, cached: bool, room: int) -> None:
        node_id = data.draw(st.sampled_from(self.in_status(NodeStatus.RUNNING)))
        node = self.state.graph.nodes[node_id]
        price = node.node.estimate_credits(node.params)
        credits = 0 if cached else data.draw(st.integers(0, price))
        body = node_id.encode()
        digest = hashlib.sha256(body).hexdigest()
        artifact = ArtifactInfo(f"a-{node_id}", "text/plain", 2, digest, None, None, None, body)
        outcome = Outcome(
            node_id,
            NodeStatus.COMPLETED,
            NOW,
            artifact=artifact,
            new_artifact=not cached,
            credits=credits,
            cached=cached,
        )
        batch = self.begin()
        self.state.record(batch, outcome)
        self.charged[node_id] = credits
        self.then(batch, room)
        self.commit(batch)

    @precondition(lambda self: self.running and self.in_status(NodeStatus.RUNNING))
    @rule(data=st.data(), room=st.integers(0, 3))
    def fail(self, data: st.DataObject, room: int) -> None:
        node_id = data.draw(st.sampled_from(self.in_status(NodeStatus.RUNNING)))
        batch = self.begin()
        self.state.record(batch, failed(node_id, "node_failed", "it broke", NOW))
        self.then(batch, room)
        self.commit(batch)

    @precondition(lambda self: self.running and self.in_status(NodeStatus.RUNNING))
    @rule(data=st.data(), max_attempts=st.integers(1, 3))
    def interrupt(self, data: st.DataObject, max_attempts: int) -> None:
        """The process running the node died: given back, or crashed after enough starts."""
        node_id = data.draw(st.sampled_from(self.in_status(NodeStatus.RUNNING)))
        batch = self.begin()
        if self.state.cancel_requested:
            self.state.cancel(batch, NOW, [node_id])
            stepper.cancel(self.state, batch, NOW, self.in_status(NodeStatus.RUNNING))
        elif not stepper.interrupted(self.state, batch, [node_id], NOW, max_attempts):
            crashed = [ev for ev in batch.ended if ev.node_id == node_id]
            assert crashed[0].error is not None and crashed[0].error["code"] == "node_crashed"
            assert self.state.attempts[node_id] >= max_attempts
            self.advance_in(batch, 0)
        self.commit(batch)

    @precondition(lambda self: self.running and self.in_status(NodeStatus.RUNNING))
    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        """A node stopped before it ended: by the cancel, or by its worker shutting down."""
        node_id = data.draw(st.sampled_from(self.in_status(NodeStatus.RUNNING)))
        batch = self.begin()
        if self.state.cancel_requested:
            self.state.cancel(batch, NOW, [node_id])
            stepper.cancel(self.state, batch, NOW, self.in_status(NodeStatus.RUNNING))
        else:
            self.state.queue(batch, [node_id], NOW)
        self.commit(batch)

    @precondition(lambda self: self.running)
    @rule(here=st.booleans())
    def request_cancel(self, here: bool) -> None:
        """A cancel: a driver stops its own nodes first (nothing runs elsewhere); queue
        workers leave running nodes to their jobs."""
        batch = self.begin()
        self.state.cancel_requested = True
        elsewhere = [] if here else self.in_status(NodeStatus.RUNNING)
        claims = stepper.cancel(self.state, batch, NOW, elsewhere)
        assert claims == [self.state.claims[n] for n in elsewhere if self.state.claims[n]]
        self.commit(batch)

    @precondition(lambda self: not self.running)
    @rule()
    def end_again(self) -> None:
        """A run ends once: ending it again is refused before anything is recorded."""
        batch = self.begin()
        with pytest.raises(StaleTransition):
            self.state.finish(batch, NOW)
        assert not batch

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def seq_counts_by_one(self) -> None:
        assert [event.seq for event in self.log] == list(range(1, len(self.log) + 1))
        assert self.state.seq == len(self.log)

    @invariant()
    def failures_skip_what_follows(self) -> None:
        graph = self.state.graph
        for node_id in self.in_status(NodeStatus.FAILED):
            stack, seen = list(graph.downstream[node_id]), set()
            while stack:
                current = stack.pop()
                if current not in seen:
                    seen.add(current)
                    stack += graph.downstream[current]
            after = {self.state.status[d] for d in seen}
            assert after <= {NodeStatus.SKIPPED, NodeStatus.CANCELLED}, (node_id, after)

    @invariant()
    def the_run_ends_once_when_every_node_ended(self) -> None:
        ends = [event for event in self.log if event.type in ENDS]
        assert len(ends) == len(self.run_ends) <= 1
        assert self.state.all_finished == (not self.running)
        assert (not self.running) == bool(ends)

    @invariant()
    def how_it_ended(self) -> None:
        if self.running:
            return
        status, _, error, used, release = self.run_ends[0]
        if self.state.cancel_requested:
            assert status == RunStatus.CANCELLED and error["code"] == "cancelled"
        elif self.in_status(NodeStatus.FAILED):
            assert status == RunStatus.FAILED and error is not None
        else:
            assert status == RunStatus.COMPLETED and error is None
        completed = self.in_status(NodeStatus.COMPLETED)
        assert used == sum(self.charged[n] for n in completed) == sum(self.charged.values())
        assert used <= self.state.estimate
        assert used + release == self.state.estimate


RunMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRunStateMachine = RunMachine.TestCase
