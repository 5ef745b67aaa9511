"""The in-process driver of one run (the embedded mode): start runnable nodes, execute them,
record each step durably, finish.

The process that drives a run owns it (``runs.driver`` holds its token, see
dispatch/local.py), so it keeps the run's state in memory (``RunState``) between steps: the
database row is the truth, the memory a cache of it that only this process writes. A step is
everything that changed since the last commit (nodes finished, nodes started or queued, the
run ended); it is written as one transaction (``transitions.Batch``) and only then announced.
Event ``seq`` numbers continue from the run's event log, under a per-run commit lock.

Resume: a driver adopting a run loads it as stored. Completed nodes keep their artifacts and
charges; nodes found ``running`` were interrupted and are queued again — unless they were
already started ``node_max_attempts`` times, then they fail as ``node_crashed``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from nodeloom.db.models import utcnow
from nodeloom.engine.executor import ExecutorEnv, NodeExecutor, NodeTask, small_inputs
from nodeloom.engine.graph import validate_graph
from nodeloom.engine.run_state import Outcome, RunState, artifact_info, crashed
from nodeloom.engine.states import NodeStatus, RunStatus, StaleTransition
from nodeloom.engine.transitions import Batch, apply
from nodeloom.events.model import EventType
from nodeloom.metrics import Metrics
from nodeloom.store import Record
from nodeloom.store import artifacts as artifact_store
from nodeloom.store import runs as run_store

log = logging.getLogger("nodeloom.engine")

COUNTED = {
    EventType.RUN_COMPLETED: "nodeloom_runs_completed_total",
    EventType.RUN_FAILED: "nodeloom_runs_failed_total",
    EventType.RUN_CANCELLED: "nodeloom_runs_cancelled_total",
    EventType.NODE_COMPLETED: "nodeloom_nodes_completed_total",
    EventType.NODE_FAILED: "nodeloom_nodes_failed_total",
}
PROGRESS_INTERVAL = 1.0
# Instant nodes executed within one step at most (then it commits and announces them).
INSTANT_PER_STEP = 64


def count_events(metrics: Metrics, events: list[Any]) -> None:
    for event in events:
        if event.type in COUNTED:
            metrics.inc(COUNTED[event.type], help_="Finished runs and nodes by type.")


def schedule(state: RunState, batch: Batch, owner: str, limit: int) -> list[str]:
    """Start queued and runnable nodes while fewer than ``limit`` of the run's nodes run;
    queue the runnable rest; end the run when every node ended. The nodes started."""
    now = utcnow()
    room = max(0, limit - state.count(NodeStatus.RUNNING))
    waiting = state.with_status(NodeStatus.QUEUED) if room else []
    runnable = state.runnable()
    starting = (waiting + runnable)[:room]
    chosen = set(starting)
    state.queue(batch, [n for n in runnable if n not in chosen], now)
    for node_id in starting:
        state.start(batch, node_id, now, owner)
    if not starting and state.all_finished:
        state.finish(batch, now)
    return starting


def is_instant(state: RunState, node_id: str) -> bool:
    node = state.graph.nodes[node_id]
    return node.node.instant(node.params) and small_inputs(state.inputs_of(node_id))


async def run_instant(
    state: RunState,
    batch: Batch,
    started: list[str],
    execute: Callable[[str], Awaitable[Outcome | None]],
    schedule_more: Callable[[], list[str]],
    stop: Callable[[], bool],
) -> list[str]:
    """Execute the started nodes that finish at once (``NodeType.instant``: a text input, a
    template that only substitutes) right now, and record them in this same step, then start
    what they made runnable (``schedule_more``): a chain of such nodes is one transaction,
    with the same events and charges as node-by-node. At most INSTANT_PER_STEP per step, so
    a long chain still commits (and announces) as it goes. ``execute`` answers None for a
    node that turns out not to be instant. Returns the started nodes left to execute as
    tasks."""
    left: list[str] = []
    budget = INSTANT_PER_STEP
    while started:
        ran = False
        for node_id in started:
            outcome = None
            if budget > 0 and is_instant(state, node_id):
                outcome = await execute(node_id)
            if outcome is None:
                left.append(node_id)
                continue
            state.record(batch, outcome)
            budget -= 1
            ran = True
        if not ran or stop():
            return left
        started = schedule_more()
    return left


class RunDriver:
    def __init__(
        self, env: ExecutorEnv, run_id: str, owner: str, fresh: RunState | None = None
    ) -> None:
        self.env = env
        self.run_id = run_id
        self.owner = owner  # this process's token: the claim on every node it starts
        self._fresh = fresh  # the state of a run just accepted here, as accepted
        self.executor = NodeExecutor(env)
        self.cancel_requested = asyncio.Event()
        self.draining = False
        self._commit_lock = asyncio.Lock()
        self._seq = 0
        self._tasks: dict[asyncio.Task[Outcome], str] = {}
        self._last_progress: dict[str, float] = {}
        self.state: RunState | None = None

    # -- loading ---------------------------------------------------------------------------

    async def _load(self) -> RunState | None:
        """The run as stored (or as just created); None when it is not running, or its
        graph no longer validates (then it is failed here)."""
        env = self.env
        if self._fresh is not None:
            self._seq = 1  # run.started was committed with the run
            return self._fresh
        stored = await env.db.read(lambda c: _stored_run(c, self.run_id))
        if stored is None:
            return None
        run, nodes, artifacts, self._seq, plan = stored
        if run.cancel_requested:
            self.cancel_requested.set()
        checked = validate_graph(run.graph_json, env.registry, env.settings)
        if isinstance(checked, list):
            problem = "; ".join(f"{p.pointer}: {p.message}" for p in checked[:3])
            await self._fail_unrunnable(run, [n.node_id for n in nodes], problem)
            return None
        state = RunState(
            run_id=run.id,
            account_id=run.account_id,
            workflow_id=run.workflow_id,
            graph=checked,
            run_input=run.input,
            use_cache=run.use_cache,
            estimate=run.estimated_credits,
            created_at=run.created_at,
            plan=plan,
            status={},
        )
        for node in nodes:
            state.status[node.node_id] = NodeStatus(node.status)
            state.credits[node.node_id] = node.credits_used
            state.attempts[node.node_id] = node.attempts
            state.claims[node.node_id] = node.claimed_by
            row = artifacts.get(node.artifact_id) if node.artifact_id else None
            if row is not None:
                state.artifacts[node.node_id] = artifact_info(row)
            if node.status == NodeStatus.FAILED and state.first_error is None:
                state.first_error = {**(node.error or {}), "node_id": node.node_id}
        return state

    async def _fail_unrunnable(self, run: Any, node_ids: list[str], problem: str) -> None:
        """A stored run whose graph the catalog no longer accepts cannot go on."""
        from nodeloom.engine.graph import Graph

        now = utcnow()
        state = RunState(
            run_id=run.id,
            account_id=run.account_id,
            workflow_id=run.workflow_id,
            graph=Graph(nodes={}, inputs={}, downstream={}, order=[]),
            run_input=run.input,
            use_cache=run.use_cache,
            estimate=run.estimated_credits,
            created_at=run.created_at,
            plan="free",
            status={},
        )
        batch = state.batch()
        batch.cancel_nodes(node_ids, now)
        message = f"the run's graph no longer validates: {problem}"
        state.finish(batch, now, {"code": "invalid_graph", "message": message, "node_id": None})
        await self._commit(batch)

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        state = await self._load()
        if state is None:
            return
        self.state = state
        now = utcnow()
        batch = state.batch()
        self._resume_interrupted(state, batch, now)
        try:
            await self._loop(state, batch)
        finally:
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    def _resume_interrupted(self, state: RunState, batch: Batch, now: datetime) -> None:
        """Nodes found running were interrupted (the process running them died): queue them
        again, unless they were started ``node_max_attempts`` times already — a node that
        keeps taking its process down with it is failed, not retried for ever."""
        limit = self.env.settings.node_max_attempts
        interrupted = state.with_status(NodeStatus.RUNNING)
        again = [n for n in interrupted if state.attempts.get(n, 0) < limit]
        state.queue(batch, again, now)
        for node_id in interrupted:
            if node_id not in again:
                state.record(batch, crashed(node_id, state.attempts.get(node_id, 0), now))

    async def _loop(self, state: RunState, batch: Batch) -> None:
        cancel_wait: asyncio.Future[Any] = asyncio.ensure_future(self.cancel_requested.wait())
        try:
            while True:
                if self.cancel_requested.is_set():
                    await self._cancel(state, batch)
                    return
                started = await self._run_instant(state, batch, self._schedule(state, batch))
                finished = batch.run_end is not None
                await self._commit(batch)
                for node_id in started:
                    task = asyncio.create_task(self._execute(state, node_id), name=node_id)
                    self._tasks[task] = node_id
                if finished or not self._tasks:
                    return
                waiting: list[asyncio.Future[Any]] = [*self._tasks, cancel_wait]
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                batch = state.batch()
                for task in list(self._tasks):
                    if task in done:
                        self._tasks.pop(task)
                        state.record(batch, task.result())
        finally:
            cancel_wait.cancel()

    async def _run_instant(self, state: RunState, batch: Batch, started: list[str]) -> list[str]:
        # Within the step: no timeout, execution slot or scratch directory (an instant node
        # needs none), the output cache still honoured; a node that needs a sandbox after
        # all (a template Jinja must render) is left to run as a task.
        return await run_instant(
            state,
            batch,
            started,
            lambda node_id: self.executor.execute_in_step(NodeTask.of(state, node_id)),
            lambda: self._schedule(state, batch),
            self.cancel_requested.is_set,
        )

    def _schedule(self, state: RunState, batch: Batch) -> list[str]:
        # Draining for shutdown: finish what runs, start nothing new.
        limit = 0 if self.draining else self.env.settings.max_concurrent_nodes_per_run
        return schedule(state, batch, self.owner, limit)

    async def _cancel(self, state: RunState, batch: Batch) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        state.finish_cancelled(batch, utcnow())
        await self._commit(batch)

    # -- committing ------------------------------------------------------------------------

    async def _commit(self, batch: Batch) -> None:
        if not batch:
            return
        async with self._commit_lock:
            next_seq = self._seq + 1
            events = await self.env.db.write(lambda conn: apply(conn, batch, next_seq))
            self._seq += len(events)
            await self.env.bus.publish(events)
        count_events(self.env.metrics, events)

    async def _progress(self, node_id: str, fraction: float) -> None:
        now = time.monotonic()
        if now - self._last_progress.get(node_id, 0.0) < PROGRESS_INTERVAL and fraction < 1.0:
            return
        self._last_progress[node_id] = now
        assert self.state is not None
        batch = self.state.batch()
        batch.event(EventType.NODE_PROGRESS, utcnow(), node_id, progress=round(fraction, 4))
        try:
            await self._commit(batch)
        except StaleTransition:
            raise
        except Exception:  # progress is advisory: never fail a node over it
            log.warning("could not record progress of %s/%s", self.run_id, node_id, exc_info=True)

    # -- executing one node ----------------------------------------------------------------

    async def _execute(self, state: RunState, node_id: str) -> Outcome:
        async def report(fraction: float) -> None:
            await self._progress(node_id, fraction)

        return await self.executor.execute(NodeTask.of(state, node_id), report)


_StoredRun = tuple[Record, list[Record], dict[str, Record], int, str]


def _stored_run(conn: Connection, run_id: str) -> _StoredRun | None:
    """What a driver adopting a running run needs: the run, its node runs, their artifacts,
    the last event seq and the owner's plan; None once the run has finished."""
    run = run_store.full(conn, run_id)
    if run is None or run.status != RunStatus.RUNNING:
        return None
    nodes = run_store.node_rows(conn, run_id)
    artifacts = artifact_store.by_ids(conn, [n.artifact_id for n in nodes if n.artifact_id])
    plan = run_store.account_plan(conn, run.account_id) or "free"
    return run, nodes, artifacts, run_store.last_seq(conn, run_id), plan
