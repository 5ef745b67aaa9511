"""The queue workers' step functions (engine/steps.py), called directly, one transaction each,
on SQLite and on PostgreSQL: a run of a few nodes driven step by step — claim, finish,
requeue, cancel, a graph that no longer validates — with no worker, queue or driver
around. After every scenario: events 1..N without gaps, the ledger balanced
(hold = charges + release), statuses as the rules say."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
import sqlalchemy as sa

from nodeloom.db.engine import Database
from nodeloom.db.models import Run, utcnow
from nodeloom.engine import stepper, steps
from nodeloom.engine.graph_checks import validate_graph
from nodeloom.engine.new_run import new_run, write_run
from nodeloom.engine.run_request import RunRequest, WorkflowVersion
from nodeloom.engine.run_state import ArtifactInfo, Outcome, RunState, failed
from nodeloom.engine.stepper import RunGraphs
from nodeloom.engine.steps import StepResult
from nodeloom.nodes.registry import Registry, build_registry
from nodeloom.settings import Settings
from nodeloom.states import NodeStatus
from nodeloom.store import accounts, workflows
from tests.runs_helpers import e, g, n

# a ─► b ─► d (joins b and c) ─► e
#  └─► c ─┘
DIAMOND = g(
    [
        n("a", "TextInput", text="go"),
        n("b", "TextTemplate", template="b {{ text }}"),
        n("c", "TextTemplate", template="c {{ text }}"),
        n("d", "TextJoin"),
        n("e", "TextTemplate", template="e {{ text }}"),
    ],
    [e("a", "b"), e("a", "c"), e("b", "d", "texts"), e("c", "d", "texts"), e("d", "e")],
)
ESTIMATE = 3  # b, c and e: one credit each


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@dataclass
class World:
    db: Database
    registry: Registry
    settings: Settings
    account_id: str
    workflow_id: str

    def __post_init__(self) -> None:
        self.graphs = RunGraphs(self.registry, self.settings)

    async def new_run(self) -> str:
        """A run of DIAMOND accepted for queue workers: its root queued."""
        graph = validate_graph(DIAMOND, self.registry, self.settings)
        assert not isinstance(graph, list)
        row = await self.db.read(lambda c: workflows.get(c, self.account_id, self.workflow_id))
        request = RunRequest(self.account_id, self.workflow_id, None, False, "business")
        state, batch = new_run(request, WorkflowVersion(row.id, row.updated_at, graph))
        answer = {"run_id": state.run_id}
        events = await self.db.write(lambda c: write_run(c, request, state, batch, answer))
        assert [ev.seq for ev in events] == [1]
        return state.run_id

    async def step(self, fn: Any, *args: Any) -> StepResult:
        result: StepResult = await self.db.write(lambda c: fn(c, *args))
        return result

    async def ran(self, run_id: str, node_id: str, claim: str, credits: int = 1) -> StepResult:
        """A job claims the node, which completes charged ``credits``."""
        await self.step(steps.claim, run_id, node_id, claim, self.graphs)
        return await self.step(
            steps.finish, run_id, node_id, claim, done(node_id, credits), self.graphs
        )

    async def break_graph(self, run_id: str) -> None:
        """The catalog changed under the run: the type of its node e is gone."""
        nodes = [{**nd, "type": "Gone"} if nd["id"] == "e" else nd for nd in DIAMOND["nodes"]]
        update = sa.text("update runs set graph_json = :g where id = :run").bindparams(
            sa.bindparam("g", type_=sa.JSON)
        )
        graph = {**DIAMOND, "nodes": nodes}
        await self.db.write(lambda c: c.execute(update, {"g": graph, "run": run_id}))

    async def assert_failed_unrunnable(self, run_id: str) -> None:
        """Failed with invalid_graph after a and b completed: b's charge stands, the rest
        of the hold came back, the nodes left were cancelled."""
        run = await self.run_row(run_id)
        assert run.status == "failed" and run.error["code"] == "invalid_graph"
        assert "/nodes/4/type" in run.error["message"]
        assert run.credits_used == 1
        assert await self.statuses(run_id) == {
            "a": "completed",
            "b": "completed",
            "c": "cancelled",
            "d": "cancelled",
            "e": "cancelled",
        }
        await self.assert_consistent(run_id)

    async def statuses(self, run_id: str) -> dict[str, str]:
        query = sa.text("select node_id, status from node_runs where run_id = :run")
        rows = await self.db.read(lambda c: c.execute(query, {"run": run_id}).all())
        return {node_id: status for node_id, status in rows}

    async def run_row(self, run_id: str) -> Any:
        runs = cast(sa.Table, Run.__table__)
        query = sa.select(runs.c.status, runs.c.error, runs.c.credits_used)
        return await self.db.read(lambda c: c.execute(query.where(runs.c.id == run_id)).one())

    async def events(self, run_id: str) -> list[tuple[int, str, str | None]]:
        query = sa.text("select seq, type, node_id from run_events where run_id = :r order by seq")
        rows = await self.db.read(lambda c: c.execute(query, {"r": run_id}).all())
        return [(seq, type_, node_id) for seq, type_, node_id in rows]

    async def assert_consistent(self, run_id: str) -> None:
        """Events 1..N; once the run ended, hold = charges + release and the run's
        credits_used is what its nodes were charged."""
        events = await self.events(run_id)
        assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
        query = sa.text("select kind, amount from credit_ledger where run_id = :run")
        ledger = await self.db.read(lambda c: c.execute(query, {"run": run_id}).all())
        amounts: dict[str, int] = {}
        for kind, amount in ledger:
            amounts[kind] = amounts.get(kind, 0) + amount
        run = await self.run_row(run_id)
        if run.status != "running":
            ends = [
                t for _, t, _ in events if t in ("run.completed", "run.failed", "run.cancelled")
            ]
            assert ends == [f"run.{run.status}"]
            charged = amounts.get("charge", 0)
            assert amounts["hold"] == charged + amounts.get("release", 0) == ESTIMATE
            assert run.credits_used == charged <= ESTIMATE


@pytest.fixture
async def world(settings: Settings) -> AsyncIterator[World]:
    db = Database(settings)
    try:
        account = await db.write(
            lambda c: accounts.create(
                c, email="steps@example.com", password_hash="-", plan="business", credits=100
            )
        )
        workflow = await db.write(
            lambda c: workflows.create(c, account_id=account.id, name="wf", graph_json=DIAMOND)
        )
        yield World(db, build_registry(), settings, account.id, workflow.id)
    finally:
        await db.dispose()


def done(node_id: str, credits: int = 1) -> Outcome:
    data = f"output of {node_id}".encode()
    digest = hashlib.sha256(data).hexdigest()
    artifact = ArtifactInfo(
        str(uuid.uuid4()), "text/plain", len(data), digest, None, None, None, data
    )
    return Outcome(node_id, NodeStatus.COMPLETED, utcnow(), artifact, True, credits)


def job(number: int) -> str:
    return f"job:{number}@test-worker"


def executed_ahead(state: RunState, outcome: Outcome, nodes: list[str]) -> steps.Ahead:
    """What a job executes ahead of its finish step (dispatch/queue.py ``_ahead``): the
    instant ``nodes`` the outcome makes runnable, from the state its claim left, with the
    inputs they would be given."""
    batch = state.batch()
    state.record(batch, outcome)
    ahead: steps.Ahead = {}
    for node_id in nodes:
        inputs = state.inputs_of(node_id)
        state.start(batch, node_id, utcnow(), "ahead")
        ahead[node_id] = (inputs, done(node_id))
        state.record(batch, ahead[node_id][1])
    return ahead


class TestSteps:
    async def test_a_run_driven_step_by_step_completes(self, world: World) -> None:
        run_id = await world.new_run()
        claimed = await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        assert claimed.task is not None and claimed.task.node.id == "a"
        # A second claim of the same node (a duplicated job) changes nothing.
        assert await world.step(steps.claim, run_id, "a", job(2), world.graphs) == StepResult()
        finished = await world.step(steps.finish, run_id, "a", job(1), done("a", 0), world.graphs)
        assert finished.queued == ["b", "c"]
        for number, node_id in enumerate(["b", "c"], start=3):
            assert (await world.step(steps.claim, run_id, node_id, job(number), world.graphs)).task
        # b ends: d still waits for c.
        assert (
            await world.step(steps.finish, run_id, "b", job(3), done("b"), world.graphs)
        ).queued == []
        assert (
            await world.step(steps.finish, run_id, "c", job(4), done("c"), world.graphs)
        ).queued == ["d"]
        await world.step(steps.claim, run_id, "d", job(5), world.graphs)
        joined = done("d", 0)
        await world.step(steps.finish, run_id, "d", job(5), joined, world.graphs)
        claimed = await world.step(steps.claim, run_id, "e", job(6), world.graphs)
        assert claimed.task is not None and claimed.task.inputs == {"text": joined.artifact}
        last = await world.step(steps.finish, run_id, "e", job(6), done("e"), world.graphs)
        assert [ev.type for ev in last.events][-1] == "run.completed"
        assert set((await world.statuses(run_id)).values()) == {"completed"}
        run = await world.run_row(run_id)
        assert run.status == "completed" and run.credits_used == 3
        await world.assert_consistent(run_id)

    async def test_a_failed_node_skips_its_descendants_and_the_run_fails(
        self, world: World
    ) -> None:
        run_id = await world.new_run()
        await world.ran(run_id, "a", job(1), 0)
        await world.step(steps.claim, run_id, "b", job(2), world.graphs)
        await world.step(steps.claim, run_id, "c", job(3), world.graphs)
        boom = failed("b", "node_failed", "no", utcnow())
        result = await world.step(steps.finish, run_id, "b", job(2), boom, world.graphs)
        assert result.queued == [] and result.events[-1].type == "node.skipped"
        # The other branch still ends; then the run ends failed with b's error.
        result = await world.step(steps.finish, run_id, "c", job(3), done("c"), world.graphs)
        assert result.events[-1].type == "run.failed"
        assert await world.statuses(run_id) == {
            "a": "completed",
            "b": "failed",
            "c": "completed",
            "d": "skipped",
            "e": "skipped",
        }
        run = await world.run_row(run_id)
        assert run.error["code"] == "node_failed" and run.error["node_id"] == "b"
        await world.assert_consistent(run_id)

    async def test_a_node_whose_worker_is_gone_runs_again_then_crashes(self, world: World) -> None:
        run_id = await world.new_run()
        await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        # A stale claim (another job) gives nothing back.
        assert await world.step(steps.requeue, run_id, "a", job(9), 2, world.graphs) == StepResult()
        again = await world.step(steps.requeue, run_id, "a", job(1), 2, world.graphs)
        assert again.queued == ["a"] and again.events == []
        assert (await world.statuses(run_id))["a"] == "queued"
        await world.step(steps.claim, run_id, "a", job(2), world.graphs)
        # The first job's late result is dropped: the node is the second job's now.
        assert await world.step(steps.finish, run_id, "a", job(1), done("a"), world.graphs) == (
            StepResult()
        )
        crashed = await world.step(steps.requeue, run_id, "a", job(2), 2, world.graphs)
        assert crashed.queued == []
        assert [ev.type for ev in crashed.events] == [
            "node.failed",
            *["node.skipped"] * 4,
            "run.failed",
        ]
        assert crashed.events[0].data["error"]["code"] == "node_crashed"
        run = await world.run_row(run_id)
        assert run.status == "failed" and run.error["code"] == "node_crashed"
        await world.assert_consistent(run_id)

    async def test_cancel_stops_running_nodes_then_ends_the_run_cancelled(
        self, world: World
    ) -> None:
        run_id = await world.new_run()
        await world.ran(run_id, "a", job(1), 0)
        await world.step(steps.claim, run_id, "b", job(2), world.graphs)  # c stays queued
        cancelled = await world.step(steps.request_cancel, run_id, world.graphs)
        assert cancelled.abort == [job(2)]  # b runs on a worker: its job is stopped
        assert await world.statuses(run_id) == {
            "a": "completed",
            "b": "running",
            "c": "cancelled",
            "d": "cancelled",
            "e": "cancelled",
        }
        assert (await world.run_row(run_id)).status == "running"
        # c's job comes late: nothing is started.
        assert (await world.step(steps.claim, run_id, "c", job(3), world.graphs)).task is None
        stopped = await world.step(steps.finish, run_id, "b", job(2), None, world.graphs)
        assert [ev.type for ev in stopped.events] == ["node.cancelled", "run.cancelled"]
        run = await world.run_row(run_id)
        assert run.status == "cancelled" and run.error["code"] == "cancelled"
        await world.assert_consistent(run_id)

    async def test_a_node_stopped_by_a_shutdown_is_queued_again(self, world: World) -> None:
        run_id = await world.new_run()
        await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        stopped = await world.step(steps.finish, run_id, "a", job(1), None, world.graphs)
        assert stopped.queued == ["a"] and stopped.events == []
        assert (await world.statuses(run_id))["a"] == "queued"

    async def test_a_run_whose_graph_no_longer_validates_fails_keeping_its_charges(
        self, world: World
    ) -> None:
        run_id = await world.new_run()
        await world.ran(run_id, "a", job(1), 0)
        await world.ran(run_id, "b", job(2))
        # A fresh cache of checked graphs, as after a restart (it is per process).
        await world.break_graph(run_id)
        fresh = RunGraphs(world.registry, world.settings)
        result = await world.step(steps.claim, run_id, "c", job(3), fresh)
        assert result.task is None
        assert [ev.type for ev in result.events] == [*["node.cancelled"] * 3, "run.failed"]
        await world.assert_failed_unrunnable(run_id)
        # Every later step on it is a no-op.
        assert await world.step(steps.claim, run_id, "c", job(4), fresh) == StepResult()

    async def test_progress_follows_the_steps_seq(self, world: World) -> None:
        run_id = await world.new_run()
        await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        events = await world.db.write(lambda c: stepper.progress(c, run_id, "a", 0.5))
        assert [(ev.seq, ev.type, ev.data) for ev in events] == [
            (3, "node.progress", {"progress": 0.5})
        ]
        await world.step(steps.finish, run_id, "a", job(1), done("a", 0), world.graphs)
        await world.assert_consistent(run_id)
        assert [t for _, t, _ in await world.events(run_id)] == [
            "run.started",
            "node.started",
            "node.progress",
            "node.completed",
        ]


class TestInstantNodesInTheFinishingJob:
    """A finish step given ``instant_room`` starts the instant nodes it made runnable under
    the finishing job's own claim; the job executes them and records them with
    ``finish_many`` (which may start more): no job per instant node."""

    async def test_instant_successors_run_under_the_job_that_made_them_runnable(
        self, world: World
    ) -> None:
        run_id = await world.new_run()
        await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        room = stepper.INSTANT_PER_STEP
        first = await world.step(
            steps.finish, run_id, "a", job(1), done("a", 0), world.graphs, room
        )
        # b and c (substituting templates) are started under job 1, nothing is queued.
        assert [t.node.id for t in first.started] == ["b", "c"] and first.queued == []
        assert (await world.statuses(run_id))["b"] == "running"
        # Another job's report for them is dropped.
        stale = {"b": done("b"), "c": done("c")}
        assert (
            await world.step(steps.finish_many, run_id, stale, job(9), world.graphs, room)
            == StepResult()
        )
        both = await world.step(steps.finish_many, run_id, stale, job(1), world.graphs, room)
        # d (TextJoin) is not instant: it gets a job of its own.
        assert both.started == [] and both.queued == ["d"]
        await world.step(steps.claim, run_id, "d", job(2), world.graphs)
        joined = await world.step(
            steps.finish, run_id, "d", job(2), done("d", 0), world.graphs, room
        )
        assert [t.node.id for t in joined.started] == ["e"]
        last = await world.step(
            steps.finish_many, run_id, {"e": done("e")}, job(2), world.graphs, room
        )
        assert last.events[-1].type == "run.completed" and last.started == []
        run = await world.run_row(run_id)
        assert run.status == "completed" and run.credits_used == 3
        await world.assert_consistent(run_id)
        # One start per node, each recorded once.
        started = [n for _, t, n in await world.events(run_id) if t == "node.started"]
        assert sorted(started) == ["a", "b", "c", "d", "e"]

    async def test_nodes_executed_ahead_are_recorded_by_the_finish_step(self, world: World) -> None:
        run_id = await world.new_run()
        claimed = await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        assert claimed.state is not None
        out_a = done("a", 0)
        ahead = executed_ahead(claimed.state, out_a, ["b", "c"])
        room = stepper.INSTANT_PER_STEP
        result = await world.step(
            steps.finish, run_id, "a", job(1), out_a, world.graphs, room, ahead
        )
        # b and c ended in a's finish step: nothing left for the job to execute.
        assert result.started == [] and result.queued == ["d"]
        assert [(ev.type, ev.node_id) for ev in result.events] == [
            ("node.completed", "a"),
            ("node.started", "b"),
            ("node.completed", "b"),
            ("node.started", "c"),
            ("node.completed", "c"),
        ]
        statuses = await world.statuses(run_id)
        assert (statuses["b"], statuses["c"], statuses["d"]) == ("completed",) * 2 + ("queued",)
        await world.ran(run_id, "d", job(2), 0)
        await world.ran(run_id, "e", job(3))
        run = await world.run_row(run_id)
        assert run.status == "completed" and run.credits_used == 3
        await world.assert_consistent(run_id)

    async def test_nodes_executed_ahead_with_other_inputs_are_started_as_usual(
        self, world: World
    ) -> None:
        run_id = await world.new_run()
        claimed = await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        assert claimed.state is not None
        # Executed from another output of a than the one the finish step records.
        ahead = executed_ahead(claimed.state, done("a", 0), ["b", "c"])
        room = stepper.INSTANT_PER_STEP
        result = await world.step(
            steps.finish, run_id, "a", job(1), done("a", 0), world.graphs, room, ahead
        )
        assert [t.node.id for t in result.started] == ["b", "c"]
        assert (await world.statuses(run_id))["b"] == "running"

    async def test_nodes_executed_ahead_of_a_cancel_are_dropped(self, world: World) -> None:
        run_id = await world.new_run()
        claimed = await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        assert claimed.state is not None
        out_a = done("a", 0)
        ahead = executed_ahead(claimed.state, out_a, ["b", "c"])
        await world.step(steps.request_cancel, run_id, world.graphs)
        room = stepper.INSTANT_PER_STEP
        result = await world.step(
            steps.finish, run_id, "a", job(1), out_a, world.graphs, room, ahead
        )
        assert result.events[-1].type == "run.cancelled"
        statuses = await world.statuses(run_id)
        assert statuses["a"] == "completed" and statuses["b"] == "cancelled"
        await world.assert_consistent(run_id)

    async def test_a_cancel_stops_the_job_once_and_ends_the_run(self, world: World) -> None:
        run_id = await world.new_run()
        await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        room = stepper.INSTANT_PER_STEP
        await world.step(steps.finish, run_id, "a", job(1), done("a", 0), world.graphs, room)
        cancelled = await world.step(steps.request_cancel, run_id, world.graphs)
        assert set(cancelled.abort) == {job(1)}
        stopped = await world.step(
            steps.finish_many, run_id, {"b": done("b"), "c": None}, job(1), world.graphs, room
        )
        assert stopped.events[-1].type == "run.cancelled" and stopped.started == []
        assert await world.statuses(run_id) == {
            "a": "completed",
            "b": "completed",
            "c": "cancelled",
            "d": "cancelled",
            "e": "cancelled",
        }
        await world.assert_consistent(run_id)

    async def test_a_shutdown_gives_back_what_the_job_had_not_finished(self, world: World) -> None:
        run_id = await world.new_run()
        await world.step(steps.claim, run_id, "a", job(1), world.graphs)
        room = stepper.INSTANT_PER_STEP
        await world.step(steps.finish, run_id, "a", job(1), done("a", 0), world.graphs, room)
        stopped = await world.step(
            steps.finish_many, run_id, {"b": done("b"), "c": None}, job(1), world.graphs, room
        )
        assert stopped.queued == ["c"] and stopped.started == []
        assert (await world.statuses(run_id))["c"] == "queued"
        await world.ran(run_id, "c", job(2))
        assert (await world.statuses(run_id))["d"] == "queued"


class TestLoad:
    async def test_load_builds_the_state_the_steps_left(self, world: World) -> None:
        run_id = await world.new_run()
        await world.ran(run_id, "a", job(1), 0)
        await world.step(steps.claim, run_id, "b", job(2), world.graphs)
        state = await world.db.read(lambda c: stepper.load(c, run_id, world.graphs))
        assert state is not None
        assert dict(state.status) == {
            "a": "completed",
            "b": "running",
            "c": "queued",
            "d": "pending",
            "e": "pending",
        }
        assert state.claims["b"] == job(2) and state.attempts == {
            "a": 1,
            "b": 1,
            "c": 0,
            "d": 0,
            "e": 0,
        }
        assert set(state.artifacts) == {"a"} and state.artifacts["a"].data == b"output of a"
        assert state.seq == len(await world.events(run_id)) == 4
        assert state.plan == "business" and not state.cancel_requested

    async def test_runs_of_one_workflow_version_share_one_checked_graph(self, world: World) -> None:
        first, second = await world.new_run(), await world.new_run()
        graphs = RunGraphs(world.registry, world.settings)
        one = await world.db.read(lambda c: stepper.load(c, first, graphs))
        two = await world.db.read(lambda c: stepper.load(c, second, graphs))
        assert one is not None and two is not None and one.graph is two.graph
        # A run whose graph is its own (a retry's: no version number) is checked on its own.
        drop = sa.text("update runs set workflow_version = null where id = :run")
        await world.db.write(lambda c: c.execute(drop, {"run": second}))
        fresh = RunGraphs(world.registry, world.settings)
        one = await world.db.read(lambda c: stepper.load(c, first, fresh))
        two = await world.db.read(lambda c: stepper.load(c, second, fresh))
        assert one is not None and two is not None and one.graph is not two.graph
