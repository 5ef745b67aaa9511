"""Accepting a run: one write transaction that holds the estimate and writes the run, its
nodes and its first event. Used by execute and by webhook triggers alike.

A run whose nodes are all instant (``NodeType.instant``: a text input, a template that only
substitutes) and few enough for one step is executed while it is accepted: its nodes run
before the transaction, through the same ``RunState`` and runner functions a driven run
uses, and the transaction then writes the acceptance and the whole execution together —
every node started and ended, the artifacts, the charges, the release and every event —
as one ``transitions.Batch`` that creates its run. The rows, events and ledger are those a
driven run writes; what differs is one commit instead of two and no driver. What happens
before the commit is computation: text outputs stay in memory until the transaction writes
them into their rows (ADR 0008), so a transaction that fails leaves nothing behind.

``Acceptor`` drives the acceptance; its parts are modules of their own: the request
(engine/run_request.py), its Idempotency-Key (engine/idempotency.py), the checked graph
(engine/graph_cache.py), and preparing and writing the new run (engine/new_run.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from nodeloom.db.engine import Database
from nodeloom.db.models import utcnow
from nodeloom.db.prepared import Prepared
from nodeloom.engine import look_ahead, media_lengths, prefix, stepper
from nodeloom.engine.dispatch.base import Dispatcher, Handover
from nodeloom.engine.executor import NodeExecutor, NodeTask, cached, still_stored
from nodeloom.engine.graph_cache import GraphCache
from nodeloom.engine.idempotency import REMEMBER, earlier_answer, key_row
from nodeloom.engine.known_outputs import KnownOutputs
from nodeloom.engine.look_ahead import Ahead
from nodeloom.engine.new_run import (
    CacheLookup,
    KnownGone,
    NewRunToWrite,
    StoredElsewhere,
    check_credentials,
    current_workflow,
    new_run,
    read_pinned,
    read_retry,
    write_accepted,
)
from nodeloom.engine.run_request import (
    ATTEMPTS,
    Accepted,
    RunRequest,
    TriggerStale,
    WorkflowVersion,
)
from nodeloom.engine.run_state import Outcome, RunState, artifact_info
from nodeloom.engine.stepper import INSTANT_PER_STEP, count_events, run_instant
from nodeloom.engine.transitions import (
    Batch,
    WorkflowChanged,
    created_alone,
)
from nodeloom.errors import (
    Conflict,
    ServiceUnavailable,
)
from nodeloom.events.bus import EventBus
from nodeloom.events.model import Event
from nodeloom.metrics import Metrics
from nodeloom.sdk._node import NeedsSandbox
from nodeloom.settings import Settings
from nodeloom.states import NodeStatus, RunStatus

T = TypeVar("T")


def _without_waiting(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end here, without an event loop: for one that never waits
    (each of its awaits is answered at once), such as a replay whose outcomes are all
    known, from inside a transaction's synchronous function."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coroutine.close()
    raise RuntimeError("a coroutine expected never to wait did wait")


def _queued_nodes(
    batch: Batch, state: RunState, kinds: Mapping[str, str] | None, alone: bool = False
) -> Handover:
    """A run being accepted, for its dispatcher: its row is not written yet (hence the
    account), and ``kinds`` are its credentials' kinds as the acceptance checked them."""
    return Handover(
        batch.run_id,
        state.with_status(NodeStatus.QUEUED),
        state.graph,
        state.account_id,
        kinds,
        alone,
    )


class Acceptor:
    """Accepts runs: the transaction above, then announcing the run and handing it to the
    dispatcher (unless it already ended). ``executor``: runs made only of instant nodes are
    executed while they are accepted — in every process, API-only replicas of a scaled-out
    fleet included (an instant node needs no sandbox); None accepts every run pending."""

    def __init__(
        self,
        *,
        settings: Settings,
        db: Database,
        graphs: GraphCache,
        bus: EventBus,
        dispatcher: Dispatcher,
        metrics: Metrics,
        executor: NodeExecutor | None,
        claimant: str,
    ) -> None:
        self.settings = settings
        self.db = db
        self.graphs = graphs
        self.bus = bus
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.executor = executor
        self.claimant = claimant  # who nodes executed at acceptance are claimed by
        # Acceptances in progress at once: under a flood of executes, the rest wait here
        # (cheaply) instead of all sharing the event loop with status polls.
        self.admission = asyncio.Semaphore(settings.max_concurrent_accepts)
        # Outputs this process saw stored: a run of only those is accepted without running
        # its nodes, in one statement on PostgreSQL (ADR 0029).
        self.known = KnownOutputs()

    async def accept(self, request: RunRequest) -> Accepted:
        if not self.dispatcher.accepting:
            raise ServiceUnavailable(
                "The server is shutting down; retry shortly.", headers={"Retry-After": "2"}
            )
        request = dataclasses.replace(request, driver=self.dispatcher.owner)
        ahead = Ahead()
        if look_ahead.applies(request):
            ahead = await look_ahead.look_ahead(self.db, self.graphs, request)
        elif request.idempotency_key is not None:
            ahead = Ahead(earlier=await earlier_answer(self.db, request))
        if ahead.earlier is not None:
            return Accepted(ahead.earlier, replayed=True)
        async with self.admission:
            use_known = True
            for _ in range(ATTEMPTS):
                workflow = ahead.workflow or await self._workflow(request)
                kinds = ahead.kinds
                if kinds is None:
                    kinds = await self._check_credentials(request, workflow)
                ahead = Ahead()  # read afresh if the acceptance must be tried again
                request = await self._with_lengths(request, workflow)
                run = await self._prepare(request, workflow, use_known)
                answer: dict[str, Any] = {
                    "run_id": run.batch.run_id,
                    "status": RunStatus.RUNNING.value,
                    "estimated_credits": run.state.estimate,
                }
                if request.retry_of is not None:
                    answer["retried_from"] = request.retry_of
                try:
                    state, batch, events, handed_over = await self._write(
                        request, run, answer, kinds
                    )
                except WorkflowChanged:
                    if request.webhook_as_read is not None:
                        # The webhook may have changed rather than the workflow: its trigger
                        # reads both again.
                        raise TriggerStale(request.webhook_id) from None
                    request = dataclasses.replace(request, workflow_version=None)
                    continue
                except KnownGone as gone:
                    self.known.forget(request.account_id, gone.keys)
                    use_known = False
                    continue
                except IntegrityError:
                    earlier = await self._earlier(request)
                    if earlier is None:
                        raise
                    return Accepted(earlier, replayed=True)
                break
            else:
                raise Conflict("The workflow was changed while the run was being accepted; retry.")
        self._remember(request.account_id, batch, run.lookup)
        stepper.committed(state, events)
        await self.bus.publish(events)
        count_events(self.metrics, events)
        if batch.run_end is None and not handed_over:
            await self.dispatcher.submit(batch.run_id, state)
        return Accepted(answer, replayed=False)

    async def _with_lengths(self, request: RunRequest, workflow: WorkflowVersion) -> RunRequest:
        """``request`` with the lengths of the media files that bound a node's price, read
        only when the graph has such a node (a retry holds its params' bounds)."""
        fed = workflow.graph.length_feeds
        if not fed or request.retry_of is not None:
            return request
        found = await self.db.read(
            lambda c: media_lengths.lengths(c, request.account_id, fed, request.run_input)
        )
        return dataclasses.replace(request, media_lengths=found)

    async def _check_credentials(
        self, request: RunRequest, workflow: WorkflowVersion
    ) -> dict[str, str]:
        return await check_credentials(self.db, request.account_id, workflow.graph)

    async def _earlier(self, request: RunRequest) -> dict[str, Any] | None:
        if request.idempotency_key is None:
            return None
        return await earlier_answer(self.db, request)

    async def _workflow(self, request: RunRequest) -> WorkflowVersion:
        if request.retry_of is not None:
            return await self.db.read(functools.partial(read_retry, request, self.graphs))
        if request.pinned_version is not None:
            return await self.db.read(functools.partial(read_pinned, request, self.graphs))
        if request.workflow_version is not None:
            graph = self.graphs.peek(request.workflow_id, request.workflow_version)
            if graph is not None:
                return WorkflowVersion(request.workflow_id, request.workflow_version, graph)
        return await current_workflow(self.db, request.account_id, request.workflow_id, self.graphs)

    def _remember(self, account_id: str, batch: Batch, lookup: CacheLookup | None) -> None:
        """The outputs a committed acceptance wrote or found stored, as known stored."""
        for end in batch.ended:
            if end.cache_key is not None and end.new_artifact is not None:
                self.known.remember(account_id, end.cache_key, end.new_artifact)
        if lookup is not None:
            for key, row in lookup.found.items():
                if row.data is not None:
                    self.known.remember(account_id, key, artifact_info(row))

    async def _prepare(
        self, request: RunRequest, workflow: WorkflowVersion, use_known: bool = False
    ) -> NewRunToWrite:
        """The run to write: executed already when every node is instant and they fit in
        one step, else as accepted (pending). The outputs of an executed run may already be
        stored (its cache keys): the transaction that writes it looks them up
        (``write_accepted``). ``use_known``: nodes whose outputs this process knows stored
        are recorded as those cache hits instead of executed (``_known_or_executed``)."""
        state, batch = new_run(request, workflow, work_limit=self.settings.run_max_work)
        graph = workflow.graph
        if self.executor is not None and request.driver is None and prefix.applies(graph):
            return await self._with_prefix(request, workflow, state, batch)
        if self.executor is None or not graph.all_instant or len(graph.nodes) > INSTANT_PER_STEP:
            return NewRunToWrite(state, batch)
        owner = request.driver or self.claimant
        produce = self._known_or_executed if use_known and state.use_cache else self._produce
        try:
            outcomes = await self._execute_now(state, batch, owner, produce)
        except NeedsSandbox:
            # A node turned out not to be instant (a template that needs Jinja after all):
            # the run is accepted as usual and its driver executes it.
            return NewRunToWrite(*new_run(request, workflow))
        if outcomes is None:  # an input too large for the event loop: the same
            return NewRunToWrite(*new_run(request, workflow))
        return self._looked_up(request, workflow, state, batch, outcomes, self._execute_now)

    async def _write(
        self,
        request: RunRequest,
        run: NewRunToWrite,
        answer: dict[str, Any],
        kinds: Mapping[str, str] | None = None,
    ) -> tuple[RunState, Batch, list[Event], bool]:
        """``write_accepted`` in one transaction, with the run handed to its executor by
        that same transaction when the dispatcher can (queue jobs: ``handover``; the last
        element says so); when some outputs it found stored live in the artifact store
        rather than in their rows, they are checked there first (out of the transaction)
        and the run is written again reusing those still there."""

        def write(
            conn: Connection, run: NewRunToWrite
        ) -> tuple[RunState, Batch, list[Event], bool]:
            def hand_over(state: RunState, batch: Batch) -> None:
                # The run's queued nodes, handed over by the batch's own statement when the
                # dispatcher takes them that way (queue jobs).
                batch.also = []
                if batch.run_end is None and state.graph.nodes:
                    statement = self.dispatcher.handover(conn, _queued_nodes(batch, state, kinds))
                    if statement is not None:
                        batch.also = [statement]

            state, batch, events = write_accepted(conn, request, run, answer, hand_over)
            if request.on_accept is not None:
                request.on_accept(conn, batch.run_id)
            return state, batch, events, bool(batch.also)

        alone = await self._write_alone(request, run, answer, kinds)
        if alone is not None:
            return alone
        try:
            return await self.db.write(functools.partial(write, run=run))
        except StoredElsewhere as found:
            assert run.lookup is not None
            hits = await self._still_stored(run.lookup.outcomes, found.rows)
            gone = [
                key
                for key in run.lookup.known_hits()
                if all(h.cache_key != key for h in hits.values())
            ]
            if gone:
                raise KnownGone(gone) from None
            state, batch = run.lookup.replay(hits) if hits else (run.state, run.batch)
            return await self.db.write(functools.partial(write, run=NewRunToWrite(state, batch)))

    async def _write_alone(
        self,
        request: RunRequest,
        run: NewRunToWrite,
        answer: dict[str, Any],
        kinds: Mapping[str, str] | None = None,
    ) -> tuple[RunState, Batch, list[Event], bool] | None:
        """The acceptance as one statement instead of a transaction, on PostgreSQL
        (``transitions.created_alone``: one round trip instead of five or more): a run that
        ends while it is accepted, or one whose queued nodes the dispatcher hands over by
        that statement (queue jobs), with its Idempotency-Key if it has one (ADR 0035).
        None when it is not written that way: the transaction then writes it, or tells why
        it cannot be (nothing was written) — a key already stored (a replay, or an expired
        one the transaction deletes first) included."""
        engine = self.db.engine
        if engine is None or request.on_accept is not None:
            return None  # an app's check runs in the acceptance transaction
        state, batch = run.state, run.batch
        also: list[tuple[Prepared, Any]] = []
        if batch.run_end is None:
            if not state.graph.nodes:
                return None
            handed = self.dispatcher.handover(None, _queued_nodes(batch, state, kinds, alone=True))
            if handed is None:
                return None  # this dispatcher is handed the run after the commit
            also.append(handed)
        if request.idempotency_key is not None:
            also.append((REMEMBER, key_row(request, batch.run_id, answer, state.created_at)))
        keys = run.lookup.keys if run.lookup is not None else []
        hits = run.lookup.known_hits() if run.lookup is not None else {}
        alone = created_alone(engine.dialect, batch, state.seq + 1, keys, hits, also)
        if alone is None:
            return None
        sql, values, events = alone
        try:
            row = await self.db.fetch_row_alone(sql, *values)
        except IntegrityError:
            # The balance fell short of the hold between the statement's start and its
            # update of the balance's row, or the Idempotency-Key is stored already (the
            # statement undid itself): the transaction does what it always does.
            return None
        if row is None or row[0] != 1:
            return None
        return state, batch, events, batch.run_end is None

    async def _with_prefix(
        self, request: RunRequest, workflow: WorkflowVersion, state: RunState, batch: Batch
    ) -> NewRunToWrite:
        """A run for queue workers with its instant prefix executed now (engine/prefix.py,
        ADR 0018), outputs already stored reused as a worker's job would; the run as
        accepted before when the prefix cannot be executed here."""
        try:
            outcomes = await prefix.execute_prefix(state, batch, self.claimant, self._produce)
        except NeedsSandbox:
            return NewRunToWrite(*new_run(request, workflow))
        if outcomes is None:
            return NewRunToWrite(*new_run(request, workflow))
        return self._looked_up(request, workflow, state, batch, outcomes, prefix.execute_prefix)

    def _looked_up(
        self,
        request: RunRequest,
        workflow: WorkflowVersion,
        state: RunState,
        batch: Batch,
        outcomes: dict[str, Outcome],
        execute: Callable[
            [RunState, Batch, str, Callable[[NodeTask], Awaitable[Outcome]]],
            Coroutine[Any, Any, dict[str, Outcome] | None],
        ],
    ) -> NewRunToWrite:
        """The run executed (whole, or its prefix) by ``execute``, with the cache look-up
        of its outputs left to the transaction that writes it (``write_accepted``)."""
        keys = [o.cache_key for o in outcomes.values() if o.cache_key and not o.error]
        if not state.use_cache or not keys:
            return NewRunToWrite(state, batch)
        owner = request.driver or self.claimant

        def replay(hits: dict[str, Outcome]) -> tuple[RunState, Batch]:
            """The same run (the same id) with the nodes of ``hits`` reusing those outputs:
            the state moves exactly as before; only those nodes' artifacts and charges
            differ. Runs without waiting (every outcome is known), so inside a transaction."""
            again, again_batch = new_run(request, workflow, state.run_id)

            async def known(task: NodeTask) -> Outcome:
                node_id = task.node.id
                return hits.get(node_id) or outcomes[node_id]

            if _without_waiting(execute(again, again_batch, owner, known)) is None:
                # Not expected (a hit is the same bytes as the output it replaces), but a run
                # half executed here must not be handed to a driver: accept it as usual.
                return new_run(request, workflow, state.run_id)
            return again, again_batch

        return NewRunToWrite(state, batch, CacheLookup(keys, outcomes, replay))

    async def _produce(self, task: NodeTask) -> Outcome:
        assert self.executor is not None
        return await self.executor.execute_instant(task)

    async def _known_or_executed(self, task: NodeTask) -> Outcome:
        """The node as a cache hit of the output this process knows stored for its key, as
        the output cache documents (not run); else executed. What is known is checked by
        the statement or transaction that writes the run (``created_alone``,
        ``write_accepted``)."""
        assert self.executor is not None
        key = self.executor.key_of(task)
        known = self.known.get(task.account_id, key) if key is not None else None
        if known is not None:
            return Outcome(
                task.node.id, NodeStatus.COMPLETED, utcnow(), known, cached=True, cache_key=key
            )
        return await self.executor.execute_instant_keyed(task, key)

    async def _execute_now(
        self,
        state: RunState,
        batch: Batch,
        owner: str,
        produce: Callable[[NodeTask], Awaitable[Outcome]],
    ) -> dict[str, Outcome] | None:
        """Every node of the run, now, recorded in ``batch`` by the runner's own functions;
        their outcomes, or None when some node cannot run on the event loop."""
        limit = self.settings.max_concurrent_nodes_per_run
        outcomes: dict[str, Outcome] = {}

        async def execute(node_id: str) -> Outcome:
            outcome = outcomes[node_id] = await produce(NodeTask.of(state, node_id))
            return outcome

        def advance() -> list[str]:
            room = max(0, limit - state.count(NodeStatus.RUNNING))
            return stepper.advance(state, batch, utcnow(), owner, room)

        left = await run_instant(state, batch, advance(), execute, advance, lambda: False)
        return outcomes if not left and batch.run_end is not None else None

    async def _still_stored(
        self, outcomes: dict[str, Outcome], rows: dict[str, Any]
    ) -> dict[str, Outcome]:
        """The outcomes that reuse a stored artifact of ``rows`` (by cache key) whose bytes
        are still there, by node."""
        assert self.executor is not None
        store = self.executor.env.store
        found: dict[str, Outcome] = {}
        for node_id, outcome in outcomes.items():
            row = rows.get(outcome.cache_key or "")
            if row is not None and await still_stored(store, row):
                found[node_id] = cached(node_id, row, row.cache_key)
        return found
