"""Starting a run: hold the estimate, write the run and its pending nodes, in one write
transaction. Used by execute and by webhook triggers alike."""

from __future__ import annotations

import hashlib
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import IdempotencyKey, NodeRun, Run, Workflow, utcnow
from nodeloom.engine import credits
from nodeloom.engine.graph import Graph, validate_graph
from nodeloom.engine.states import NodeStatus, RunStatus
from nodeloom.engine.transitions import Batch, write_events
from nodeloom.errors import IdempotencyKeyReused, InvalidGraph, NotFound
from nodeloom.events.model import Event
from nodeloom.nodes.registry import Registry
from nodeloom.settings import Settings


@dataclass(frozen=True)
class PreparedRun:
    """Everything a driver needs to start a run it just saw created, so a fresh run does
    not have to be read back from the database."""

    run_id: str
    account_id: str
    workflow_id: str
    graph: Graph
    run_input: dict[str, Any] | None
    use_cache: bool
    estimate: int
    created_at: datetime
    plan: str
    queued: tuple[str, ...] = ()  # nodes queued at once (queue workers: the roots)


@dataclass(frozen=True)
class Started:
    run_id: str
    estimated_credits: int
    created_at: datetime
    prepared: PreparedRun | None = None
    events: tuple[Event, ...] = ()  # run.started, committed with the run

    def response(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": RunStatus.RUNNING.value,
            "estimated_credits": self.estimated_credits,
        }


class GraphCache:
    """Checked graphs by (workflow id, updated_at): execute validates a stored graph once,
    not on every run (the catalog is fixed for the life of the process)."""

    def __init__(self, registry: Registry, settings: Settings, size: int = 512) -> None:
        self._registry = registry
        self._settings = settings
        self._size = size
        self._items: OrderedDict[tuple[str, datetime], Graph] = OrderedDict()

    def get(self, workflow_id: str, updated_at: datetime, graph_json: Any) -> Graph:
        key = (workflow_id, updated_at)
        graph = self._items.get(key)
        if graph is not None:
            self._items.move_to_end(key)
            return graph
        checked = validate_graph(graph_json, self._registry, self._settings)
        if isinstance(checked, list):
            raise InvalidGraph(
                "The stored workflow no longer validates against this server's node catalog.",
                errors=checked,
            )
        self._items[key] = checked
        if len(self._items) > self._size:
            self._items.popitem(last=False)
        return checked


_RUNS = cast(sa.Table, Run.__table__)
_NODES = cast(sa.Table, NodeRun.__table__)
_WORKFLOWS = cast(sa.Table, Workflow.__table__)
_IDEMPOTENCY = cast(sa.Table, IdempotencyKey.__table__)
_INSERT_RUN = sa.insert(_RUNS)
_INSERT_NODES = sa.insert(_NODES)
_WORKFLOW = sa.select(_WORKFLOWS.c.id, _WORKFLOWS.c.updated_at, _WORKFLOWS.c.graph_json).where(
    _WORKFLOWS.c.id == sa.bindparam("id"),
    _WORKFLOWS.c.account_id == sa.bindparam("account"),
    _WORKFLOWS.c.deleted_at.is_(None),
)
_EARLIER = (
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
_FORGET_EXPIRED = sa.delete(_IDEMPOTENCY).where(
    _IDEMPOTENCY.c.account_id == sa.bindparam("account"),
    _IDEMPOTENCY.c.key == sa.bindparam("key"),
    _IDEMPOTENCY.c.created_at < sa.bindparam("cutoff", type_=_IDEMPOTENCY.c.created_at.type),
)
_REMEMBER = sa.insert(_IDEMPOTENCY)
IDEMPOTENCY_TTL = timedelta(hours=24)


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


@dataclass(frozen=True)
class Accepted:
    answer: dict[str, Any]
    replayed: bool
    prepared: PreparedRun | None = None
    events: tuple[Event, ...] = ()


def request_hash(request: RunRequest) -> str:
    """What an Idempotency-Key promises to repeat: this workflow, this input, this cache."""
    material = {
        "workflow_id": request.workflow_id,
        "input": request.run_input,
        "cache": request.use_cache,
    }
    return hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()


def earlier_answer(conn: Connection, request: RunRequest) -> dict[str, Any] | None:
    """The stored answer for the request's Idempotency-Key used in the last 24 hours, if
    any. A key reused for a different request (another workflow, another input) is refused
    (422, as Stripe does), never answered with the first request's run."""
    row = conn.execute(
        _EARLIER, {"account": request.account_id, "key": request.idempotency_key}
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


def start_run(conn: Connection, request: RunRequest, graphs: GraphCache) -> Accepted:
    """The whole of accepting a run, as one transaction: replay an idempotent request, or
    load and check the workflow, hold the estimate and write the run with pending nodes.

    A concurrent request with the same Idempotency-Key that commits first makes the key
    insert fail (unique violation) and this whole transaction — run, hold — roll back; the
    caller then replays the winner's answer. SQLite serializes writers, so there it cannot
    happen.
    """
    key = request.idempotency_key
    if key is not None:
        earlier = earlier_answer(conn, request)
        if earlier is not None:
            return Accepted(earlier, replayed=True)
    row = conn.execute(
        _WORKFLOW, {"id": request.workflow_id, "account": request.account_id}
    ).first()
    if row is None:
        raise NotFound("No such workflow.")
    graph = graphs.get(row.id, row.updated_at, row.graph_json)
    started = create_run(
        conn,
        account_id=request.account_id,
        workflow_id=row.id,
        graph_json=row.graph_json,
        graph=graph,
        run_input=request.run_input,
        use_cache=request.use_cache,
        plan=request.plan,
        webhook_id=request.webhook_id,
        trigger=request.trigger,
        driver=request.driver,
    )
    answer = started.response()
    if key is not None:
        conn.execute(
            _FORGET_EXPIRED,
            {"account": request.account_id, "key": key, "cutoff": utcnow() - IDEMPOTENCY_TTL},
        )
        conn.execute(
            _REMEMBER,
            {
                "account_id": request.account_id,
                "key": key,
                "run_id": started.run_id,
                "response": answer,
                "created_at": started.created_at,
                "request_hash": request_hash(request),
            },
        )
    return Accepted(answer, replayed=False, prepared=started.prepared, events=started.events)


def create_run(
    conn: Connection,
    *,
    account_id: str,
    workflow_id: str,
    graph_json: dict[str, Any],
    graph: Graph,
    run_input: dict[str, Any] | None,
    use_cache: bool,
    plan: str,
    webhook_id: str | None = None,
    trigger: str = "api",
    driver: str | None = None,
) -> Started:
    run_id = str(uuid.uuid4())
    now = utcnow()
    # Driven by a process: it schedules every node. Run by queue workers: the nodes without
    # inputs are runnable now, and their jobs are deferred once this commits.
    roots = (
        ()
        if driver is not None
        else tuple(n.id for n in graph.nodes.values() if not any(graph.inputs[n.id].values()))
    )
    estimate = graph.estimate_credits()
    credits.hold(conn, account_id, run_id, estimate, now)
    conn.execute(
        _INSERT_RUN,
        {
            "id": run_id,
            "account_id": account_id,
            "workflow_id": workflow_id,
            "webhook_id": webhook_id,
            "status": RunStatus.RUNNING.value,
            "trigger": trigger,
            "use_cache": use_cache,
            "estimated_credits": estimate,
            "credits_used": 0,
            "error": None,
            "created_at": now,
            "finished_at": None,
            "cancel_requested": False,
            "driver": driver,
            "input": run_input,
            "graph_json": graph_json,
        },
    )
    node_rows = [
        {
            "run_id": run_id,
            "node_id": node.id,
            "position": position,
            "type": node.type,
            "status": (NodeStatus.QUEUED if node.id in roots else NodeStatus.PENDING).value,
            "artifact_id": None,
            "credits_used": 0,
            "cached": False,
            "cache_key": None,
            "started_at": None,
            "finished_at": None,
            "error": None,
            "attempts": 0,
            "claimed_by": None,
            "queued_at": now if node.id in roots else None,
        }
        for position, node in enumerate(graph.nodes.values())
    ]
    if node_rows:  # an empty graph is valid: its run completes at once
        conn.execute(_INSERT_NODES, node_rows)
    prepared = PreparedRun(
        run_id=run_id,
        account_id=account_id,
        workflow_id=workflow_id,
        graph=graph,
        run_input=run_input,
        use_cache=use_cache,
        estimate=estimate,
        created_at=now,
        plan=plan,
        queued=roots,
    )
    # The run's first event (seq 1) is committed with the run itself.
    batch = Batch(run_id, workflow_id, account_id)
    batch.event("run.started", now, None, estimated_credits=estimate)
    events = tuple(write_events(conn, batch, 1))
    return Started(run_id, estimate, now, prepared, events)
