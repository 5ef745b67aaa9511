"""Preparing a run and writing its acceptance: the workflow version it runs (current, pinned
by an app, or a retry's), its nodes' starting state and hold (``new_run``), and the
acceptance transaction (``write_run``, ``write_accepted``). engine/submit.py drives them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.engine import Database
from nodeloom.db.models import Workflow, utcnow
from nodeloom.db.prepared import Prepared
from nodeloom.engine import batches, retry, stepper, work
from nodeloom.engine.executor import cached
from nodeloom.engine.graph import Graph
from nodeloom.engine.graph_cache import GraphCache
from nodeloom.engine.idempotency import FORGET_EXPIRED, IDEMPOTENCY_TTL, REMEMBER, key_row
from nodeloom.engine.retry import RetrySource
from nodeloom.engine.run_request import RunRequest, WorkflowVersion
from nodeloom.engine.run_state import Outcome, RunState
from nodeloom.engine.transitions import (
    Batch,
    NewRun,
)
from nodeloom.errors import (
    FieldError,
    InvalidGraph,
    InvalidRequest,
    NotFound,
)
from nodeloom.events.model import Event, EventType
from nodeloom.ids import uuid7
from nodeloom.nodes.batch import too_many
from nodeloom.states import NodeStatus
from nodeloom.store import artifacts as artifact_store
from nodeloom.store import credentials as credential_store
from nodeloom.store.apps import version_graph as app_version_graph

_WORKFLOWS = cast(sa.Table, Workflow.__table__)


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


async def current_workflow(
    db: Database, account_id: str, workflow_id: str, graphs: GraphCache
) -> WorkflowVersion:
    """``read_workflow``, its version first read by ``Database.fetch`` (about 0.1 ms of
    CPU less than a read's, issue #36): the graph of a version the cache holds needs
    nothing more; else the whole read, once per version and process."""
    params = {"id": workflow_id, "account": account_id}
    row = (await db.fetch(_WORKFLOW_VERSION, params)).first()
    graph = graphs.peek(row.id, row.updated_at) if row is not None else None
    if row is None or graph is None:
        return await db.read(lambda c: read_workflow(c, account_id, workflow_id, graphs))
    return WorkflowVersion(row.id, row.updated_at, graph)


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
        raise InvalidRequest.listing(
            "The run's input makes a batch larger than allowed: ", problems
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


def read_pinned(request: RunRequest, graphs: GraphCache, conn: Connection) -> WorkflowVersion:
    """Saved version ``pinned_version`` of the workflow, checked, as the graph the run copies
    (the run records that version, as a retry of it does)."""
    assert request.pinned_version is not None
    row = _WORKFLOW_VERSION.run(
        conn, {"id": request.workflow_id, "account": request.account_id}
    ).first()
    graph_json = (
        None
        if row is None
        else app_version_graph(
            conn, request.account_id, request.workflow_id, request.pinned_version
        )
    )
    if row is None or graph_json is None:
        raise NotFound("No such workflow version.")
    children = graphs.children(conn, request.account_id, graph_json, request.workflow_id)
    source = RetrySource(None, graph_json, request.run_input, {}, request.pinned_version)
    return WorkflowVersion(row.id, row.updated_at, graphs.check(graph_json, children), source)


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
    estimate = drawn.estimate_credits(items, request.media_lengths) - sum(
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
        retry_version=source.version_number if source is not None else None,
        callback_url=request.callback_url,
        parent_run_id=request.parent_run_id,
        parent_node_id=request.parent_node_id,
        webhook_as_read=request.webhook_as_read,
    )
    started: dict[str, Any] = {"estimated_credits": estimate}
    if source is not None and source.retried_from is not None:
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
        FORGET_EXPIRED.run(
            conn,
            {"account": request.account_id, "key": key, "cutoff": utcnow() - IDEMPOTENCY_TTL},
        )
        REMEMBER.run(conn, key_row(request, batch.run_id, answer, events[0].ts))
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


class StoredElsewhere(Exception):
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
                raise StoredElsewhere(rows)
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


async def check_credentials(db: Database, account_id: str, graph: Graph) -> dict[str, str]:
    """The credentials the graph names must be the account's now (one may have been
    deleted since the workflow was saved): checked on every execute (and estimate), never
    cached. InvalidGraph names each one that is not. Their kinds by id (the queue of a
    provider node depends on its credential's kind: ``Dispatcher.handover``)."""
    refs = credential_store.refs_in_graph(graph.nodes.values())
    if not refs:
        return {}
    ids = [credential_id for _, credential_id, _ in refs]
    return usable(refs, await credential_store.read_kinds(db, account_id, ids))


def usable(refs: credential_store.Refs, found: dict[str, str]) -> dict[str, str]:
    """``found`` (the kinds of the account's credentials among those ``refs`` name), or
    InvalidGraph naming each credential a node cannot use."""
    problems = credential_store.problems_of(refs, found)
    if problems:
        raise InvalidGraph.listing("The workflow names credentials it cannot use: ", problems)
    return found
