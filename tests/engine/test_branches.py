"""Branches through the queue workers' steps, on SQLite and PostgreSQL: the branch an If
took is stored with its completion, so a run resumed by another process (a fresh load,
nothing in memory) skips the same nodes and feeds a Merge only what ran; an error output
carries a failure on and the run completes. Each step is one transaction, as a worker's."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from nodeloom.db.engine import Database
from nodeloom.db.models import utcnow
from nodeloom.engine import stepper, steps
from nodeloom.engine.graph_checks import validate_graph
from nodeloom.engine.new_run import new_run, write_run
from nodeloom.engine.run_request import RunRequest, WorkflowVersion
from nodeloom.engine.run_state import ArtifactInfo, Outcome, failed
from nodeloom.engine.stepper import RunGraphs
from nodeloom.nodes.registry import build_registry
from nodeloom.runtime import Runtime
from nodeloom.settings import Settings
from nodeloom.states import NodeStatus
from nodeloom.store import accounts, workflows
from tests.engine import test_driver
from tests.engine.test_driver import drive
from tests.runs_helpers import g, n

# in ─► if ─true─► yes (1) ─► join (Merge)
#        └─false─► no (1) ──┘
#  in ─► risky (1) ─error─► caught (1)
GRAPH = g(
    [
        n("in", "TextInput", text="go"),
        n("if", "If", operator="equals", value="go"),
        n("yes", "TextTemplate", template="yes {{ text }}"),
        n("no", "TextTemplate", template="no {{ text }}"),
        n("join", "Merge"),
        n("risky", "TextTemplate", template="{{ text }}!"),
        n("caught", "TextTemplate", template="caught {{ text }}"),
    ],
    [
        {"id": "1", "source": "in", "target": "if"},
        {"id": "2", "source": "if", "target": "yes", "sourceHandle": "true"},
        {"id": "3", "source": "if", "target": "no", "sourceHandle": "false"},
        {"id": "4", "source": "yes", "target": "join"},
        {"id": "5", "source": "no", "target": "join"},
        {"id": "6", "source": "in", "target": "risky"},
        {"id": "7", "source": "risky", "target": "caught", "sourceHandle": "error"},
    ],
)
# yes or no (1), risky or caught (1).
ESTIMATE = 2


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[tuple[Database, str]]:
    database = Database(settings)
    try:
        account = await database.write(
            lambda c: accounts.create(
                c, email="branches@example.com", password_hash="-", plan="business", credits=100
            )
        )
        workflow = await database.write(
            lambda c: workflows.create(c, account_id=account.id, name="wf", graph_json=GRAPH)
        )
        yield database, workflow.id
    finally:
        await database.dispose()


def output(
    node_id: str, text: str, credits: int = 0, ports: tuple[str, ...] | None = None
) -> Outcome:
    data = text.encode()
    artifact = ArtifactInfo(
        str(uuid.uuid4()),
        "text/plain",
        len(data),
        hashlib.sha256(data).hexdigest(),
        None,
        None,
        None,
        data,
    )
    return Outcome(node_id, NodeStatus.COMPLETED, utcnow(), artifact, True, credits, ports=ports)


async def statuses(database: Database, run_id: str) -> dict[str, str]:
    query = sa.text("select node_id, status from node_runs where run_id = :run")
    rows = await database.read(lambda c: c.execute(query, {"run": run_id}).all())
    return {node_id: status for node_id, status in rows}


async def one_step(database: Database, fn: Any, *args: Any) -> steps.StepResult:
    result: steps.StepResult = await database.write(lambda c: fn(c, *args))
    return result


async def test_a_branch_is_settled_the_same_after_a_resume(
    db: tuple[Database, str], settings: Settings
) -> None:
    database, workflow_id = db
    registry = build_registry()
    graph = validate_graph(GRAPH, registry, settings)
    assert not isinstance(graph, list)
    assert graph.estimate_credits() == ESTIMATE
    account_id = await database.read(
        lambda c: c.execute(sa.text("select id from accounts")).scalar_one()
    )
    row = await database.read(lambda c: workflows.get(c, account_id, workflow_id))
    request = RunRequest(account_id, workflow_id, None, False, "business")
    state, batch = new_run(request, WorkflowVersion(row.id, row.updated_at, graph))
    run_id = state.run_id
    await database.write(lambda c: write_run(c, request, state, batch, {"run_id": run_id}))

    first = RunGraphs(registry, settings)  # the worker that runs the If
    await one_step(database, steps.claim, run_id, "in", "job:1", first)
    await one_step(database, steps.finish, run_id, "in", "job:1", output("in", "go"), first)
    await one_step(database, steps.claim, run_id, "if", "job:2", first)
    taken = output("if", "go", ports=("true",))
    result = await one_step(database, steps.finish, run_id, "if", "job:2", taken, first)
    skipped = [ev for ev in result.events if ev.type == "node.skipped"]
    assert [(ev.node_id, ev.data["reason"]["code"]) for ev in skipped] == [
        ("no", "branch_not_taken")
    ]
    assert "yes" in result.queued and "join" not in result.queued

    # Another process (nothing in memory) picks the run up: the If is not run again.
    second = RunGraphs(registry, settings)
    loaded = await database.read(lambda c: stepper.load(c, run_id, second))
    assert loaded is not None and loaded.ports == {"if": ("true",)}
    await one_step(database, steps.claim, run_id, "yes", "job:3", second)
    result = await one_step(
        database, steps.finish, run_id, "yes", "job:3", output("yes", "yes go", 1), second
    )
    assert "join" in result.queued
    claimed = await one_step(database, steps.claim, run_id, "join", "job:4", second)
    assert claimed.task is not None
    fed = claimed.task.inputs["inputs"]
    assert isinstance(fed, list) and [a.data for a in fed] == [b"yes go"]
    await one_step(
        database, steps.finish, run_id, "join", "job:4", output("join", "yes go"), second
    )

    # risky fails: its error goes down its error edge, and the run goes on.
    await one_step(database, steps.claim, run_id, "risky", "job:5", second)
    boom = failed("risky", "node_failed", "it broke", utcnow())
    await one_step(database, steps.finish, run_id, "risky", "job:5", boom, second)
    third = RunGraphs(registry, settings)
    claimed = await one_step(database, steps.claim, run_id, "caught", "job:6", third)
    assert claimed.task is not None
    sent = claimed.task.inputs["text"]
    assert not isinstance(sent, list) and sent is not None and sent.data is not None
    assert json.loads(sent.data) == {
        "code": "node_failed",
        "message": "it broke",
        "node_id": "risky",
    }
    last = await one_step(
        database, steps.finish, run_id, "caught", "job:6", output("caught", "caught", 1), third
    )
    assert last.events[-1].type == "run.completed"
    assert await statuses(database, run_id) == {
        "in": "completed",
        "if": "completed",
        "yes": "completed",
        "no": "skipped",
        "join": "completed",
        "risky": "failed",
        "caught": "completed",
    }
    ledger = await database.read(
        lambda c: c.execute(
            sa.text("select kind, sum(amount) from credit_ledger where run_id = :r group by kind"),
            {"r": run_id},
        ).all()
    )
    assert dict(ledger) == {"hold": ESTIMATE, "charge": 2}  # nothing left to release
    events = await database.read(
        lambda c: (
            c.execute(
                sa.text("select seq from run_events where run_id = :r order by seq"), {"r": run_id}
            )
            .scalars()
            .all()
        )
    )
    assert list(events) == list(range(1, len(events) + 1))


runtime = test_driver.runtime  # the driver tests' fixture: a started runtime, no dispatcher


class TestDriverResume:
    """The embedded driver adopting a run whose If completed before its process died, on
    SQLite: the branch stays taken, the other stays skipped, what was running runs again."""

    @pytest.fixture
    def backend(self) -> str:
        return "sqlite"

    async def test_the_driver_goes_on_down_the_branch_taken(self, runtime: Runtime) -> None:
        database = runtime.db
        account = await database.write(
            lambda c: accounts.create(
                c, email="resume@example.com", password_hash="-", plan="business", credits=100
            )
        )
        workflow = await database.write(
            lambda c: workflows.create(c, account_id=account.id, name="wf", graph_json=GRAPH)
        )
        graph = validate_graph(GRAPH, runtime.registry, runtime.settings)
        assert not isinstance(graph, list)
        request = RunRequest(account.id, workflow.id, None, False, "business")
        state, batch = new_run(request, WorkflowVersion(workflow.id, workflow.updated_at, graph))
        run_id = state.run_id
        await database.write(lambda c: write_run(c, request, state, batch, {"run_id": run_id}))
        graphs = RunGraphs(runtime.registry, runtime.settings)
        await one_step(database, steps.claim, run_id, "in", "job:1", graphs)
        await one_step(database, steps.finish, run_id, "in", "job:1", output("in", "go"), graphs)
        await one_step(database, steps.claim, run_id, "if", "job:2", graphs)
        taken = output("if", "go", ports=("true",))
        await one_step(database, steps.finish, run_id, "if", "job:2", taken, graphs)
        await one_step(database, steps.claim, run_id, "yes", "job:3", graphs)  # then it died

        await drive(runtime, run_id)

        assert await statuses(database, run_id) == {
            "in": "completed",
            "if": "completed",
            "yes": "completed",
            "no": "skipped",
            "join": "completed",
            "risky": "completed",
            "caught": "skipped",
        }
        query = sa.text(
            "select a.data from node_runs n join artifacts a on a.id = n.artifact_id"
            " where n.run_id = :r and n.node_id = 'join'"
        )
        joined = await database.read(lambda c: c.execute(query, {"r": run_id}).scalar())
        assert bytes(joined) == b"yes go"
        run = await database.read(
            lambda c: c.execute(
                sa.text("select status, credits_used from runs where id = :r"), {"r": run_id}
            ).one()
        )
        assert tuple(run) == ("completed", 2)  # yes and risky; no and caught skipped
