"""The distributed executor (PostgreSQL): every runnable node is a job of a Procrastinate
queue, taken by whichever worker process is free, on any host — except instant nodes: a run
made only of them is executed while it is accepted (engine/submit.py), and those a finishing
job makes runnable are executed by that job (``_run_started``, ADR 0011).

The database stays the truth; a job is a hint that a node is runnable. A node becomes
runnable by a committed step (engine/steps.py) and its job is deferred right after the
commit; the queueing lock ``node:<run>:<node>`` keeps one waiting job per node, so deferring
twice is harmless, and the reconciler defers a job for any node left queued without one (a
process that died between the commit and the defer). The job's lock (the same string) runs
at most one job per node at a time; the claim step makes sure that only a queued node is
started, by exactly one job.

Procrastinate keeps a heartbeat per worker. The reconciler (every ``RECONCILE_SECONDS``, in
every worker process) asks it for jobs whose worker stopped beating, gives their nodes back
(``steps.requeue``: queued again, or failed as ``node_crashed`` after ``node_max_attempts``
starts) and puts the jobs back in the queue; and it finds nodes still claimed by a job that
is no longer running (a worker that lost its database connection mid-step, say).

Cancelling a run aborts the jobs of its running nodes; a worker told to abort stops the node
(killing its sandbox process) and the step that records it ends the run. A worker shutting
down gives its running nodes back to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, cast

import sqlalchemy as sa
from procrastinate import App, JobContext, PsycopgConnector
from procrastinate.exceptions import AlreadyEnqueued
from procrastinate.jobs import Status

from nodeloom.db.models import NodeRun, utcnow
from nodeloom.engine import items, stepper, steps
from nodeloom.engine.executor import ExecutorEnv, NodeExecutor, NodeTask
from nodeloom.engine.run_state import Outcome, RunState
from nodeloom.engine.states import NodeStatus
from nodeloom.engine.stepper import RunGraphs
from nodeloom.engine.steps import StepResult
from nodeloom.events.model import Event

log = logging.getLogger("nodeloom.dispatch")

QUEUE = "nodes"
TASK = "nodeloom.run_node"
HEARTBEAT_SECONDS = 1.0
STALLED_AFTER_SECONDS = 5.0  # a worker silent this long is gone
RECONCILE_SECONDS = 2.0
ORPHAN_AFTER_SECONDS = 5.0  # a node queued this long without a job gets one
CLAIM_PREFIX = "job:"

_NODES = cast(sa.Table, NodeRun.__table__)
_ORPHANS = sa.text(
    """
    SELECT n.run_id, n.node_id FROM node_runs n
    WHERE n.status = 'queued' AND n.queued_at < :before
      AND NOT EXISTS (
        SELECT 1 FROM procrastinate_jobs j
        WHERE j.queueing_lock = 'node:' || n.run_id || ':' || n.node_id
          AND j.status IN ('todo', 'doing'))
    LIMIT 500
    """
)
_STALE_CLAIMS = sa.text(
    """
    SELECT n.run_id, n.node_id, n.claimed_by FROM node_runs n
    LEFT JOIN procrastinate_jobs j
      ON j.id = CAST(split_part(substr(n.claimed_by, 5), '@', 1) AS bigint)
     AND j.status = 'doing'
    WHERE n.status = 'running' AND n.claimed_by LIKE 'job:%' AND j.id IS NULL
      AND n.started_at < :before
    LIMIT 500
    """
)


def conninfo(url: str) -> str:
    """A libpq connection string from our SQLAlchemy URL (postgresql+asyncpg://...)."""
    return (
        sa.engine.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    )


def lock_of(run_id: str, node_id: str) -> str:
    return f"node:{run_id}:{node_id}"


def claim_of(job_id: int, process: str) -> str:
    """``job:<id>@<process token>``: the job, and the worker process that runs it."""
    return f"{CLAIM_PREFIX}{job_id}@{process}"


def job_of(claim: str) -> int | None:
    if not claim.startswith(CLAIM_PREFIX):
        return None
    try:
        return int(claim[len(CLAIM_PREFIX) :].split("@", 1)[0])
    except ValueError:
        return None


class QueueDispatcher:
    owner: str | None = None  # no process drives a run: workers run its nodes one by one

    def __init__(self, env: ExecutorEnv, *, executes: bool, concurrency: int) -> None:
        self.env = env
        self.executes = executes
        self.concurrency = concurrency
        self.accepting = False
        self.graphs = RunGraphs(env.registry, env.settings)
        self.executor = NodeExecutor(env)
        self.app = App(
            connector=PsycopgConnector(
                conninfo=conninfo(env.settings.effective_database_url),
                min_size=1,
                max_size=max(4, concurrency // 2),
            )
        )
        self.app.task(name=TASK, queue=QUEUE, pass_context=True)(self._run_node)
        self._worker: asyncio.Task[None] | None = None
        self._reconciler: asyncio.Task[None] | None = None
        self._throttle = stepper.Throttle()
        self.claims_started = 0

    # -- Dispatcher ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.app.open_async()
        self.accepting = True
        if self.executes:
            self._worker = asyncio.create_task(
                self.app.run_worker_async(
                    queues=[QUEUE],
                    concurrency=self.concurrency,
                    install_signal_handlers=False,
                    update_heartbeat_interval=HEARTBEAT_SECONDS,
                    stalled_worker_timeout=STALLED_AFTER_SECONDS,
                    delete_jobs="successful",
                    shutdown_graceful_timeout=self.env.settings.shutdown_grace_seconds,
                    name=self.env.scratch.identity.token,
                ),
                name="queue-worker",
            )
            self._reconciler = asyncio.create_task(self._reconcile_forever(), name="reconciler")

    async def submit(self, run_id: str, fresh: RunState | None = None) -> None:
        if fresh is not None and not fresh.graph.nodes:
            await self._step(lambda c: steps.finish_empty(c, run_id, self.graphs))
            return
        if fresh is not None:
            queued = fresh.with_status(NodeStatus.QUEUED)
        else:
            queued = await self._queued(run_id)
        await self.defer(run_id, queued)

    async def cancel(self, run_id: str) -> None:
        await self._step(lambda c: steps.request_cancel(c, run_id, self.graphs))

    async def stop(self) -> None:
        self.accepting = False
        if self._reconciler is not None:
            self._reconciler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciler
        if self._worker is not None:
            # Procrastinate lets running jobs finish within shutdown_grace_seconds, then
            # cancels them: a cancelled node is given back to the queue (see _run_node).
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        await self.app.close_async()

    # -- jobs ------------------------------------------------------------------------------

    async def defer(self, run_id: str, node_ids: list[str]) -> None:
        task = self.app.tasks[TASK]
        for node_id in node_ids:
            lock = lock_of(run_id, node_id)
            with contextlib.suppress(AlreadyEnqueued):
                await task.configure(lock=lock, queueing_lock=lock).defer_async(
                    run_id=run_id, node_id=node_id
                )

    async def _abort(self, claims: list[str]) -> None:
        for claim in dict.fromkeys(claims):  # a job's instant nodes share its claim
            job_id = job_of(claim)
            if job_id is None:
                continue
            try:
                await self.app.job_manager.cancel_job_by_id_async(job_id, abort=True)
            except Exception:  # the job ended meanwhile; the reconciler sees to the rest
                log.warning("could not abort job %s", job_id, exc_info=True)

    async def _step(self, step: Any) -> StepResult:
        """Run one step transaction, then announce and act on what it changed."""
        result: StepResult = await self.env.db.write(step)
        await self._publish(result.events)
        if result.queued and result.run_id is not None:
            await self.defer(result.run_id, result.queued)
        if result.abort:
            await self._abort(result.abort)
        for run_id in result.nudge:  # room freed for their held items (engine/items.py)
            await self._step(lambda c, r=run_id: steps.nudge(c, r, self.graphs))
        return result

    async def _publish(self, events: list[Event]) -> None:
        if events:
            await self.env.bus.publish(events)
            stepper.count_events(self.env.metrics, events)

    async def _run_node(self, context: JobContext, run_id: str, node_id: str) -> None:
        """The job: claim the node, execute it, record how it ended."""
        assert context.job.id is not None
        claim = claim_of(context.job.id, self.env.scratch.identity.token)
        claimed = await self._step(lambda c: steps.claim(c, run_id, node_id, claim, self.graphs))
        if claimed.task is None:
            return  # no longer queued: done or taken elsewhere
        self.claims_started += 1

        async def report_of(node: str, fraction: float) -> None:
            if not self._throttle.due((run_id, node), fraction):
                return
            try:
                events = await self.env.db.write(
                    lambda c: stepper.progress(c, run_id, node, fraction)
                )
                await self._publish(events)
            except Exception:  # progress is advisory: never fail a node over it
                log.warning("could not record progress of %s/%s", run_id, node, exc_info=True)

        async def report(fraction: float) -> None:
            await report_of(node_id, fraction)

        try:
            outcome = await self.executor.execute(claimed.task, report)
        except asyncio.CancelledError:
            # Aborted (the run was cancelled) or the worker is shutting down: record that
            # the node stopped; shielded, so the step commits whatever cancels us.
            await asyncio.shield(
                self._step(lambda c: steps.finish(c, run_id, node_id, claim, None, self.graphs))
            )
            raise
        finally:
            self._throttle.forget((run_id, node_id))
        room = stepper.INSTANT_PER_STEP
        done = await self._step(
            lambda c: steps.finish(c, run_id, node_id, claim, outcome, self.graphs, room)
        )
        await self._run_started(run_id, claim, done.started, report_of)

    async def _run_started(
        self,
        run_id: str,
        claim: str,
        started: list[NodeTask],
        report: Callable[[str, float], Awaitable[None]],
    ) -> None:
        """Instant nodes a finish step started under this job's claim: executed here, right
        away, and recorded together by the next step (which may start more), as the
        in-process driver does within its steps. No job is deferred, fetched, claimed and
        finished for them. Should the worker die meanwhile, the reconciler gives them back
        like any node claimed by a job that stopped (``_STALE_CLAIMS``)."""
        budget = stepper.INSTANT_PER_STEP
        while started:
            outcomes: dict[str, Outcome | None] = {}
            try:
                for task in started:
                    outcome = await self.executor.execute_in_step(task)
                    if outcome is None:  # needs a sandbox after all: executed as usual
                        node_id = task.node.id
                        try:
                            outcome = await self.executor.execute(
                                task, functools.partial(report, node_id)
                            )
                        finally:
                            self._throttle.forget((run_id, node_id))
                    outcomes[task.node.id] = outcome
            except asyncio.CancelledError:
                held = {t.node.id: outcomes.get(t.node.id) for t in started}
                await asyncio.shield(
                    self._step(
                        lambda c, h=held: steps.finish_many(c, run_id, h, claim, self.graphs)
                    )
                )
                raise
            budget -= len(started)
            room = max(0, min(stepper.INSTANT_PER_STEP, budget))
            done = await self._step(
                lambda c, o=outcomes, r=room: steps.finish_many(c, run_id, o, claim, self.graphs, r)
            )
            started = done.started

    async def _claim_of_node(self, run_id: str, node_id: str) -> str | None:
        query = sa.select(_NODES.c.claimed_by).where(
            _NODES.c.run_id == run_id, _NODES.c.node_id == node_id
        )
        claim: str | None = await self.env.db.read(lambda c: c.execute(query).scalar())
        return claim

    async def _queued(self, run_id: str) -> list[str]:
        query = sa.select(_NODES.c.node_id).where(
            _NODES.c.run_id == run_id, _NODES.c.status == NodeStatus.QUEUED.value
        )
        return await self.env.db.read(lambda c: list(c.execute(query).scalars()))

    # -- reconciling -----------------------------------------------------------------------

    async def _reconcile_forever(self) -> None:
        while True:
            await asyncio.sleep(RECONCILE_SECONDS)
            try:
                await self.reconcile()
            except Exception:
                log.warning("reconciling the queue failed; trying again", exc_info=True)

    async def reconcile(self) -> None:
        """Give back the nodes of dead workers; make sure every queued node has a job."""
        max_attempts = self.env.settings.node_max_attempts
        stalled = await self.app.job_manager.get_stalled_jobs(
            task_name=TASK, seconds_since_heartbeat=STALLED_AFTER_SECONDS
        )
        for job in stalled:
            run_id, node_id = job.task_kwargs["run_id"], job.task_kwargs["node_id"]
            claim = await self._claim_of_node(str(run_id), str(node_id))
            if claim is None or job_of(claim) != job.id:
                claim = None
            log.warning("worker of job %s is gone; giving node %s/%s back", job.id, run_id, node_id)
            if claim is not None:
                await self._step(
                    lambda c, r=run_id, n=node_id, cl=claim: steps.requeue(
                        c, r, n, cl, max_attempts, self.graphs
                    )
                )
            # The job itself is finished: the node has a new one (or none is needed).
            with contextlib.suppress(Exception):
                assert job.id is not None
                await self.app.job_manager.finish_job_by_id_async(
                    job.id, status=Status.FAILED, delete_job=False
                )
        before = utcnow()
        cutoff = {"before": before.replace(tzinfo=None) - timedelta(seconds=ORPHAN_AFTER_SECONDS)}
        stale, orphans = await self.env.db.read(
            lambda c: (c.execute(_STALE_CLAIMS, cutoff).all(), c.execute(_ORPHANS, cutoff).all())
        )
        for run_id, node_id, claim in stale:
            await self._step(
                lambda c, r=run_id, n=node_id, cl=claim: steps.requeue(
                    c, r, n, cl, max_attempts, self.graphs
                )
            )
        for run_id, node_id in orphans:
            await self.defer(run_id, [node_id])
        # Runs holding items for their account's cap with nothing of theirs in flight:
        # should the step that freed room have stopped before waking them, wake them now.
        for run_id in await self.env.db.read(items.held_anywhere):
            await self._step(lambda c, r=run_id: steps.nudge(c, r, self.graphs))
