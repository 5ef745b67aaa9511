"""The distributed executor (PostgreSQL): every runnable node is a job of a Procrastinate
queue, taken by whichever worker process is free, on any host — except instant nodes: a run
made only of them is executed while it is accepted (engine/submit.py), so is the instant
prefix of any other run (engine/prefix.py, ADR 0018), and those a job's node makes runnable
are executed by that job, before its finish step records them all (``_ahead``, ADR 0018)
or after it (``_run_started``, ADR 0011).

The database stays the truth; a job is a hint that a node is runnable. A node becomes
runnable by a step (engine/steps.py) and its job is inserted by the same transaction
(``enqueue_in``; the acceptance sends it within its one statement, ``handover``; ADR 0020,
0021): the job exists if and only if the step committed, and Procrastinate's insert trigger
wakes the workers at that commit, with no transaction of its own in between. A job's fetch
runs on our pool, and the step that leaves a job nothing more to run deletes it
(ADR 0021). Every statement on Procrastinate's tables, and the library itself, is reached
through db/procrastinate_queue.py.
The queueing lock ``node:<run>:<node>`` keeps one waiting job per node, so enqueueing twice is
harmless, and the reconciler enqueues a job for any node left queued without one. The job's
lock (the same string) runs at most one job per node at a time; the claim step makes sure
that only a queued node is started, by exactly one job.

Procrastinate keeps a heartbeat per worker. The reconciler (every ``RECONCILE_SECONDS``, in
every worker process) asks it for jobs whose worker stopped beating, gives their nodes back
(``steps.requeue``: queued again, or failed as ``node_crashed`` after ``node_max_attempts``
starts) and puts the jobs back in the queue; and it finds nodes still claimed by a job that
is no longer running (a worker that lost its database connection mid-step, say).

A node that only waits on the event loop (a provider call in flight, a child run) is a job
of a second queue, ``WAIT_QUEUE``, that each worker serves with many more job slots
(``worker_wait_concurrency``) than the computing nodes' ``QUEUE`` (``worker_concurrency``):
see dispatch/waits.py. Locks, claims, the reconciler and aborting are the same for both.

Cancelling a run aborts the jobs of its running nodes; a worker told to abort stops the node
(killing its sandbox process) and the step that records it ends the run. A worker shutting
down gives its running nodes back to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import NodeRun, utcnow
from nodeloom.db.prepared import Params, Prepared
from nodeloom.db.procrastinate_queue import (
    DELETE_DONE,
    ENQUEUE,
    ENQUEUE_IF_CREATED,
    ORPHANS,
    STALE_CLAIMS,
    JobContext,
    QueueWorker,
    Status,
    new_app,
)
from nodeloom.engine import items, stepper, steps
from nodeloom.engine.dispatch import waits
from nodeloom.engine.dispatch.base import Handover
from nodeloom.engine.dispatch.waits import QUEUE, WAIT_QUEUE
from nodeloom.engine.executor import ExecutorEnv, NodeExecutor, NodeTask
from nodeloom.engine.graph import Graph, GraphNode
from nodeloom.engine.run_state import Outcome, RunState
from nodeloom.engine.stepper import RunGraphs
from nodeloom.engine.steps import StepResult
from nodeloom.events.model import Event
from nodeloom.states import NodeStatus
from nodeloom.store import credentials as credential_store

log = logging.getLogger("nodeloom.dispatch")

TASK = "nodeloom.run_node"
HEARTBEAT_SECONDS = 1.0
RECONCILE_SECONDS = 2.0
# Pool connections besides those for the computing queue's jobs: the waiting queue's
# worker fetches and finishes its jobs, beats and polls for aborts through a few. A job
# holds no connection while it runs, so the pool does not grow with the waiting slots.
WAIT_CONNECTIONS = 2
ORPHAN_AFTER_SECONDS = 5.0  # a node queued this long without a job gets one
STOP_MARGIN_SECONDS = 5.0  # beyond the shutdown grace, before a worker is cancelled
STOP_ATTEMPTS = 4
STOP_CHECK_SECONDS = 0.5  # how often a stopping worker is told again (see stop)
CLAIM_PREFIX = "job:"

_NODES = cast(sa.Table, NodeRun.__table__)
_ACCOUNT_OF_RUN = sa.text("SELECT account_id FROM runs WHERE id = :run")


def insert_jobs(conn: Connection, run_id: str, queues: dict[str, str]) -> None:
    """The job of each node of ``queues`` (node id -> queue) as Procrastinate's defer
    would write it, by the transaction of ``conn``; a node with a waiting job keeps it."""
    ENQUEUE.run(conn, _jobs_params(run_id, queues))


def _jobs_params(run_id: str, queues: dict[str, str]) -> dict[str, Any]:
    return {
        "task": TASK,
        "run": run_id,
        "nodes": list(queues),
        "queues": list(queues.values()),
        "locks": [lock_of(run_id, node_id) for node_id in queues],
    }


def _leaves_nothing(result: StepResult) -> bool:
    """The step leaves its job nothing to run: no node claimed (a claim that found its
    node no longer queued) and no instant node started under the job's claim."""
    return result.task is None and not result.started


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

    def __init__(
        self, env: ExecutorEnv, *, executes: bool, concurrency: int, wait_concurrency: int = 1
    ) -> None:
        self.env = env
        self.executes = executes
        self.concurrency = concurrency
        self.wait_concurrency = wait_concurrency
        self.accepting = False
        self.graphs = RunGraphs(env.registry, env.settings)
        self.executor = NodeExecutor(env)
        # The job's fetch and completion on our pool (db/procrastinate_queue.py, ADR 0021).
        self.app, self.jobs = new_app(
            env.settings.effective_database_url,
            max_size=max(4, concurrency // 2) + WAIT_CONNECTIONS,
            db=env.db,
        )
        self.app.task(name=TASK, queue=QUEUE, pass_context=True)(self._run_node)
        self._workers: dict[asyncio.Task[None], QueueWorker] = {}
        self._reconciler: asyncio.Task[None] | None = None
        self._throttle = stepper.Throttle()
        self.claims_started = 0

    # -- Dispatcher ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.app.open_async()
        self.accepting = True
        if self.executes:
            await self._warn_without_autovacuum()
            # Two Procrastinate workers on one App, each with its own job slots and
            # heartbeat: computing nodes, and nodes that only wait (dispatch/waits.py).
            token = self.env.scratch.identity.token
            for queue, concurrency, name in (
                (QUEUE, self.concurrency, token),
                (WAIT_QUEUE, self.wait_concurrency, f"{token}/waits"),
            ):
                worker = QueueWorker(
                    app=self.app,
                    queues=[queue],
                    concurrency=concurrency,
                    install_signal_handlers=False,
                    update_heartbeat_interval=HEARTBEAT_SECONDS,
                    stalled_worker_timeout=self.env.settings.worker_stalled_seconds,
                    delete_jobs="successful",
                    shutdown_graceful_timeout=self.env.settings.shutdown_grace_seconds,
                    name=name,
                )
                task = asyncio.create_task(worker.run(), name=f"queue-worker-{queue}")
                self._workers[task] = worker
            self._reconciler = asyncio.create_task(self._reconcile_forever(), name="reconciler")

    async def _warn_without_autovacuum(self) -> None:
        """Procrastinate's job fetch plans well only with table statistics: with autovacuum
        off and nobody running ANALYZE, a fetch took 4 s at 10,000 queued jobs (0.5 jobs a
        second started) where it took milliseconds once analyzed (docs/operations.md)."""
        setting = await self.env.db.read(lambda c: c.execute(sa.text("SHOW autovacuum")).scalar())
        if setting != "on":
            log.warning(
                "PostgreSQL's autovacuum is %s: the job queue slows down as it grows without "
                "table statistics; turn it on, or run ANALYZE on a schedule",
                setting,
            )

    async def submit(self, run_id: str, fresh: RunState | None = None) -> None:
        if fresh is not None and not fresh.graph.nodes:
            await self._step(lambda c: steps.finish_empty(c, run_id, self.graphs))
            return
        if fresh is not None:
            await self.defer(run_id, fresh.with_status(NodeStatus.QUEUED), fresh.graph)
        else:
            await self.defer(run_id, await self._queued(run_id))

    def handover(
        self, conn: Connection | None, nodes: Handover
    ) -> tuple[Prepared, Params | None] | None:
        """The insert of a job per node, for the caller's transaction to send (see the
        module's doc), each on the queue its type calls for (dispatch/waits.py). The locks
        are the same whatever the queue, so a node never has two waiting jobs, one in each.
        No parameters (nothing to send) for no nodes; None, ``alone``, when the queues
        cannot be told without reading the database."""
        statement = ENQUEUE_IF_CREATED if nodes.alone else ENQUEUE
        if not nodes.node_ids:
            return statement, None
        reader = None if nodes.alone else conn
        queues = self._queues_in(
            reader, nodes.run_id, nodes.node_ids, nodes.graph, nodes.account_id, nodes.kinds
        )
        if queues is None:
            return None
        by_node = {node_id: queues.get(node_id, QUEUE) for node_id in nodes.node_ids}
        return statement, _jobs_params(nodes.run_id, by_node)

    def enqueue_in(
        self, conn: Connection, run_id: str, node_ids: list[str], graph: Graph | None = None
    ) -> None:
        """``handover``'s insert, sent now in the caller's transaction."""
        handed = self.handover(conn, Handover(run_id, node_ids, graph))
        if handed is not None and handed[1] is not None:
            handed[0].run(conn, handed[1])

    async def cancel(self, run_id: str) -> None:
        await self._step(lambda c: steps.request_cancel(c, run_id, self.graphs))

    async def stop(self) -> None:
        self.accepting = False
        if self._reconciler is not None:
            self._reconciler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciler
        # Procrastinate lets running jobs finish within shutdown_grace_seconds, then cancels
        # them: a cancelled node is given back to the queue (see _run_node). Both workers
        # at once, so the grace is not spent twice.
        #
        # Each is asked to stop (``Worker.stop``), not cancelled: a cancel that landed while
        # a worker was still starting (inside a connection checkout) could be swallowed on
        # Python 3.11, and the worker then ran on until the grace was over and it was
        # cancelled again, 25 s for a stop with nothing to wait for (one stop in 30). A
        # worker that had not begun to run clears a stop asked before it, so a worker still
        # running is asked again every STOP_CHECK_SECONDS; one still running after the
        # grace is cancelled, as a last resort.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.env.settings.shutdown_grace_seconds + STOP_MARGIN_SECONDS
        pending = set(self._workers)
        while pending and loop.time() < deadline:
            for task in pending:
                self._workers[task].stop()
            _, pending = await asyncio.wait(pending, timeout=STOP_CHECK_SECONDS)
        for _ in range(STOP_ATTEMPTS):
            if not pending:  # all stopped, or none ran (an API replica, --no-worker)
                break
            log.warning("%d queue worker(s) still running; cancelling them", len(pending))
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=STOP_MARGIN_SECONDS)
        for task in self._workers:
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.warning("queue worker ended with an error", exc_info=task.exception())
        self._workers = {}
        await self.app.close_async()

    # -- jobs ------------------------------------------------------------------------------

    async def defer(self, run_id: str, node_ids: list[str], graph: Graph | None = None) -> None:
        """Jobs for queued nodes in a transaction of their own (``enqueue_in``): a run
        resubmitted, a node the reconciler found without a job."""
        if node_ids:
            await self.env.db.write(lambda c: self.enqueue_in(c, run_id, node_ids, graph))

    def _queues_in(
        self,
        conn: Connection | None,
        run_id: str,
        node_ids: list[str],
        graph: Graph | None,
        account_id: str | None = None,
        kinds_read: Mapping[str, str] | None = None,
    ) -> dict[str, str] | None:
        """The queue of each node. The graph is usually at hand (the step that queued the
        nodes loaded it); the database is read only for a run this process has not loaded
        yet, or for the kind of a credential a provider node names (TextToSpeech speaks
        locally or through its provider depending on it). None when that read is needed
        and there is no ``conn`` to read with."""
        known = graph if graph is not None else self.graphs.known(run_id)
        if isinstance(known, str):
            return {}  # unrunnable: the claim step ends the run, on whichever queue
        nodes: dict[str, GraphNode | None] = {}
        if known is not None:
            nodes = {n: waits.node_of(known, n) for n in node_ids}
            if not any(node is not None and waits.may_wait(node) for node in nodes.values()):
                return {}
        credentials = {
            cid
            for node in nodes.values()
            if node is not None and waits.may_wait(node) and (cid := waits.credential_of(node))
        }
        kinds: Mapping[str, str]
        if known is not None and kinds_read is not None and credentials <= kinds_read.keys():
            kinds = kinds_read  # read by the caller, in this acceptance
        elif known is None or credentials:
            if conn is None:
                return None
            known, kinds = self._routing(conn, run_id, known, credentials, account_id)
            if known is None or isinstance(known, str):
                return {}
            nodes = {n: waits.node_of(known, n) for n in node_ids}
        else:
            kinds = {}
        settings = self.env.settings
        return {
            node_id: waits.queue_of(node, settings, kinds.get(waits.credential_of(node) or ""))
            for node_id, node in nodes.items()
            if node is not None
        }

    def _routing(
        self,
        conn: Connection,
        run_id: str,
        graph: Graph | str | None,
        credentials: set[str],
        account_id: str | None,
    ) -> tuple[Graph | str | None, dict[str, str]]:
        """The run's graph (loaded if need be) and the kinds of the credentials named."""
        if account_id is None:
            account_id = conn.execute(_ACCOUNT_OF_RUN, {"run": run_id}).scalar()
        if account_id is None:
            return None, {}  # the run is gone
        if graph is None:
            graph = self.graphs.get(conn, run_id, account_id)
            if isinstance(graph, Graph):
                credentials = {
                    cid
                    for node in graph.nodes.values()
                    if waits.may_wait(node) and (cid := waits.credential_of(node))
                }
        return graph, credential_store.kinds(conn, account_id, credentials)

    async def _abort(self, claims: list[str]) -> None:
        for claim in dict.fromkeys(claims):  # a job's instant nodes share its claim
            job_id = job_of(claim)
            if job_id is None:
                continue
            try:
                await self.app.job_manager.cancel_job_by_id_async(job_id, abort=True)
            except Exception:  # the job ended meanwhile; the reconciler sees to the rest
                log.warning("could not abort job %s", job_id, exc_info=True)

    async def _step(self, step: Callable[..., StepResult], job_id: int | None = None) -> StepResult:
        """Run one step transaction, the jobs of the nodes it queued included, then announce
        and act on what it changed. ``job_id``: the job whose node the step records; when
        the step leaves it nothing to run, the step completes it too
        (db/procrastinate_queue.py)."""
        result: StepResult = await self.env.db.write(lambda c: self._with_jobs(c, step(c), job_id))
        if job_id is not None and _leaves_nothing(result):
            self.jobs.finished_by_step(job_id)
        await self._publish(result.events)
        if result.abort:
            await self._abort(result.abort)
        for run_id in result.nudge:  # room freed for their held items (engine/items.py)
            await self._step(lambda c, r=run_id: steps.nudge(c, r, self.graphs))
        return result

    def _with_jobs(self, conn: Connection, result: StepResult, job_id: int | None) -> StepResult:
        if result.queued and result.run_id is not None:
            self.enqueue_in(conn, result.run_id, result.queued)
        if job_id is not None and _leaves_nothing(result):
            DELETE_DONE.run(conn, {"job": job_id})
        return result

    async def _publish(self, events: list[Event]) -> None:
        if events:
            await self.env.bus.publish(events)
            stepper.count_events(self.env.metrics, events)

    async def _run_node(self, context: JobContext, run_id: str, node_id: str) -> None:
        """The job: claim the node, execute it, record how it ended."""
        job_id = context.job.id
        assert job_id is not None
        claim = claim_of(job_id, self.env.scratch.identity.token)
        claimed = await self._step(
            lambda c: steps.claim(c, run_id, node_id, claim, self.graphs), job_id
        )
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

        async def waiting(data: dict[str, Any]) -> None:
            events = await self.env.db.write(lambda c: stepper.waiting(c, run_id, node_id, data))
            await self._publish(events)

        try:
            outcome = await self.executor.execute(claimed.task, report, waiting)
        except asyncio.CancelledError:
            # Aborted (the run was cancelled) or the worker is shutting down: record that
            # the node stopped; shielded, so the step commits whatever cancels us.
            await asyncio.shield(
                self._step(lambda c: steps.finish(c, run_id, node_id, claim, None, self.graphs))
            )
            raise
        finally:
            self._throttle.forget((run_id, node_id))
        try:
            ahead = await self._ahead(claimed.state, outcome, claim)
        except asyncio.CancelledError:
            await asyncio.shield(
                self._step(lambda c: steps.finish(c, run_id, node_id, claim, outcome, self.graphs))
            )
            raise
        except Exception:  # an optimisation: never fail the node over it
            log.warning("could not execute ahead of %s/%s", run_id, node_id, exc_info=True)
            ahead = {}
        room = stepper.INSTANT_PER_STEP
        done = await self._step(
            lambda c: steps.finish(c, run_id, node_id, claim, outcome, self.graphs, room, ahead),
            job_id,
        )
        await self._run_started(run_id, claim, job_id, done.started, report_of)

    async def _ahead(self, state: RunState | None, outcome: Outcome, claim: str) -> steps.Ahead:
        """The instant nodes ``outcome`` makes runnable (and those they do, in turn),
        executed now from the run's state at the claim (this job's own copy): the finish
        step then records them with the node itself (``steps.Ahead``), one transaction
        where starting them there and recording them in another took two. A node the run
        has moved on from meanwhile (a cancel, an input that changed) is simply not
        recorded, and its execution dropped. Runs with batch regions are left to the
        finish step (their items are counted in the database)."""
        ahead: steps.Ahead = {}
        if state is None or state.graph.batches.regions or outcome.node_id not in state.status:
            return ahead
        batch = state.batch()  # throwaway: nothing of it is written
        now = utcnow()
        state.record(batch, outcome)
        budget = stepper.INSTANT_PER_STEP
        while budget > 0:
            ready = [n for n in state.runnable() if stepper.is_instant(state, n)][:budget]
            if not ready:
                break
            for node_id in ready:
                task = NodeTask.of(state, node_id)
                state.start(batch, node_id, now, claim)
                executed = await self.executor.execute_in_step(task)
                if executed is None:  # needs a sandbox: the finish step starts it as usual
                    return ahead
                ahead[node_id] = (task.inputs, executed)
                state.record(batch, executed)
            budget -= len(ready)
        return ahead

    async def _run_started(
        self,
        run_id: str,
        claim: str,
        job_id: int,
        started: list[NodeTask],
        report: Callable[[str, float], Awaitable[None]],
    ) -> None:
        """Instant nodes a finish step started under this job's claim: executed here, right
        away, and recorded together by the next step (which may start more), as the
        in-process driver does within its steps. No job is deferred, fetched, claimed and
        finished for them. Should the worker die meanwhile, the reconciler gives them back
        like any node claimed by a job that stopped (``STALE_CLAIMS``)."""
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
                lambda c, o=outcomes, r=room: steps.finish_many(
                    c, run_id, o, claim, self.graphs, r
                ),
                job_id,
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
            task_name=TASK,
            seconds_since_heartbeat=self.env.settings.worker_stalled_seconds,
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
            lambda c: (c.execute(STALE_CLAIMS, cutoff).all(), c.execute(ORPHANS, cutoff).all())
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
