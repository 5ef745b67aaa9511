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
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from nodeloom.db.engine import Database
from nodeloom.db.models import IdempotencyKey, Run, Workflow, utcnow
from nodeloom.db.prepared import Prepared
from nodeloom.engine import batches, prefix, retry, stepper, subworkflows, work
from nodeloom.engine.dispatch.base import Dispatcher
from nodeloom.engine.executor import NodeExecutor, NodeTask, cached, still_stored
from nodeloom.engine.graph import Children, Graph, unavailable_nodes, validate_graph
from nodeloom.engine.known_outputs import KnownOutputs
from nodeloom.engine.retry import RetrySource
from nodeloom.engine.run_state import Outcome, RunState, artifact_info
from nodeloom.engine.stepper import INSTANT_PER_STEP, count_events, run_instant
from nodeloom.engine.transitions import (
    Batch,
    NewRun,
    WebhookAsRead,
    WorkflowChanged,
    created_alone,
)
from nodeloom.errors import (
    Conflict,
    FieldError,
    IdempotencyKeyReused,
    InvalidGraph,
    InvalidRequest,
    NotFound,
    ServiceUnavailable,
)
from nodeloom.events.bus import EventBus
from nodeloom.events.model import Event, EventType
from nodeloom.ids import uuid7
from nodeloom.metrics import Metrics
from nodeloom.nodes.batch import too_many
from nodeloom.nodes.registry import Registry
from nodeloom.sdk._node import NeedsSandbox
from nodeloom.settings import Settings
from nodeloom.states import NodeStatus, RunStatus
from nodeloom.store import artifacts as artifact_store
from nodeloom.store import credentials as credential_store

T = TypeVar("T")


class GraphCache:
    """Checked graphs by (workflow id, updated_at): execute validates a stored graph once,
    not on every run (the catalog is fixed for the life of the process)."""

    def __init__(self, registry: Registry, settings: Settings, size: int = 512) -> None:
        self._registry = registry
        self._settings = settings
        self._size = size
        self._items: OrderedDict[tuple[str, datetime], Graph] = OrderedDict()

    def peek(self, workflow_id: str, updated_at: datetime) -> Graph | None:
        key = (workflow_id, updated_at)
        graph = self._items.get(key)
        if graph is not None:
            self._items.move_to_end(key)
        return graph

    def children(
        self, conn: Connection, account_id: str, graph_json: Any, workflow_id: str | None
    ) -> Children:
        """The sub-workflows ``graph_json`` names, resolved (engine/subworkflows.py)."""
        return subworkflows.resolve(
            conn, account_id, graph_json, self._registry, self._settings, workflow_id
        )

    def get(
        self,
        workflow_id: str,
        updated_at: datetime,
        graph_json: Any,
        children: Children | None = None,
    ) -> Graph:
        if children:
            # Its checked graph depends on its children's versions too: never cached, so a
            # child saved since is seen at once (its run resolves them again anyway).
            return self.check(graph_json, children)
        graph = self.peek(workflow_id, updated_at)
        if graph is not None:
            return graph
        checked = self.check(graph_json)
        self._items[(workflow_id, updated_at)] = checked
        if len(self._items) > self._size:
            self._items.popitem(last=False)
        return checked

    def check(self, graph_json: Any, children: Children | None = None) -> Graph:
        """``graph_json`` checked against the catalog and what this server can run now
        (InvalidGraph otherwise), without keeping it (a retry's graph is its own)."""
        checked = validate_graph(graph_json, self._registry, self._settings, children)
        if isinstance(checked, list):
            cycle = next((p for p in checked if subworkflows.is_cycle(p.message)), None)
            if cycle is not None:
                raise InvalidGraph(
                    f"The stored workflow cannot run: {cycle.message}.", errors=checked
                )
            raise InvalidGraph(
                "The stored workflow no longer validates against this server's node catalog.",
                errors=checked,
            )
        # Never cached: such a workflow is checked, and refused, on every execute.
        unavailable = unavailable_nodes(graph_json, self._registry, self._settings)
        if unavailable:
            raise InvalidGraph(
                "The workflow uses nodes that cannot run on this server now: "
                + "; ".join(p.message for p in unavailable),
                errors=unavailable,
            )
        return checked


_RUNS = cast(sa.Table, Run.__table__)
_WORKFLOWS = cast(sa.Table, Workflow.__table__)
_IDEMPOTENCY = cast(sa.Table, IdempotencyKey.__table__)
_WORKFLOW_VERSION = Prepared(
    sa.select(_WORKFLOWS.c.id, _WORKFLOWS.c.updated_at).where(
        _WORKFLOWS.c.id == sa.bindparam("id"),
        _WORKFLOWS.c.account_id == sa.bindparam("account"),
        _WORKFLOWS.c.deleted_at.is_(None),
    )
)
_WORKFLOW_GRAPH = Prepared(
    sa.select(_WORKFLOWS.c.graph_json).where(_WORKFLOWS.c.id == sa.bindparam("id"))
)
_EARLIER = Prepared(
    sa.select(
        _IDEMPOTENCY.c.response,
        _IDEMPOTENCY.c.created_at,
        _IDEMPOTENCY.c.request_hash,
        _RUNS.c.workflow_id,
    )
    .join(_RUNS, _RUNS.c.id == _IDEMPOTENCY.c.run_id)
    .where(
        _IDEMPOTENCY.c.account_id == sa.bindparam("account"),
        _IDEMPOTENCY.c.key == sa.bindparam("key"),
    )
)
_FORGET_EXPIRED = Prepared(
    sa.delete(_IDEMPOTENCY).where(
        _IDEMPOTENCY.c.account_id == sa.bindparam("account"),
        _IDEMPOTENCY.c.key == sa.bindparam("key"),
        _IDEMPOTENCY.c.created_at < sa.bindparam("cutoff", type_=_IDEMPOTENCY.c.created_at.type),
    )
)
_REMEMBER = Prepared(sa.insert(_IDEMPOTENCY))
IDEMPOTENCY_TTL = timedelta(hours=24)
# Reading the workflow and creating its run are two transactions; if the workflow is saved
# in between, the run is prepared again from the new version (a few times at most).
ATTEMPTS = 3


@dataclass(frozen=True)
class RunRequest:
    account_id: str
    workflow_id: str
    run_input: dict[str, Any] | None
    use_cache: bool
    plan: str
    webhook_id: str | None = None
    idempotency_key: str | None = None
    # "api", "webhook" or "editor": shown in the run lists, decides nothing else.
    trigger: str = "api"
    # The process that will drive the run (the embedded mode), or None: queue workers run
    # its nodes one by one, and its roots are queued at once.
    driver: str | None = None
    # The workflow's updated_at when the caller has already read it (a webhook's look-up):
    # its checked graph may then come from the cache without reading the workflow again.
    workflow_version: datetime | None = None
    # A retry (engine/retry.py): the failed or cancelled run it retries, and the params it
    # changes (node id -> params). The input is the retried run's.
    retry_of: str | None = None
    retry_params: dict[str, dict[str, Any]] | None = None
    # The retry runs the workflow as saved now rather than the retried run's graph.
    retry_current: bool = False
    # Where the run's record is POSTed, signed, when it ends (engine/callbacks.py).
    callback_url: str | None = None
    # A sub-workflow's run (engine/subworkflows.py): the run and Workflow node starting it.
    parent_run_id: str | None = None
    parent_node_id: str | None = None
    # A webhook trigger: the webhook as the trigger checked it, checked again by the
    # acceptance transaction (TriggerStale when it changed).
    webhook_as_read: WebhookAsRead | None = None


class TriggerStale(Exception):
    """The webhook of a trigger changed since the trigger read it (``webhook_as_read``): the
    trigger reads it again and is answered as the webhook now is (api/routes/webhooks.py).
    Never reaches a client."""


@dataclass(frozen=True)
class Accepted:
    answer: dict[str, Any]
    replayed: bool


@dataclass(frozen=True)
class WorkflowVersion:
    id: str
    updated_at: datetime
    graph: Graph
    retry: RetrySource | None = None


def request_hash(request: RunRequest) -> str:
    """What an Idempotency-Key promises to repeat: this workflow, this input, this cache."""
    material: dict[str, Any] = {
        "workflow_id": request.workflow_id,
        "input": request.run_input,
        "cache": request.use_cache,
    }
    if request.retry_of is not None:
        material["retry_of"] = request.retry_of
        material["params"] = request.retry_params or {}
        if request.retry_current:  # absent otherwise: earlier keys keep their hash
            material["graph"] = "current"
    if request.callback_url is not None:  # absent otherwise: earlier keys keep their hash
        material["callback_url"] = request.callback_url
    return hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()


def earlier_answer(conn: Connection, request: RunRequest) -> dict[str, Any] | None:
    """The stored answer for the request's Idempotency-Key used in the last 24 hours, if
    any. A key reused for a different request (another workflow, another input) is refused
    (422, as Stripe does), never answered with the first request's run."""
    row = _EARLIER.run(
        conn, {"account": request.account_id, "key": request.idempotency_key}
    ).first()
    if row is None or row.created_at < utcnow() - IDEMPOTENCY_TTL:
        return None
    if row.workflow_id != request.workflow_id or (
        row.request_hash is not None and row.request_hash != request_hash(request)
    ):
        raise IdempotencyKeyReused(
            "This Idempotency-Key was already used for a different request (another workflow "
            "or another body); use a new key for a new request."
        )
    answer: dict[str, Any] = row.response
    return answer


def read_workflow(
    conn: Connection, account_id: str, workflow_id: str, graphs: GraphCache
) -> WorkflowVersion:
    """The workflow's current version and checked graph (its JSON is read only when the
    cache does not hold that version)."""
    row = _WORKFLOW_VERSION.run(conn, {"id": workflow_id, "account": account_id}).first()
    if row is None:
        raise NotFound("No such workflow.")
    graph = graphs.peek(row.id, row.updated_at)
    if graph is None:
        graph_json = _WORKFLOW_GRAPH.run(conn, {"id": row.id}).scalar_one()
        children = graphs.children(conn, account_id, graph_json, row.id)
        graph = graphs.get(row.id, row.updated_at, graph_json, children)
    return WorkflowVersion(row.id, row.updated_at, graph)


def batch_items(graph: Graph, run_input: Mapping[str, Any] | None) -> dict[str, int]:
    """The item count of each ForEach that the run's input data tells before the run (a
    TextInput straight into it), checked against its bound: what execute holds, and what
    an estimate with that input answers."""
    items = batches.count_at_submit(graph, run_input)
    _check_batch_sizes(graph, items)
    return items


def _check_batch_sizes(graph: Graph, items: dict[str, int]) -> None:
    """A batch known before the run to exceed its bound is refused (400), not started."""
    problems = [
        FieldError("/input", f"ForEach {node_id}: {too_many(count, region.max_items)}")
        for node_id, region in graph.batches.regions.items()
        if (count := items.get(node_id, 0)) > region.max_items
    ]
    if problems:
        raise InvalidRequest(
            "The run's input makes a batch larger than allowed: "
            + "; ".join(p.message for p in problems),
            errors=problems,
        )


def _check_work(graph: Graph, limit: int) -> None:
    """A run known before it starts to make more than ``run_max_work`` node and child runs
    is refused (400), not started (engine/work.py)."""
    why = work.over(limit, 0, work.known_work(graph))
    if why is not None:
        raise InvalidRequest(f"The run is too large: {why}.")


def read_retry(request: RunRequest, graphs: GraphCache, conn: Connection) -> WorkflowVersion:
    """The retried run's graph (with the retry's params) and the artifacts it reuses."""
    assert request.retry_of is not None
    planned = retry.plan(
        conn,
        request.account_id,
        request.workflow_id,
        request.retry_of,
        request.retry_params,
        request.retry_current,
        lambda graph_json: graphs.check(
            graph_json,
            graphs.children(conn, request.account_id, graph_json, request.workflow_id),
        ),
    )
    return WorkflowVersion(
        planned.workflow_id, planned.workflow_version, planned.graph, planned.source
    )


def new_run(
    request: RunRequest,
    workflow: WorkflowVersion,
    run_id: str | None = None,
    work_limit: int | None = None,
) -> tuple[RunState, Batch]:
    """A run of ``workflow`` as accepting it leaves it: a batch that creates the run with
    its nodes pending (roots queued when queue workers run it) and its first event. A
    retry's reused nodes are completed in it at once, uncharged (engine/retry.py): its
    roots are the nodes they alone feed, and its estimate what the other nodes cost.
    ``run_id``: the same run prepared again (its answer already names it). ``work_limit``:
    refuse a run known to make more node and child runs than that (engine/work.py)."""
    run_id = run_id or uuid7()
    now = utcnow()
    drawn = workflow.graph
    source = workflow.retry
    reuse = source.reuse if source is not None else {}
    run_input = source.run_input if source is not None else request.run_input
    items: dict[str, int] = {}
    graph = drawn
    if drawn.batches:
        # A ForEach's items are added to the run when it completes (engine/batches.py);
        # their count, when the input data tells it now, is checked and priced now.
        items = batch_items(drawn, run_input)
        graph = batches.expand(drawn, dict.fromkeys(drawn.batches.regions))
    if work_limit is not None:
        _check_work(batches.expand(drawn, items) if items else drawn, work_limit)
    roots: frozenset[str] = frozenset()
    if request.driver is None:
        # A root has no input left to wait for: every node feeding it is reused (a plain
        # run reuses nothing, so its roots are the nodes without inputs).
        roots = frozenset(
            n
            for n in graph.nodes
            if n not in reuse and all(s in reuse for ss in graph.inputs[n].values() for s in ss)
        )
    # Reused nodes are never charged again (a retry reuses no node of a batch region).
    estimate = drawn.estimate_credits(items) - sum(
        drawn.nodes[n].node.estimate_credits(drawn.nodes[n].params) for n in reuse
    )
    state = RunState(
        run_id=run_id,
        account_id=request.account_id,
        workflow_id=workflow.id,
        graph=graph,
        run_input=run_input,
        use_cache=request.use_cache,
        estimate=estimate,
        created_at=now,
        plan=request.plan,
        status={n: NodeStatus.QUEUED if n in roots else NodeStatus.PENDING for n in graph.nodes},
    )
    batch = state.batch()
    batch.created = NewRun(
        webhook_id=request.webhook_id,
        trigger=request.trigger,
        use_cache=request.use_cache,
        estimate=estimate,
        created_at=now,
        driver=request.driver,
        run_input=run_input,
        workflow_version=workflow.updated_at,
        nodes=tuple((n.id, n.type) for n in graph.nodes.values()),
        queued=roots,
        retried_from=source.retried_from if source is not None else None,
        graph_json=source.graph_json if source is not None else None,
        callback_url=request.callback_url,
        parent_run_id=request.parent_run_id,
        parent_node_id=request.parent_node_id,
        webhook_as_read=request.webhook_as_read,
    )
    started: dict[str, Any] = {"estimated_credits": estimate}
    if source is not None:
        started["retried_from"] = source.retried_from
    if request.parent_run_id is not None:
        started["parent_run_id"] = request.parent_run_id
    batch.event(EventType.RUN_STARTED, now, None, **started)
    for node_id in graph.order:
        if node_id in reuse:
            outcome = Outcome(node_id, NodeStatus.COMPLETED, now, reuse[node_id], cached=True)
            state.record(batch, outcome)
    if reuse and len(reuse) == len(graph.nodes):
        state.finish(batch, now)  # nothing left to run (a run cancelled as it completed)
    return state, batch


def write_run(
    conn: Connection, request: RunRequest, state: RunState, batch: Batch, answer: dict[str, Any]
) -> list[Event]:
    """The acceptance transaction: the batch (run, nodes, hold, maybe the whole execution)
    and the Idempotency-Key. A concurrent request with the same key that commits first makes
    the key's insert fail (unique violation) and this whole transaction roll back; the caller
    then replays the winner's answer. The run's log is empty until now: its events are
    numbered from 1 like any step's, from the state's seq (``stepper.write``)."""
    events = stepper.write(conn, state, batch)
    key = request.idempotency_key
    if key is not None:
        _FORGET_EXPIRED.run(
            conn,
            {"account": request.account_id, "key": key, "cutoff": utcnow() - IDEMPOTENCY_TTL},
        )
        _REMEMBER.run(
            conn,
            {
                "account_id": request.account_id,
                "key": key,
                "run_id": batch.run_id,
                "response": answer,
                "created_at": events[0].ts,
                "request_hash": request_hash(request),
            },
        )
    return events


@dataclass(frozen=True)
class CacheLookup:
    """The cache keys of a run executed while accepted, looked up by the transaction that
    writes it; ``replay`` makes the same run reusing what was found. Outcomes may be cache
    hits already, outputs known stored (engine/known_outputs.py); ``found``: the rows the
    look-up found, by key, once it ran."""

    keys: list[str]
    outcomes: dict[str, Outcome]
    replay: Callable[[dict[str, Outcome]], tuple[RunState, Batch]]
    found: dict[str, Any] = dataclasses.field(default_factory=dict)

    def known_hits(self) -> dict[str, str]:
        """The artifact each outcome known stored reuses, by cache key."""
        return {
            o.cache_key: o.artifact.id
            for o in self.outcomes.values()
            if o.cached and o.cache_key and o.artifact is not None
        }


@dataclass(frozen=True)
class NewRunToWrite:
    state: RunState
    batch: Batch
    lookup: CacheLookup | None = None


class KnownGone(Exception):
    """An output known stored (engine/known_outputs.py) is not stored any more: the run is
    accepted again without what this process knew (its nodes executed)."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__("outputs known stored are gone")
        self.keys = keys


class _StoredElsewhere(Exception):
    """Some outputs the look-up found keep their bytes in the artifact store, which is
    checked out of the transaction (the transaction rolls back; Acceptor._write)."""

    def __init__(self, rows: dict[str, Any]) -> None:
        super().__init__("stored outputs to check in the artifact store")
        self.rows = rows


def write_accepted(
    conn: Connection,
    request: RunRequest,
    run: NewRunToWrite,
    answer: dict[str, Any],
    before_write: Callable[[RunState, Batch], None] | None = None,
) -> tuple[RunState, Batch, list[Event]]:
    """The acceptance transaction of ``Acceptor``: the run's cache keys looked up first
    (one statement), the run replayed reusing what was found, then ``write_run``. The look-up
    and the write share one transaction instead of a read and a write: one round trip and
    one connection less per trigger on PostgreSQL. ``before_write`` sees the state and
    batch about to be written (it may add to ``batch.also``)."""
    state, batch = run.state, run.batch
    lookup = run.lookup
    if lookup is not None:
        rows = artifact_store.cached_many(conn, state.account_id, lookup.keys)
        lookup.found.clear()
        lookup.found.update(rows)
        known = lookup.known_hits()
        gone = [key for key in known if key not in rows]
        if gone:
            raise KnownGone(gone)
        if rows and not _as_known(lookup.outcomes, rows):
            if any(row.data is None for row in rows.values()):
                raise _StoredElsewhere(rows)
            hits = {
                node_id: cached(node_id, row, row.cache_key)
                for node_id, outcome in lookup.outcomes.items()
                if (row := rows.get(outcome.cache_key or "")) is not None
            }
            state, batch = lookup.replay(hits)
    if before_write is not None:
        before_write(state, batch)
    return state, batch, write_run(conn, request, state, batch, answer)


def _as_known(outcomes: dict[str, Outcome], rows: dict[str, Any]) -> bool:
    """Whether the run as prepared already reuses exactly what the look-up found: each
    output found is a hit of that artifact, known stored, and no other output was found
    (the replay would make the same run)."""
    for outcome in outcomes.values():
        row = rows.get(outcome.cache_key or "")
        if outcome.cached != (row is not None):
            return False
        if row is not None and (outcome.artifact is None or outcome.artifact.id != row.id):
            return False
    return True


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


async def check_credentials(db: Database, account_id: str, graph: Graph) -> None:
    """The credentials the graph names must be the account's now (one may have been
    deleted since the workflow was saved): checked on every execute (and estimate), never
    cached. InvalidGraph names each one that is not."""
    refs = credential_store.refs_in_graph(graph.nodes.values())
    if not refs:
        return
    problems = await db.read(lambda c: credential_store.problems(c, account_id, refs))
    if problems:
        raise InvalidGraph(
            "The workflow names credentials it cannot use: "
            + "; ".join(p.message for p in problems),
            errors=problems,
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
        if request.idempotency_key is not None:
            earlier = await self.db.read(functools.partial(earlier_answer, request=request))
            if earlier is not None:
                return Accepted(earlier, replayed=True)
        async with self.admission:
            use_known = True
            for _ in range(ATTEMPTS):
                workflow = await self._workflow(request)
                await self._check_credentials(request, workflow)
                run = await self._prepare(request, workflow, use_known)
                answer: dict[str, Any] = {
                    "run_id": run.batch.run_id,
                    "status": RunStatus.RUNNING.value,
                    "estimated_credits": run.state.estimate,
                }
                if request.retry_of is not None:
                    answer["retried_from"] = request.retry_of
                try:
                    state, batch, events, handed_over = await self._write(request, run, answer)
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

    async def _check_credentials(self, request: RunRequest, workflow: WorkflowVersion) -> None:
        await check_credentials(self.db, request.account_id, workflow.graph)

    async def _earlier(self, request: RunRequest) -> dict[str, Any] | None:
        if request.idempotency_key is None:
            return None
        return await self.db.read(functools.partial(earlier_answer, request=request))

    async def _workflow(self, request: RunRequest) -> WorkflowVersion:
        if request.retry_of is not None:
            return await self.db.read(functools.partial(read_retry, request, self.graphs))
        if request.workflow_version is not None:
            graph = self.graphs.peek(request.workflow_id, request.workflow_version)
            if graph is not None:
                return WorkflowVersion(request.workflow_id, request.workflow_version, graph)
        return await self.db.read(
            lambda c: read_workflow(c, request.account_id, request.workflow_id, self.graphs)
        )

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
        self, request: RunRequest, run: NewRunToWrite, answer: dict[str, Any]
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
                    statement = self.dispatcher.handover(
                        conn,
                        batch.run_id,
                        state.with_status(NodeStatus.QUEUED),
                        state.graph,
                        state.account_id,  # its run row is not written yet
                    )
                    if statement is not None:
                        batch.also = [statement]

            state, batch, events = write_accepted(conn, request, run, answer, hand_over)
            return state, batch, events, bool(batch.also)

        alone = await self._write_alone(request, run)
        if alone is not None:
            return alone
        try:
            return await self.db.write(functools.partial(write, run=run))
        except _StoredElsewhere as found:
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
        self, request: RunRequest, run: NewRunToWrite
    ) -> tuple[RunState, Batch, list[Event], bool] | None:
        """A run that ends while it is accepted, on PostgreSQL: its acceptance as one
        statement instead of a transaction (``transitions.created_alone``: one round trip
        instead of five). None when it is not written that way: the transaction then
        writes it, or tells why it cannot be (nothing was written)."""
        engine = self.db.engine
        if engine is None or request.idempotency_key is not None or run.batch.run_end is None:
            return None
        keys = run.lookup.keys if run.lookup is not None else []
        hits = run.lookup.known_hits() if run.lookup is not None else {}
        alone = created_alone(engine.dialect, run.batch, run.state.seq + 1, keys, hits)
        if alone is None:
            return None
        sql, values, events = alone
        try:
            row = await self.db.fetch_row_alone(sql, *values)
        except IntegrityError:
            # The balance fell short of the hold between the statement's start and its
            # update of the balance's row (the statement undid itself): the transaction
            # refuses as it always does.
            return None
        if row is None or row[0] != 1:
            return None
        return run.state, run.batch, events, False

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
