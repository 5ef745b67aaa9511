"""The steps of a run executed node by node by queue workers (dispatch/queue.py), each one
write transaction. No process owns the run: every step loads the run's state with its row
locked (``stepper.load``: ``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite serializes
writers anyway, and the same steps run there), changes it with the rules the in-process
driver uses (engine/stepper.py), and commits.

The lock is what keeps parallel branches correct: two workers finishing the two inputs of a
join at the same moment run their steps one after the other, so the second sees the first's
node completed and queues the join. Every state change is still a conditional UPDATE naming
its allowed from-states (transitions.py); a step whose premise no longer holds — a node that
is not queued any more, a claim that is not ours — changes nothing.

A node's claim is ``claimed_by``: ``job:<queue job id>``. The queue runs one job per node at a
time (its lock), and a job whose worker stopped sending heartbeats is found by the
reconciler, which gives the node back (``requeue``: ``stepper.interrupted``'s rule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from nodeloom.db.models import utcnow
from nodeloom.engine import items, stepper
from nodeloom.engine.executor import InputInfos, NodeTask
from nodeloom.engine.run_state import Outcome, RunState
from nodeloom.engine.stepper import RunGraphs, Unrunnable
from nodeloom.engine.transitions import Batch
from nodeloom.events.model import Event
from nodeloom.states import NodeStatus
from nodeloom.store import runs as run_store


@dataclass
class StepResult:
    run_id: str | None = None
    events: list[Event] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)  # jobs to defer
    abort: list[str] = field(default_factory=list)  # claims of nodes to stop now
    task: NodeTask | None = None  # the node claimed (claim steps)
    # Instant nodes this step made runnable and started under the finishing job's own claim
    # (``finish`` given ``instant_room``): the same job executes them and records them with
    # another ``finish``, instead of a job (defer, fetch, claim, finish) per node.
    started: list[NodeTask] = field(default_factory=list)
    # Other runs of the account that may hold items for want of the room this step freed
    # (engine/items.py): each is given a step (``nudge``) after this one commits.
    nudge: list[str] = field(default_factory=list)
    # Items the account had room for apart from this run, as counted by this step.
    items_room: int | None = None
    # The run's state as this step left it (claim steps): the job works out from it which
    # instant nodes its node will make runnable, and executes them before its finish step.
    state: RunState | None = None


# Instant nodes a job executed ahead of its finish step, from the run's state at its claim:
# by node, the inputs they were executed with and how they ended. The finish step records
# each one still runnable with those very inputs as if it had started and executed it; any
# other is started as usual (``StepResult.started``).
Ahead = dict[str, tuple[InputInfos, Outcome]]


def guarded(step: Callable[..., StepResult]) -> Callable[..., StepResult]:
    """A step on a run whose graph this server cannot run fails the run instead."""

    def run(conn: Connection, run_id: str, *args: Any) -> StepResult:
        try:
            return step(conn, run_id, *args)
        except Unrunnable as unrunnable:
            events = stepper.fail_unrunnable(conn, run_id, unrunnable.problem)
            return StepResult(run_id=run_id, events=events)

    return run


def _load(conn: Connection, run_id: str, graphs: RunGraphs) -> RunState | None:
    """``stepper.load``, with the account's cap on items in flight (engine/items.py)."""
    state = stepper.load(conn, run_id, graphs)
    if state is not None:
        state.items_cap = graphs.settings.batch_items_in_flight_per_account
    return state


def _commit(conn: Connection, state: RunState, batch: Batch, result: StepResult) -> StepResult:
    result.run_id = state.run_id
    result.events = stepper.write(conn, state, batch)
    return result


def _cancel(conn: Connection, state: RunState, batch: Batch, now: datetime) -> StepResult:
    """A cancel was asked: nodes running on workers go on until their jobs stop them (each
    stop is a ``finish`` step); everything else is cancelled now."""
    running = state.with_status(NodeStatus.RUNNING)
    abort = stepper.cancel(state, batch, now, elsewhere=running)
    return _commit(conn, state, batch, StepResult(abort=abort))


def _advance(
    conn: Connection,
    state: RunState,
    batch: Batch,
    now: datetime,
    claimed_by: str | None = None,
    instant_room: int = 0,
    ahead: Ahead | None = None,
) -> StepResult:
    """Queue what became runnable (a job each); end the run when every node ended. With
    ``claimed_by``, the nodes the job executed ``ahead`` are recorded (``_record_ahead``),
    and up to ``instant_room`` other runnable instant nodes (``stepper.is_instant``) are
    started under that claim instead, for the caller to execute at once."""
    room: int | None = None
    if state.graph.batches.instances:
        assert state.items_cap is not None, "queue steps load states with the cap (_load)"
        state.items_allowed, room = items.allowed_in_database(
            conn, state.account_id, state.run_id, state.items_cap
        )
    if claimed_by is not None and ahead:
        _record_ahead(state, batch, now, claimed_by, ahead)
    ready = state.runnable()
    instant: list[str] = []
    if claimed_by is not None:
        instant = [n for n in ready if stepper.is_instant(state, n)][:instant_room]
        for node_id in instant:
            state.start(batch, node_id, now, claimed_by)
    stepper.advance(state, batch, now)  # queues the rest; ends the run once all ended
    started = [NodeTask.of(state, n) for n in instant]
    queued = [n for n in ready if n not in set(instant)]
    return _commit(conn, state, batch, StepResult(queued=queued, started=started, items_room=room))


def _record_ahead(
    state: RunState, batch: Batch, now: datetime, claimed_by: str, ahead: Ahead
) -> None:
    """Record the instant nodes executed ahead (``Ahead``) that are runnable now with the
    inputs they were executed with: started and ended in this step, at its time (their
    execution took no time worth showing), under the job's claim; then those they make
    runnable, as long as they were executed ahead too."""
    ahead = dict(ahead)  # the caller's is kept whole, should the step be tried again
    while True:
        found = [
            n
            for n in state.runnable()
            if n in ahead and stepper.is_instant(state, n) and state.inputs_of(n) == ahead[n][0]
        ]
        if not found:
            return
        for node_id in found:
            state.start(batch, node_id, now, claimed_by)
            state.record(batch, dataclasses.replace(ahead.pop(node_id)[1], at=now))


@guarded
def claim(
    conn: Connection, run_id: str, node_id: str, claimed_by: str, graphs: RunGraphs
) -> StepResult:
    """A worker takes a queued node: it is ``running``, claimed by ``claimed_by``."""
    state = _load(conn, run_id, graphs)
    if state is None or state.status.get(node_id) != NodeStatus.QUEUED:
        return StepResult()
    now = utcnow()
    batch = state.batch()
    if state.cancel_requested:
        return _cancel(conn, state, batch, now)
    state.start(batch, node_id, now, claimed_by)
    result = StepResult(task=NodeTask.of(state, node_id), state=state)
    return _commit(conn, state, batch, result)


def _ours(state: RunState | None, node_id: str, claimed_by: str) -> RunState | None:
    """The state, if the node still runs under this claim (else it was given back as
    stalled, or the run ended: whatever the claimant reports is dropped)."""
    if state is None or state.status.get(node_id) != NodeStatus.RUNNING:
        return None
    return state if state.claims.get(node_id) == claimed_by else None


@guarded
def finish(
    conn: Connection,
    run_id: str,
    node_id: str,
    claimed_by: str,
    outcome: Outcome | None,
    graphs: RunGraphs,
    instant_room: int = 0,
    ahead: Ahead | None = None,
) -> StepResult:
    """The node ran (``outcome``) or was stopped before it ended (None: cancelled, or its
    worker shutting down). Record the instant nodes the job executed ``ahead`` that it
    made runnable; queue what else became runnable — or, up to ``instant_room`` of its
    instant nodes, start them under ``claimed_by`` (``StepResult.started``); end the run
    when all ended."""
    outcomes = {node_id: outcome}
    return finish_many(conn, run_id, outcomes, claimed_by, graphs, instant_room, ahead)


@guarded
def finish_many(
    conn: Connection,
    run_id: str,
    outcomes: dict[str, Outcome | None],
    claimed_by: str,
    graphs: RunGraphs,
    instant_room: int = 0,
    ahead: Ahead | None = None,
) -> StepResult:
    """``finish`` for several nodes held under one claim (a job and the instant nodes it
    started), one transaction. A node no longer ours (given back as stalled, or the run
    ended) is dropped."""
    loaded = _load(conn, run_id, graphs)
    ours = [n for n in outcomes if _ours(loaded, n, claimed_by) is not None]
    if loaded is None or not ours:
        return StepResult()
    state = loaded
    now = utcnow()
    batch = state.batch()
    # Items of this run in flight before this step, and whether it ends some.
    before = state.items_in_flight()
    ends_items = any(state.graph.batches.region_of_instance(n) is not None for n in ours)
    result = _finish_many(
        conn, state, batch, now, ours, outcomes, claimed_by, instant_room, ahead or {}
    )
    if ends_items and result.items_room is not None and before >= result.items_room:
        # The account was at its cap: its other runs may hold items that fit now.
        result.nudge = items.held_runs(conn, state.account_id, run_id)
    return result


def _finish_many(
    conn: Connection,
    state: RunState,
    batch: Batch,
    now: datetime,
    ours: list[str],
    outcomes: dict[str, Outcome | None],
    claimed_by: str,
    instant_room: int,
    ahead: Ahead,
) -> StepResult:
    stopped = [n for n in ours if outcomes[n] is None]
    for node_id in ours:
        outcome = outcomes[node_id]
        if outcome is not None:
            state.record(batch, outcome)
    if stopped and state.cancel_requested:
        state.cancel(batch, now, stopped)  # stopped by the cancel
    elif stopped:
        state.queue(batch, stopped, now)  # stopped by a shutdown: they run again elsewhere
        result = _advance(conn, state, batch, now)  # what the others made runnable: jobs
        result.queued = stopped + result.queued
        return result
    if state.cancel_requested:
        return _cancel(conn, state, batch, now)
    return _advance(conn, state, batch, now, claimed_by, instant_room, ahead)


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
    ``node_crashed`` once it was started ``max_attempts`` times (``stepper.interrupted``)."""
    state = _ours(_load(conn, run_id, graphs), node_id, claimed_by)
    if state is None:
        return StepResult()
    now = utcnow()
    batch = state.batch()
    if state.cancel_requested:
        state.cancel(batch, now, [node_id])
        return _cancel(conn, state, batch, now)
    again = stepper.interrupted(state, batch, [node_id], now, max_attempts)
    if again:
        return _commit(conn, state, batch, StepResult(queued=again))
    return _advance(conn, state, batch, now)


@guarded
def request_cancel(conn: Connection, run_id: str, graphs: RunGraphs) -> StepResult:
    """Cancel a run: what does not run is cancelled now, and the run ends at once when
    nothing runs; the claims of running nodes are returned, for their jobs to be aborted
    (their workers end the run when they stop)."""
    run_store.request_cancel(conn, [run_id])
    state = _load(conn, run_id, graphs)
    if state is None:
        return StepResult()
    return _cancel(conn, state, state.batch(), utcnow())


@guarded
def nudge(conn: Connection, run_id: str, graphs: RunGraphs) -> StepResult:
    """Another run of the account freed room for items (engine/items.py): queue what of
    this run's held items fits now."""
    state = _load(conn, run_id, graphs)
    if state is None:
        return StepResult()
    batch = state.batch()
    if state.cancel_requested:
        return _cancel(conn, state, batch, utcnow())
    return _advance(conn, state, batch, utcnow())


@guarded
def finish_empty(conn: Connection, run_id: str, graphs: RunGraphs) -> StepResult:
    """A run without nodes completes as soon as it is accepted."""
    state = _load(conn, run_id, graphs)
    if state is None:
        return StepResult()
    return _advance(conn, state, state.batch(), utcnow())
