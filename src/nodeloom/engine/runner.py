"""Drives one run: start ready nodes, execute them, record each step durably, finish.

A step is everything that changed since the last commit (nodes finished, nodes started, the
run ended); it is written as one transaction (``transitions.Batch``) and only then announced
on the bus. The runner is the only writer of its run's state while it holds it, so event
``seq`` numbers are allocated here, under a per-run commit lock.

Resume: the runner loads the run as stored. Completed nodes keep their artifacts and charges;
nodes found ``running`` were interrupted and run again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodeloom.artifacts.store import ArtifactStore
from nodeloom.db.engine import Database
from nodeloom.db.models import Artifact, utcnow
from nodeloom.engine.cache import cache_key
from nodeloom.engine.context import RunNodeContext
from nodeloom.engine.graph import Graph, GraphNode, validate_graph
from nodeloom.engine.states import FINISHED_NODE_STATES, NodeStatus, RunStatus, StaleTransition
from nodeloom.engine.submit import PreparedRun
from nodeloom.engine.transitions import Batch, NewArtifact, apply
from nodeloom.events.bus import EventBus
from nodeloom.metrics import Metrics
from nodeloom.nodes.base import ArtifactRef, InputValue, NodeFailure, Produced
from nodeloom.nodes.registry import Registry
from nodeloom.settings import Settings
from nodeloom.store import runs as run_store

log = logging.getLogger("nodeloom.engine")

_COUNTED = {
    "run.completed": "nodeloom_runs_completed_total",
    "run.failed": "nodeloom_runs_failed_total",
    "node.completed": "nodeloom_nodes_completed_total",
    "node.failed": "nodeloom_nodes_failed_total",
}
INLINE_WRITE_LIMIT = 64 * 1024  # smaller artifacts are written without a thread hop
PROGRESS_INTERVAL = 1.0


@dataclass
class ExecutorEnv:
    settings: Settings
    db: Database
    registry: Registry
    store: ArtifactStore
    bus: EventBus
    slots: asyncio.Semaphore  # nodes executing at once in this process
    executor: Executor
    metrics: Metrics


@dataclass
class Outcome:
    node_id: str
    status: NodeStatus
    at: datetime
    ref: ArtifactRef | None = None
    new_artifact: NewArtifact | None = None
    credits: int = 0
    cached: bool = False
    cache_key: str | None = None
    error: dict[str, Any] | None = None


def _ref(row: Artifact | NewArtifact, store: ArtifactStore) -> ArtifactRef:
    return ArtifactRef(
        artifact_id=row.id,
        content_type=row.content_type,
        sha256=row.sha256,
        size_bytes=row.size_bytes,
        path=store.path_for(row.sha256),
        width=row.width,
        height=row.height,
        duration_ms=row.duration_ms,
    )


class RunDriver:
    def __init__(self, env: ExecutorEnv, run_id: str, prepared: PreparedRun | None = None) -> None:
        self.env = env
        self.run_id = run_id
        self._prepared = prepared
        self.cancel_requested = asyncio.Event()
        self.draining = False
        self._commit_lock = asyncio.Lock()
        self._seq = 0
        self._tasks: dict[asyncio.Task[Outcome], str] = {}
        self._status: dict[str, NodeStatus] = {}
        self._refs: dict[str, ArtifactRef] = {}
        self._credits: dict[str, int] = {}
        self._first_error: dict[str, Any] | None = None
        self._last_progress: dict[str, float] = {}
        self._graph_problem = ""

    # -- loading ---------------------------------------------------------------------------

    def _adopt(self, prepared: PreparedRun) -> None:
        """A run this process just created: nothing has happened to it yet."""
        self.graph: Graph | None = prepared.graph
        self.account_id = prepared.account_id
        self.workflow_id = prepared.workflow_id
        self.run_input: dict[str, Any] | None = prepared.run_input
        self.use_cache = prepared.use_cache
        self.estimate = prepared.estimate
        self.created_at = prepared.created_at
        for node_id in prepared.graph.nodes:
            self._status[node_id] = NodeStatus.PENDING
            self._credits[node_id] = 0

    async def _load(self) -> bool:
        env = self.env
        if self._prepared is not None:
            self._adopt(self._prepared)
            return True
        async with env.db.read() as session:
            run = await run_store.by_id(session, self.run_id)
            if run is None or run.status != RunStatus.RUNNING:
                return False
            nodes = await run_store.node_runs(session, self.run_id)
            artifacts = await run_store.artifacts_by_id(
                session, [n.artifact_id for n in nodes if n.artifact_id]
            )
            self._seq = await run_store.last_seq(session, self.run_id)
        checked = validate_graph(run.graph_json, env.registry, env.settings)
        self.graph = None
        if isinstance(checked, list):
            self._graph_problem = "; ".join(f"{p.pointer}: {p.message}" for p in checked[:3])
        else:
            self.graph = checked
        self.account_id = run.account_id
        self.workflow_id = run.workflow_id
        self.run_input = run.input
        self.use_cache = run.use_cache
        self.estimate = run.estimated_credits
        self.created_at = run.created_at
        if run.cancel_requested:
            self.cancel_requested.set()
        for node in nodes:
            self._status[node.node_id] = NodeStatus(node.status)
            self._credits[node.node_id] = node.credits_used
            if node.artifact_id and node.artifact_id in artifacts:
                self._refs[node.node_id] = _ref(artifacts[node.artifact_id], env.store)
            if node.status == NodeStatus.FAILED and self._first_error is None:
                self._first_error = {**(node.error or {}), "node_id": node.node_id}
        return True

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        if not await self._load():
            return
        now = utcnow()
        batch = self._batch()
        if self._seq == 0:
            batch.event("run.started", now, None, estimated_credits=self.estimate)
        interrupted = [n for n, s in self._status.items() if s == NodeStatus.RUNNING]
        if interrupted:
            batch.reset_nodes(interrupted)
            for node_id in interrupted:
                self._status[node_id] = NodeStatus.PENDING
        if self.graph is None:
            await self._fail_unrunnable(batch, now)
            return
        try:
            await self._loop(batch)
        finally:
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _loop(self, batch: Batch) -> None:
        cancel_wait: asyncio.Future[Any] = asyncio.ensure_future(self.cancel_requested.wait())
        try:
            while True:
                if self.cancel_requested.is_set():
                    await self._cancel(batch)
                    return
                started = self._schedule(batch)
                finished = batch.run_end is not None
                await self._commit(batch)
                for node_id in started:
                    task = asyncio.create_task(self._execute(node_id), name=f"node:{node_id}")
                    self._tasks[task] = node_id
                if finished or not self._tasks:
                    return
                waiting: list[asyncio.Future[Any]] = [*self._tasks, cancel_wait]
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                batch = self._batch()
                for task in list(self._tasks):
                    if task in done:
                        self._tasks.pop(task)
                        self._record(batch, task.result())
        finally:
            cancel_wait.cancel()

    def _batch(self) -> Batch:
        return Batch(self.run_id, self.workflow_id, self.account_id)

    def _record(self, batch: Batch, outcome: Outcome) -> None:
        node_id = outcome.node_id
        self._status[node_id] = outcome.status
        if outcome.status == NodeStatus.COMPLETED:
            assert outcome.ref is not None
            self._refs[node_id] = outcome.ref
            self._credits[node_id] = outcome.credits
            batch.complete_node(
                node_id,
                outcome.at,
                artifact_id=outcome.ref.artifact_id,
                new_artifact=outcome.new_artifact,
                credits=outcome.credits,
                cached=outcome.cached,
                cache_key=outcome.cache_key,
            )
            return
        error = outcome.error or {"code": "node_failed", "message": "the node failed"}
        batch.fail_node(node_id, outcome.at, error)
        if self._first_error is None:
            self._first_error = {**error, "node_id": node_id}
        assert self.graph is not None
        skipped = self._descendants(node_id)
        for skipped_id in skipped:
            self._status[skipped_id] = NodeStatus.SKIPPED
        batch.skip_nodes(skipped, outcome.at, because=node_id)

    def _descendants(self, node_id: str) -> list[str]:
        assert self.graph is not None
        found: list[str] = []
        stack = list(self.graph.downstream[node_id])
        seen: set[str] = set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            if self._status[current] == NodeStatus.PENDING:
                found.append(current)
            stack.extend(self.graph.downstream[current])
        order = {n: i for i, n in enumerate(self.graph.order)}
        return sorted(found, key=order.__getitem__)

    def _schedule(self, batch: Batch) -> list[str]:
        """Mark ready nodes started (within the per-run limit); end the run when all ended."""
        graph = self.graph
        assert graph is not None
        running = sum(1 for s in self._status.values() if s == NodeStatus.RUNNING)
        # Draining for shutdown: finish what runs, start nothing new.
        room = 0 if self.draining else self.env.settings.max_concurrent_nodes_per_run - running
        started: list[str] = []
        now = utcnow()
        for node_id in graph.order:
            if room <= 0:
                break
            if self._status[node_id] != NodeStatus.PENDING:
                continue
            sources = graph.inputs[node_id].values()
            if all(self._status[s] == NodeStatus.COMPLETED for srcs in sources for s in srcs):
                self._status[node_id] = NodeStatus.RUNNING
                batch.start_node(node_id, now)
                started.append(node_id)
                room -= 1
        if not started and all(s in FINISHED_NODE_STATES for s in self._status.values()):
            self._finish(batch, now)
        return started

    def _finish(self, batch: Batch, now: datetime, error: dict[str, Any] | None = None) -> None:
        error = error or self._first_error
        status = RunStatus.FAILED if error is not None else RunStatus.COMPLETED
        used = sum(self._credits.values())
        batch.finish_run(
            status,
            now,
            error,
            credits_used=used,
            release=max(0, self.estimate - used),
            duration_ms=int((now - self.created_at).total_seconds() * 1000),
        )

    async def _cancel(self, batch: Batch) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        now = utcnow()
        unfinished = [n for n, s in self._status.items() if s not in FINISHED_NODE_STATES]
        batch.cancel_nodes(unfinished, now)
        for node_id in unfinished:
            self._status[node_id] = NodeStatus.CANCELLED
        self._finish(
            batch, now, {"code": "cancelled", "message": "the run was cancelled", "node_id": None}
        )
        await self._commit(batch)

    async def _fail_unrunnable(self, batch: Batch, now: datetime) -> None:
        unfinished = [n for n, s in self._status.items() if s not in FINISHED_NODE_STATES]
        batch.cancel_nodes(unfinished, now)
        for node_id in unfinished:
            self._status[node_id] = NodeStatus.CANCELLED
        message = f"the run's graph no longer validates: {self._graph_problem}"
        self._finish(batch, now, {"code": "invalid_graph", "message": message, "node_id": None})
        await self._commit(batch)

    # -- committing ------------------------------------------------------------------------

    async def _commit(self, batch: Batch) -> None:
        if not batch:
            return
        async with self._commit_lock:
            next_seq = self._seq + 1
            events = await self.env.db.run_write(lambda conn: apply(conn, batch, next_seq))
            self._seq += len(events)
            await self.env.bus.publish(events)
        metrics = self.env.metrics
        for event in events:
            if event.type in _COUNTED:
                metrics.inc(_COUNTED[event.type], help_="Finished runs and nodes by type.")

    async def _progress(self, node_id: str, fraction: float) -> None:
        now = time.monotonic()
        if now - self._last_progress.get(node_id, 0.0) < PROGRESS_INTERVAL and fraction < 1.0:
            return
        self._last_progress[node_id] = now
        batch = self._batch()
        batch.event("node.progress", utcnow(), node_id, progress=round(fraction, 4))
        try:
            await self._commit(batch)
        except StaleTransition:
            raise
        except Exception:  # progress is advisory: never fail a node over it
            log.warning("could not record progress of %s/%s", self.run_id, node_id, exc_info=True)

    # -- executing one node ----------------------------------------------------------------

    def _inputs(self, node: GraphNode) -> dict[str, InputValue]:
        assert self.graph is not None
        values: dict[str, InputValue] = {}
        for spec_input in node.node.spec.inputs:
            sources = self.graph.inputs[node.id].get(spec_input.name, [])
            refs = [self._refs[s] for s in sources]
            if spec_input.multiple:
                values[spec_input.name] = refs
            else:
                values[spec_input.name] = refs[0] if refs else None
        return values

    async def _execute(self, node_id: str) -> Outcome:
        env = self.env
        assert self.graph is not None
        node = self.graph.nodes[node_id]
        spec = node.node.spec
        inputs = self._inputs(node)
        hashes = {
            name: [v.sha256 for v in (value if isinstance(value, list) else [value])]
            for name, value in inputs.items()
            if value is not None
        }
        key = cache_key(spec, node.params, hashes, self.run_input)
        if key is not None and self.use_cache:
            async with env.db.read() as session:
                hit = await run_store.cached_artifact(session, self.account_id, key)
            if hit is not None and env.store.exists(hit.sha256):
                return Outcome(
                    node_id,
                    NodeStatus.COMPLETED,
                    utcnow(),
                    ref=_ref(hit, env.store),
                    cached=True,
                    cache_key=key,
                )
        ctx = RunNodeContext(
            run_id=self.run_id,
            node_id=node_id,
            account_id=self.account_id,
            run_input=self.run_input,
            settings=env.settings,
            executor=env.executor,
            report=lambda fraction: self._progress(node_id, fraction),
            scratch_root=env.settings.data_dir / "tmp",
        )
        try:
            async with env.slots:
                produced = await asyncio.wait_for(
                    node.node.run(ctx, node.params, inputs), env.settings.node_timeout_seconds
                )
            return await self._store(node, produced, key)
        except NodeFailure as exc:
            return self._failed(node_id, exc.code, exc.message)
        except TimeoutError:
            limit = env.settings.node_timeout_seconds
            return self._failed(node_id, "timeout", f"the node took longer than {limit:g} s")
        except Exception as exc:
            log.exception("node %s (%s) of run %s crashed", node_id, spec.type, self.run_id)
            return self._failed(node_id, "internal_error", f"the node failed: {type(exc).__name__}")
        finally:
            ctx.cleanup()

    def _failed(self, node_id: str, code: str, message: str) -> Outcome:
        return Outcome(
            node_id, NodeStatus.FAILED, utcnow(), error={"code": code, "message": message}
        )

    async def _store(self, node: GraphNode, produced: Produced, key: str | None) -> Outcome:
        env = self.env
        store = env.store
        limit = env.settings.max_artifact_bytes
        if produced.data is not None:
            if len(produced.data) > limit:
                raise NodeFailure(f"the output is larger than {limit} bytes", "output_too_large")
            if len(produced.data) <= INLINE_WRITE_LIMIT:
                blob = store.put_bytes(produced.data)
            else:
                blob = await asyncio.get_running_loop().run_in_executor(
                    env.executor, store.put_bytes, produced.data
                )
        elif produced.path is not None:
            if produced.path.stat().st_size > limit:
                raise NodeFailure(f"the output is larger than {limit} bytes", "output_too_large")
            blob = await asyncio.get_running_loop().run_in_executor(
                env.executor, store.put_file, produced.path
            )
        else:
            raise NodeFailure("the node produced no output", "no_output")
        artifact = NewArtifact(
            id=str(uuid.uuid4()),
            content_type=node.node.spec.output.content_type,
            size_bytes=blob.size_bytes,
            sha256=blob.sha256,
            width=produced.width,
            height=produced.height,
            duration_ms=produced.duration_ms,
        )
        return Outcome(
            node.id,
            NodeStatus.COMPLETED,
            utcnow(),
            ref=_ref(artifact, store),
            new_artifact=artifact,
            credits=node.node.charge_credits(node.params, produced.duration_ms),
            cache_key=key,
        )
