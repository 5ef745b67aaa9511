"""Runs, their node runs and their event logs (functions of a Core connection, run by
``db.read`` / ``db.write``). Reads for the API select only the columns a response shows: a
run row also holds the graph snapshot, which a status poll must not load."""

from __future__ import annotations

from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Account, Artifact, NodeRun, Run, RunEvent, Workflow
from nodeloom.db.prepared import Prepared
from nodeloom.states import RunStatus
from nodeloom.store import Record
from nodeloom.store.paging import newest_first

RUNS = cast(sa.Table, Run.__table__)
_RUNS = RUNS
_NODES = cast(sa.Table, NodeRun.__table__)
_WORKFLOWS = cast(sa.Table, Workflow.__table__)

SUMMARY_COLUMNS = (
    _RUNS.c.id,
    _RUNS.c.workflow_id,
    _RUNS.c.status,
    _RUNS.c.credits_used,
    _RUNS.c.estimated_credits,
    _RUNS.c.created_at,
    _RUNS.c.finished_at,
    _RUNS.c.error,
    _RUNS.c.trigger,
    _RUNS.c.webhook_id,
    _RUNS.c.workflow_version,
    _RUNS.c.retried_from,
    _RUNS.c.parent_run_id,
    _RUNS.c.parent_node_id,
)
_PARENT_RUNS = _RUNS.alias("parent_runs")
# A sub-workflow's run names its parent's workflow too (where to read the parent): a join
# on the parent's primary key, NULL for every other run.
_RUN = Prepared(
    sa.select(
        *SUMMARY_COLUMNS,
        _RUNS.c.input,
        _PARENT_RUNS.c.workflow_id.label("parent_workflow_id"),
    )
    .select_from(_RUNS.outerjoin(_PARENT_RUNS, _PARENT_RUNS.c.id == _RUNS.c.parent_run_id))
    .where(
        _RUNS.c.id == sa.bindparam("run"),
        _RUNS.c.account_id == sa.bindparam("account"),
        _RUNS.c.workflow_id == sa.bindparam("workflow"),
    )
)
_CHILD_RUNS = _RUNS.alias("child_runs")
# A Workflow node's child run is named with its workflow (where it is read): a join on the
# child's primary key, NULL for every other node.
_NODE_RUNS = Prepared(
    sa.select(
        _NODES.c.node_id,
        _NODES.c.type,
        _NODES.c.status,
        _NODES.c.artifact_id,
        _NODES.c.credits_used,
        _NODES.c.cached,
        _NODES.c.started_at,
        _NODES.c.finished_at,
        _NODES.c.error,
        _NODES.c.item_index,
        _NODES.c.child_run_id,
        _CHILD_RUNS.c.workflow_id.label("child_workflow_id"),
        # The ComfyUI fleet server that ran it (nodes/adapters/comfyui.py records it on
        # the provider job): one JSON field, not the whole job.
        _NODES.c.provider_job["server_name"].as_string().label("server"),
    )
    .select_from(_NODES.outerjoin(_CHILD_RUNS, _CHILD_RUNS.c.id == _NODES.c.child_run_id))
    .where(_NODES.c.run_id == sa.bindparam("run"))
    .order_by(_NODES.c.position, _NODES.c.item_index)
)
_WORKFLOW_EXISTS = sa.select(_WORKFLOWS.c.id).where(
    _WORKFLOWS.c.id == sa.bindparam("workflow"),
    _WORKFLOWS.c.account_id == sa.bindparam("account"),
    _WORKFLOWS.c.deleted_at.is_(None),
)
_SO_FAR = Prepared(
    sa.select(_NODES.c.run_id, sa.func.sum(_NODES.c.credits_used).label("credits"))
    .where(_NODES.c.run_id.in_(sa.bindparam("runs", expanding=True)))
    .group_by(_NODES.c.run_id)
)


_EVENTS = cast(sa.Table, RunEvent.__table__)
_ACCOUNTS = cast(sa.Table, Account.__table__)
_RUNNING = _RUNS.c.status == RunStatus.RUNNING.value


def run(conn: Connection, account_id: str, workflow_id: str, run_id: str) -> Record | None:
    """The run's summary columns and input, when it is the account's, of that workflow."""
    params = {"run": run_id, "account": account_id, "workflow": workflow_id}
    return _RUN.run(conn, params).first()


_RETRIES = Prepared(
    sa.select(_RUNS.c.id)
    .where(_RUNS.c.retried_from == sa.bindparam("run"))
    .order_by(_RUNS.c.created_at, _RUNS.c.id)
)
_RETRY_SOURCE = Prepared(
    sa.select(
        _RUNS.c.id,
        _RUNS.c.workflow_id,
        _RUNS.c.status,
        _RUNS.c.input,
        _RUNS.c.graph_json,
        _WORKFLOWS.c.updated_at.label("workflow_version"),
        _WORKFLOWS.c.graph_json.label("current_graph"),
        _RUNS.c.workflow_version.label("ran_version"),
        _WORKFLOWS.c.version.label("current_version"),
    )
    .join(_WORKFLOWS, _WORKFLOWS.c.id == _RUNS.c.workflow_id)
    .where(
        _RUNS.c.id == sa.bindparam("run"),
        _RUNS.c.account_id == sa.bindparam("account"),
        _RUNS.c.workflow_id == sa.bindparam("workflow"),
        _WORKFLOWS.c.deleted_at.is_(None),
    )
)


def retries(conn: Connection, run_id: str) -> list[str]:
    """The ids of the runs that retry ``run_id``, oldest first."""
    return [row.id for row in _RETRIES.run(conn, {"run": run_id})]


def retry_source(conn: Connection, account_id: str, workflow_id: str, run_id: str) -> Record | None:
    """What a retry of the run starts from (its status, input, graph, and the workflow's
    graph as saved now), when the run is the account's, of that workflow, and the workflow
    is not deleted."""
    params = {"run": run_id, "account": account_id, "workflow": workflow_id}
    return _RETRY_SOURCE.run(conn, params).first()


def owned(
    conn: Connection, account_id: str, run_id: str, workflow_id: str | None = None
) -> Record | None:
    """The run's summary columns when it is the account's (and, if given, the workflow's)."""
    query = sa.select(*SUMMARY_COLUMNS).where(
        _RUNS.c.id == run_id, _RUNS.c.account_id == account_id
    )
    if workflow_id is not None:
        query = query.where(_RUNS.c.workflow_id == workflow_id)
    return conn.execute(query).first()


def node_runs(conn: Connection, run_id: str) -> list[Record]:
    return list(_NODE_RUNS.run(conn, {"run": run_id}).all())


def workflow_exists(conn: Connection, account_id: str, workflow_id: str) -> bool:
    params = {"workflow": workflow_id, "account": account_id}
    return conn.execute(_WORKFLOW_EXISTS, params).first() is not None


def page(
    conn: Connection,
    account_id: str,
    workflow_id: str | None,
    status: str | None,
    limit: int,
    cursor: str | None,
    trigger: str | None = None,
) -> list[Record]:
    """Newest first, ``limit + 1`` rows. One workflow's runs, or with ``workflow_id=None``
    every run of the account whose workflow still exists, each with ``workflow_name``."""
    query = newest_first(
        sa.select(*SUMMARY_COLUMNS).where(_RUNS.c.account_id == account_id), _RUNS, limit, cursor
    )
    if workflow_id is not None:
        query = query.where(_RUNS.c.workflow_id == workflow_id)
    else:
        query = query.join(_WORKFLOWS, _WORKFLOWS.c.id == _RUNS.c.workflow_id)
        query = query.add_columns(_WORKFLOWS.c.name.label("workflow_name"))
        query = query.where(_WORKFLOWS.c.deleted_at.is_(None))
    if status is not None:
        query = query.where(_RUNS.c.status == status)
    if trigger is not None:
        query = query.where(_RUNS.c.trigger == trigger)
    return list(conn.execute(query).all())


def credits_so_far(conn: Connection, run_ids: list[str]) -> dict[str, int]:
    if not run_ids:
        return {}
    rows = _SO_FAR.run(conn, {"runs": run_ids})
    return {run_id: int(total or 0) for run_id, total in rows.all()}


def running_ids_of_workflow(conn: Connection, workflow_id: str) -> list[str]:
    query = sa.select(_RUNS.c.id).where(_RUNS.c.workflow_id == workflow_id, _RUNNING)
    return list(conn.execute(query).scalars())


def request_cancel(conn: Connection, run_ids: list[str]) -> None:
    if run_ids:
        conn.execute(
            sa.update(_RUNS).where(_RUNS.c.id.in_(run_ids), _RUNNING).values(cancel_requested=True)
        )


def events_after(conn: Connection, run_id: str, after_seq: int) -> list[Record]:
    query = (
        sa.select(_EVENTS)
        .where(_EVENTS.c.run_id == run_id, _EVENTS.c.seq > after_seq)
        .order_by(_EVENTS.c.seq)
    )
    return list(conn.execute(query).all())


# -- a running run's state, as the engine loads it (engine/stepper.py) ---------------------
# One query set for both executors: the run row (locked), its node rows, their artifacts,
# the last seq of its event log. Each is a statement of its own: on PostgreSQL a statement
# that waited for the run's lock sees what the holder committed only from the next
# statement on (READ COMMITTED takes its snapshot per statement), so nothing read after
# the lock may be part of the locking statement.

_LOCK_RUN = Prepared(
    sa.select(
        _RUNS.c.id,
        _RUNS.c.account_id,
        _RUNS.c.workflow_id,
        _RUNS.c.status,
        _RUNS.c.cancel_requested,
        _RUNS.c.use_cache,
        _RUNS.c.estimated_credits,
        _RUNS.c.created_at,
        _RUNS.c.input,
        _RUNS.c.workflow_version,
        _ACCOUNTS.c.plan,
    )
    .join(_ACCOUNTS, _ACCOUNTS.c.id == _RUNS.c.account_id)
    .where(_RUNS.c.id == sa.bindparam("run"))
    # SQLite has no row locks (and needs none: it has one writer at a time); its compiler
    # leaves the clause out.
    .with_for_update(of=_RUNS)
)
_GRAPH = Prepared(sa.select(_RUNS.c.graph_json).where(_RUNS.c.id == sa.bindparam("run")))
_NODE_STATE_COLUMNS = (
    _NODES.c.node_id,
    _NODES.c.status,
    _NODES.c.credits_used,
    _NODES.c.attempts,
    _NODES.c.claimed_by,
    _NODES.c.artifact_id,
    _NODES.c.error,
    _NODES.c.ports,
)
_NODE_STATES = Prepared(
    sa.select(*_NODE_STATE_COLUMNS)
    .where(_NODES.c.run_id == sa.bindparam("run"))
    .order_by(_NODES.c.position)
)
_LAST_SEQ = Prepared(
    sa.select(sa.func.max(_EVENTS.c.seq).label("seq")).where(
        _EVENTS.c.run_id == sa.bindparam("run")
    )
)

_ARTIFACTS = cast(sa.Table, Artifact.__table__)
# What a step reads after locking the run, in one statement: each node with its output's
# artifact columns (``id`` to ``data``, NULL when it has none: a row ``artifact_info``
# takes) and the run's last event seq — three statements (and round trips) before. The
# seq is read after the lock (a statement of its own snapshot), so it includes every step
# committed before this one.
_OUTPUT_COLUMNS = (
    "id",
    "content_type",
    "size_bytes",
    "sha256",
    "width",
    "height",
    "duration_ms",
    "data",
)
_NODES_AS_STEPPED = Prepared(
    sa.select(
        *_NODE_STATE_COLUMNS,
        *(_ARTIFACTS.c[name] for name in _OUTPUT_COLUMNS),
        sa.select(sa.func.coalesce(sa.func.max(_EVENTS.c.seq), 0))
        .where(_EVENTS.c.run_id == sa.bindparam("run"))
        .scalar_subquery()
        .label("last_seq"),
    )
    .select_from(_NODES.outerjoin(_ARTIFACTS, _ARTIFACTS.c.id == _NODES.c.artifact_id))
    .where(_NODES.c.run_id == sa.bindparam("run"))
    .order_by(_NODES.c.position)
)


def locked(conn: Connection, run_id: str) -> Record | None:
    """The run's engine columns with its owner's plan, its row locked for the transaction
    (PostgreSQL; SQLite's writers are serialized anyway)."""
    return _LOCK_RUN.run(conn, {"run": run_id}).first()


def graph_json(conn: Connection, run_id: str) -> object:
    """The run's copy of its workflow's graph."""
    return _GRAPH.run(conn, {"run": run_id}).scalar()


def node_states(conn: Connection, run_id: str) -> list[Record]:
    """What the engine keeps of each node run, in graph position order."""
    return list(_NODE_STATES.run(conn, {"run": run_id}).all())


def nodes_as_stepped(conn: Connection, run_id: str) -> tuple[list[Record], int]:
    """``node_states``, each row with its output's artifact columns (``id`` NULL when it
    has none), and ``last_seq``, in one statement."""
    nodes = list(_NODES_AS_STEPPED.run(conn, {"run": run_id}).all())
    return nodes, (int(nodes[0].last_seq) if nodes else last_seq(conn, run_id))


def last_seq(conn: Connection, run_id: str) -> int:
    """The seq of the run's last event; 0 before its first."""
    return int(_LAST_SEQ.run(conn, {"run": run_id}).scalar() or 0)
