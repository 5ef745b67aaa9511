"""The provider job a provider node waits on, kept on its node run (``node_runs.provider_job``;
see nodes/adapters/policy.py): functions of a Core connection, run by ``db.read`` /
``db.write``."""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import NodeRun, Run
from nodeloom.db.prepared import Prepared

_NODES = cast(sa.Table, NodeRun.__table__)
_RUNS = cast(sa.Table, Run.__table__)
_THIS_NODE = sa.and_(
    _NODES.c.run_id == sa.bindparam("run"), _NODES.c.node_id == sa.bindparam("node")
)
# Each provider node run reads its job, stores it and reads its run's cancel flag as it
# starts: prepared (db/prepared.py), not compiled by SQLAlchemy on every call (issue #36).
_GET = Prepared(sa.select(_NODES.c.provider_job).where(_THIS_NODE))
_REMEMBER = Prepared(sa.update(_NODES).where(_THIS_NODE).values(provider_job=sa.bindparam("job")))
_CANCELLED = Prepared(sa.select(_RUNS.c.cancel_requested).where(_RUNS.c.id == sa.bindparam("run")))


def get(conn: Connection, run_id: str, node_id: str) -> dict[str, Any] | None:
    value = _GET.run(conn, {"run": run_id, "node": node_id}).scalar()
    return value if isinstance(value, dict) else None


def remember(conn: Connection, run_id: str, node_id: str, job: dict[str, Any] | None) -> None:
    _REMEMBER.run(conn, {"run": run_id, "node": node_id, "job": job})


def run_cancelled(conn: Connection, run_id: str) -> bool:
    return bool(_CANCELLED.run(conn, {"run": run_id}).scalar())


def deliver(
    conn: Connection,
    run_id: str,
    node_id: str,
    job_id: str,
    state: dict[str, Any],
    final: frozenset[str],
) -> tuple[str, str] | None:
    """Keep what a provider's webhook delivered about job ``job_id`` on its node run
    (``provider_job["delivered"]``), for the node waiting on it to read; (account id,
    workflow id) of the run to wake it, or None when the node no longer waits on that job
    (finished, cancelled, submitted another) or already holds a final state (``final``:
    deliveries may come out of order, a final one is never replaced)."""
    row = conn.execute(
        sa.select(_NODES.c.status, _NODES.c.provider_job, _RUNS.c.account_id, _RUNS.c.workflow_id)
        .join(_RUNS, _RUNS.c.id == _NODES.c.run_id)
        .where(_NODES.c.run_id == run_id, _NODES.c.node_id == node_id)
        .with_for_update(of=_NODES)
    ).first()
    if row is None or row.status != "running" or not isinstance(row.provider_job, dict):
        return None
    job = cast(dict[str, Any], row.provider_job)
    if job.get("id") != job_id:
        return None
    earlier = job.get("delivered")
    if isinstance(earlier, dict) and earlier.get("status") in final:
        return None
    conn.execute(
        sa.update(_NODES)
        .where(_NODES.c.run_id == run_id, _NODES.c.node_id == node_id, _NODES.c.status == "running")
        .values(provider_job={**job, "delivered": state})
    )
    return str(row.account_id), str(row.workflow_id)
