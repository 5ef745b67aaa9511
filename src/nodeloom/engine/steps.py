"""The steps of a run executed node by node by queue workers (dispatch/queue.py), each one
write transaction. No process owns the run: every step locks the run's row first
(``SELECT ... FOR UPDATE``; SQLite serializes writers anyway), loads the run's state, changes
it with the same rules as the in-process driver (``RunState``), and commits.

The lock is what keeps parallel branches correct: two workers finishing the two inputs of a
join at the same moment run their steps one after the other, so the second sees the first's
node completed and queues the join. Every state change is still a conditional UPDATE naming
its allowed from-states (transitions.py); a step whose premise no longer holds — a node that
is not queued any more, a claim that is not ours — changes nothing.

A node's claim is ``claimed_by``: ``job:<queue job id>``. The queue runs one job per node at a
time (its lock), and a job whose worker stopped sending heartbeats is found by the
reconciler, which gives the node back (``requeue``) or fails it once it was started
``node_max_attempts`` times.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Account, Artifact, NodeRun, Run, RunEvent, utcnow
from nodeloom.engine.executor import NodeTask
from nodeloom.engine.graph import Graph, validate_graph
from nodeloom.engine.run_state import Outcome, RunState, artifact_info, crashed
from nodeloom.engine.states import NodeStatus, RunStatus
from nodeloom.engine.transitions import apply
from nodeloom.events.model import Event, EventType
from nodeloom.nodes.registry import Registry
from nodeloom.settings import Settings

_RUNS = cast(sa.Table, Run.__table__)
_NODES = cast(sa.Table, NodeRun.__table__)
_ARTIFACTS = cast(sa.Table, Artifact.__table__)
_EVENTS = cast(sa.Table, RunEvent.__table__)
_ACCOUNTS = cast(sa.Table, Account.__table__)
_IDS: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)

_LOCK_RUN = (
    sa.select(
        _RUNS.c.id,
        _RUNS.c.account_id,
        _RUNS.c.workflow_id,
        _RUNS.c.status,
        _RUNS.c.cancel_requested,
        _RUNS.c.use_cache,
        _RUNS.c.estimated_credits,
        _RUNS.c.created_at,
        _RUNS.c.input,
        _ACCOUNTS.c.plan,
    )
    .join(_ACCOUNTS, _ACCOUNTS.c.id == _RUNS.c.account_id)
    .where(_RUNS.c.id == sa.bindparam("run"))
    .with_for_update(of=_RUNS)
)
_SET_CANCEL = (
    sa.update(_RUNS).where(_RUNS.c.id == sa.bindparam("run")).values(cancel_requested=True)
)
_GRAPH = sa.select(_RUNS.c.graph_json).where(_RUNS.c.id == sa.bindparam("run"))
_NODE_ROWS = sa.select(
    _NODES.c.node_id,
    _NODES.c.status,
    _NODES.c.credits_used,
    _NODES.c.attempts,
    _NODES.c.claimed_by,
    _NODES.c.artifact_id,
    _NODES.c.error,
).where(_NODES.c.run_id == sa.bindparam("run"))
_ARTIFACT_ROWS = sa.select(_ARTIFACTS).where(_ARTIFACTS.c.id.in_(_IDS))
_LAST_SEQ = sa.select(sa.func.max(_EVENTS.c.seq)).where(_EVENTS.c.run_id == sa.bindparam("run"))


class Unrunnable(Exception):
    """The run's stored graph does not validate against this server's node catalog."""


class RunGraphs:
    """Checked graphs by run id: a run's graph never changes, so each process validates it
    once (the catalog is fixed for the life of the process)."""

    def __init__(self, registry: Registry, settings: Settings, size: int = 2048) -> None:
        self.registry = registry
        self.settings = settings
        self.size = size
        self._items: OrderedDict[str, Graph | None] = OrderedDict()

    def get(self, conn: Connection, run_id: str) -> Graph | None:
        if run_id in self._items:
            self._items.move_to_end(run_id)
            return self._items[run_id]
        graph_json = conn.execute(_GRAPH, {"run": run_id}).scalar()
        checked = validate_graph(graph_json, self.registry, self.settings)
        graph = None if isinstance(checked, list) else checked
        self._items[run_id] = graph
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return graph


@dataclass
class Loaded:
    state: RunState
    cancel_requested: bool
    next_seq: int


@dataclass
class StepResult:
    run_id: str | None = None
    events: list[Event] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)  # jobs to defer
    abort: list[str] = field(default_factory=list)  # claims of nodes to stop now
    task: NodeTask | None = None  # the node claimed (claim steps)


def load(conn: Connection, run_id: str, graphs: RunGraphs) -> Loaded | None:
    """The running run, locked for this transaction, or None (finished, gone, or with a
    graph this server cannot run — see ``fail_unrunnable``)."""
    run = conn.execute(_LOCK_RUN, {"run": run_id}).first()
    if run is None or run.status != RunStatus.RUNNING:
        return None
    graph = graphs.get(conn, run_id)
    if graph is None:
        raise Unrunnable(run_id)
    state = RunState(
        run_id=run.id,
        account_id=run.account_id,
        workflow_id=run.workflow_id,
        graph=graph,
        run_input=run.input,
        use_cache=run.use_cache,
        estimate=run.estimated_credits,
        created_at=run.created_at,
        plan=run.plan,
        status={},
    )
    artifact_of: dict[str, str] = {}
    for row in conn.execute(_NODE_ROWS, {"run": run_id}):
        state.status[row.node_id] = NodeStatus(row.status)
        state.credits[row.node_id] = row.credits_used
        state.attempts[row.node_id] = row.attempts
        state.claims[row.node_id] = row.claimed_by
        if row.artifact_id:
            artifact_of[row.node_id] = row.artifact_id
        if row.status == NodeStatus.FAILED and state.first_error is None:
            state.first_error = {**(row.error or {}), "node_id": row.node_id}
    if artifact_of:
        by_id = {
            a.id: artifact_info(a)
            for a in conn.execute(_ARTIFACT_ROWS, {"ids": list(set(artifact_of.values()))})
        }
        for node_id, artifact_id in artifact_of.items():
            if artifact_id in by_id:
                state.artifacts[node_id] = by_id[artifact_id]
    last = conn.execute(_LAST_SEQ, {"run": run_id}).scalar() or 0
    return Loaded(state, bool(run.cancel_requested), int(last) + 1)


def guarded(step: Callable[..., StepResult]) -> Callable[..., StepResult]:
    """A step on a run whose graph this server cannot run fails the run instead."""

    def run(conn: Connection, run_id: str, *args: Any) -> StepResult:
        try:
            return step(conn, run_id, *args)
        except Unrunnable:
            return StepResult(events=fail_unrunnable(conn, run_id))

    return run


def _commit(conn: Connection, loaded: Loaded, batch: Any, result: StepResult) -> StepResult:
    result.run_id = loaded.state.run_id
    result.events = apply(conn, batch, loaded.next_seq)
    return result


def _cancel_now(loaded: Loaded, batch: Any, now: datetime, except_node: str | None) -> list[str]:
    """A cancel was asked: cancel what does not run; end the run if nothing runs any more.
    The claims of nodes still running elsewhere, to stop them."""
    state = loaded.state
    running = [n for n in state.with_status(NodeStatus.RUNNING) if n != except_node]
    state.cancel(batch, now, [n for n in state.unfinished() if n not in running])
    if not running:
        state.finish_cancelled(batch, now)
    return [c for n in running if (c := state.claims.get(n))]


@guarded
def claim(
    conn: Connection, run_id: str, node_id: str, claimed_by: str, graphs: RunGraphs
) -> StepResult:
    """A worker takes a queued node: it is ``running``, claimed by ``claimed_by``."""
    loaded = load(conn, run_id, graphs)
    if loaded is None or loaded.state.status.get(node_id) != NodeStatus.QUEUED:
        return StepResult()
    state, now = loaded.state, utcnow()
    batch = state.batch()
    if loaded.cancel_requested:
        result = StepResult(abort=_cancel_now(loaded, batch, now, None))
        return _commit(conn, loaded, batch, result)
    state.start(batch, node_id, now, claimed_by)
    task = NodeTask.of(state, node_id)
    return _commit(conn, loaded, batch, StepResult(task=task))


@guarded
def finish(
    conn: Connection,
    run_id: str,
    node_id: str,
    claimed_by: str,
    outcome: Outcome | None,
    graphs: RunGraphs,
) -> StepResult:
    """The node ran (``outcome``) or was stopped before it ended (None: cancelled, or its
    worker shutting down). Queue what became runnable; end the run when all ended."""
    loaded = load(conn, run_id, graphs)
    if loaded is None:
        return StepResult()
    state, now = loaded.state, utcnow()
    if state.status.get(node_id) != NodeStatus.RUNNING or state.claims.get(node_id) != claimed_by:
        return StepResult()  # not ours any more (given back as stalled): the result is dropped
    batch = state.batch()
    if outcome is not None:
        state.record(batch, outcome)
    elif loaded.cancel_requested:
        state.cancel(batch, now, [node_id])
    else:
        state.queue(batch, [node_id], now)  # stopped by a shutdown: it runs again elsewhere
        return _commit(conn, loaded, batch, StepResult(queued=[node_id]))
    if loaded.cancel_requested:
        return _commit(conn, loaded, batch, StepResult(abort=_cancel_now(loaded, batch, now, None)))
    return _schedule(conn, loaded, batch, now)


def _schedule(conn: Connection, loaded: Loaded, batch: Any, now: datetime) -> StepResult:
    state = loaded.state
    ready = state.runnable()
    state.queue(batch, ready, now)
    if state.all_finished:
        state.finish(batch, now)
    return _commit(conn, loaded, batch, StepResult(queued=ready))


@guarded
def requeue(
    conn: Connection,
    run_id: str,
    node_id: str,
    claimed_by: str,
    max_attempts: int,
    graphs: RunGraphs,
) -> StepResult:
    """The worker holding the node is gone: queue the node again, or fail it as
    ``node_crashed`` once it was started ``max_attempts`` times."""
    loaded = load(conn, run_id, graphs)
    if loaded is None:
        return StepResult()
    state, now = loaded.state, utcnow()
    if state.status.get(node_id) != NodeStatus.RUNNING or state.claims.get(node_id) != claimed_by:
        return StepResult()
    batch = state.batch()
    if loaded.cancel_requested:
        state.cancel(batch, now, [node_id])
        return _commit(conn, loaded, batch, StepResult(abort=_cancel_now(loaded, batch, now, None)))
    attempts = state.attempts.get(node_id, 0)
    if attempts < max_attempts:
        state.queue(batch, [node_id], now)
        return _commit(conn, loaded, batch, StepResult(queued=[node_id]))
    state.record(batch, crashed(node_id, attempts, now))
    return _schedule(conn, loaded, batch, now)


@guarded
def request_cancel(conn: Connection, run_id: str, graphs: RunGraphs) -> StepResult:
    """Cancel a run: what does not run is cancelled now, and the run ends at once when
    nothing runs; the claims of running nodes are returned, for their jobs to be aborted
    (their workers end the run when they stop)."""
    conn.execute(_SET_CANCEL, {"run": run_id})
    loaded = load(conn, run_id, graphs)
    if loaded is None:
        return StepResult()
    batch = loaded.state.batch()
    return _commit(
        conn, loaded, batch, StepResult(abort=_cancel_now(loaded, batch, utcnow(), None))
    )


def progress(conn: Connection, run_id: str, node_id: str, fraction: float) -> list[Event]:
    run = conn.execute(_LOCK_RUN, {"run": run_id}).first()
    if run is None or run.status != RunStatus.RUNNING:
        return []
    from nodeloom.engine.transitions import Batch

    batch = Batch(run_id, run.workflow_id, run.account_id)
    batch.event(EventType.NODE_PROGRESS, utcnow(), node_id, progress=round(fraction, 4))
    last = conn.execute(_LAST_SEQ, {"run": run_id}).scalar() or 0
    return apply(conn, batch, int(last) + 1)


def fail_unrunnable(conn: Connection, run_id: str) -> list[Event]:
    """A run whose stored graph this server's catalog no longer accepts: every unfinished
    node is cancelled and the run fails with ``invalid_graph``."""
    run = conn.execute(_LOCK_RUN, {"run": run_id}).first()
    if run is None or run.status != RunStatus.RUNNING:
        return []
    from nodeloom.engine.graph import Graph

    state = RunState(
        run_id=run.id,
        account_id=run.account_id,
        workflow_id=run.workflow_id,
        graph=Graph(nodes={}, inputs={}, downstream={}, order=[]),
        run_input=run.input,
        use_cache=run.use_cache,
        estimate=run.estimated_credits,
        created_at=run.created_at,
        plan=run.plan,
        status={},
    )
    unfinished = [
        row.node_id
        for row in conn.execute(_NODE_ROWS, {"run": run_id})
        if row.status in (NodeStatus.PENDING, NodeStatus.QUEUED, NodeStatus.RUNNING)
    ]
    now = utcnow()
    batch = state.batch()
    batch.cancel_nodes(unfinished, now)
    message = "the run's graph no longer validates against this server's node catalog"
    state.finish(batch, now, {"code": "invalid_graph", "message": message, "node_id": None})
    last = conn.execute(_LAST_SEQ, {"run": run_id}).scalar() or 0
    return apply(conn, batch, int(last) + 1)


@guarded
def finish_empty(conn: Connection, run_id: str, graphs: RunGraphs) -> StepResult:
    """A run without nodes completes as soon as it is accepted."""
    loaded = load(conn, run_id, graphs)
    if loaded is None:
        return StepResult()
    return _schedule(conn, loaded, loaded.state.batch(), utcnow())
