"""Starting a run: hold the estimate, write the run and its pending nodes, in one write
transaction. Used by execute and by webhook triggers alike."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import IdempotencyKey, NodeRun, Run, Workflow, utcnow
from nodeloom.engine import credits
from nodeloom.engine.graph import Graph, validate_graph
from nodeloom.engine.states import NodeStatus, RunStatus
from nodeloom.errors import Conflict, InvalidGraph, NotFound
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


@dataclass(frozen=True)
class Started:
    run_id: str
    estimated_credits: int
    created_at: datetime
    prepared: PreparedRun | None = None

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
    sa.select(_IDEMPOTENCY.c.response, _IDEMPOTENCY.c.created_at, _RUNS.c.workflow_id)
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
    webhook_id: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True)
class Accepted:
    answer: dict[str, Any]
    replayed: bool
    prepared: PreparedRun | None = None


def earlier_answer(
    conn: Connection, account_id: str, key: str, workflow_id: str
) -> dict[str, Any] | None:
    """The stored answer for an Idempotency-Key used in the last 24 hours, if any. A key
    reused for another workflow is a client error (409), never a replay of the wrong run."""
    row = conn.execute(_EARLIER, {"account": account_id, "key": key}).first()
    if row is None or row.created_at < utcnow() - IDEMPOTENCY_TTL:
        return None
    if row.workflow_id != workflow_id:
        raise Conflict("This Idempotency-Key was already used for another workflow.")
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
        earlier = earlier_answer(conn, request.account_id, key, request.workflow_id)
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
        webhook_id=request.webhook_id,
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
            },
        )
    return Accepted(answer, replayed=False, prepared=started.prepared)


def create_run(
    conn: Connection,
    *,
    account_id: str,
    workflow_id: str,
    graph_json: dict[str, Any],
    graph: Graph,
    run_input: dict[str, Any] | None,
    use_cache: bool,
    webhook_id: str | None = None,
) -> Started:
    run_id = str(uuid.uuid4())
    now = utcnow()
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
            "use_cache": use_cache,
            "estimated_credits": estimate,
            "credits_used": 0,
            "error": None,
            "created_at": now,
            "finished_at": None,
            "cancel_requested": False,
            "lease_owner": None,
            "lease_expires_at": None,
            "event_seq": 0,
            "input": run_input,
            "graph_json": graph_json,
        },
    )
    conn.execute(
        _INSERT_NODES,
        [
            {
                "run_id": run_id,
                "node_id": node.id,
                "position": position,
                "type": node.type,
                "status": NodeStatus.PENDING.value,
                "artifact_id": None,
                "credits_used": 0,
                "cached": False,
                "cache_key": None,
                "started_at": None,
                "finished_at": None,
                "error": None,
                "attempts": 0,
            }
            for position, node in enumerate(graph.nodes.values())
        ],
    )
    prepared = PreparedRun(
        run_id=run_id,
        account_id=account_id,
        workflow_id=workflow_id,
        graph=graph,
        run_input=run_input,
        use_cache=use_cache,
        estimate=estimate,
        created_at=now,
    )
    return Started(run_id, estimate, now, prepared)
