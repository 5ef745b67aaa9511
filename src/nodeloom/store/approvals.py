"""Approvals, scoped to their account (functions of a Core connection, run by ``db.read`` /
``db.write``). The rules — who decides, when a wait times out, how the node is woken — are
in engine/approvals.py."""

from __future__ import annotations

from datetime import datetime
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Approval, NodeRun, Run, Workflow
from nodeloom.ids import uuid7
from nodeloom.states import RunStatus
from nodeloom.store import Record, rows

APPROVALS = cast(sa.Table, Approval.__table__)
_RUNS = cast(sa.Table, Run.__table__)
_WORKFLOWS = cast(sa.Table, Workflow.__table__)
_NODE_RUNS = cast(sa.Table, NodeRun.__table__)

PENDING, APPROVED, REJECTED = "pending", "approved", "rejected"


def of_node(conn: Connection, run_id: str, node_id: str) -> Record | None:
    return conn.execute(
        sa.select(APPROVALS).where(APPROVALS.c.run_id == run_id, APPROVALS.c.node_id == node_id)
    ).first()


def open_once(
    conn: Connection,
    *,
    account_id: str,
    run_id: str,
    node_id: str,
    kind: str,
    prompt: str,
    allow_edit: bool,
    timeout_outcome: str,
    input_artifact_id: str | None,
    now: datetime,
    expires_at: datetime,
) -> tuple[Record, bool]:
    """The node's approval, and whether this call wrote it: a node run again (a restart,
    another process) gets the one its first attempt wrote, decision and expiry unchanged."""
    found = of_node(conn, run_id, node_id)
    if found is not None:
        return found, False
    workflow_id = conn.execute(
        sa.select(_RUNS.c.workflow_id).where(_RUNS.c.id == run_id)
    ).scalar_one()
    row = rows.insert(
        conn,
        APPROVALS,
        id=uuid7(),
        account_id=account_id,
        workflow_id=workflow_id,
        run_id=run_id,
        node_id=node_id,
        status=PENDING,
        kind=kind,
        prompt=prompt,
        allow_edit=allow_edit,
        timeout_outcome=timeout_outcome,
        input_artifact_id=input_artifact_id,
        created_at=now,
        expires_at=expires_at,
        decided_at=None,
        decided_by=None,
        comment=None,
        text=None,
    )
    return row, True


def _listed() -> sa.Select[tuple[object, ...]]:
    """With the node run's ``item_index``: an approval inside a ForEach or Repeat region
    belongs to one item's (or iteration's) instance of the drawn node."""
    node_run = sa.and_(
        _NODE_RUNS.c.run_id == APPROVALS.c.run_id, _NODE_RUNS.c.node_id == APPROVALS.c.node_id
    )
    return (
        sa.select(APPROVALS, _WORKFLOWS.c.name.label("workflow_name"), _NODE_RUNS.c.item_index)
        .join(_RUNS, _RUNS.c.id == APPROVALS.c.run_id)
        .join(_WORKFLOWS, _WORKFLOWS.c.id == APPROVALS.c.workflow_id)
        .outerjoin(_NODE_RUNS, node_run)
    )


def pending(conn: Connection, account_id: str, limit: int) -> list[Record]:
    """The account's approvals still waiting for a person, oldest first: only those whose
    run still runs (a cancelled run's approval is nobody's to decide)."""
    query = (
        _listed()
        .where(
            APPROVALS.c.account_id == account_id,
            APPROVALS.c.status == PENDING,
            _RUNS.c.status == RunStatus.RUNNING.value,
        )
        .order_by(APPROVALS.c.created_at, APPROVALS.c.id)
        .limit(limit)
    )
    return list(conn.execute(query).all())


def count_pending(conn: Connection, account_id: str) -> int:
    query = (
        sa.select(sa.func.count())
        .select_from(APPROVALS.join(_RUNS, _RUNS.c.id == APPROVALS.c.run_id))
        .where(
            APPROVALS.c.account_id == account_id,
            APPROVALS.c.status == PENDING,
            _RUNS.c.status == RunStatus.RUNNING.value,
        )
    )
    return int(conn.execute(query).scalar_one())


def get(conn: Connection, account_id: str | None, approval_id: str) -> Record | None:
    """The approval with its workflow's name and its run's status; ``account_id`` None: of
    any account (a signed link is its own authorisation)."""
    query = _listed().add_columns(_RUNS.c.status.label("run_status"))
    query = query.where(APPROVALS.c.id == approval_id)
    if account_id is not None:
        query = query.where(APPROVALS.c.account_id == account_id)
    return conn.execute(query).first()


def decide(
    conn: Connection,
    approval_id: str,
    status: str,
    *,
    by: str,
    now: datetime,
    comment: str | None = None,
    text: str | None = None,
) -> bool:
    """Decide a pending approval; False when it was decided already (by anyone)."""
    result = conn.execute(
        sa.update(APPROVALS)
        .where(APPROVALS.c.id == approval_id, APPROVALS.c.status == PENDING)
        .values(status=status, decided_at=now, decided_by=by, comment=comment, text=text)
    )
    return result.rowcount == 1


def pending_in_runs(conn: Connection, run_ids: list[str]) -> set[tuple[str, str]]:
    """(run id, node id) of the approvals still pending in ``run_ids``: those nodes show
    ``waiting``."""
    if not run_ids:
        return set()
    rows = conn.execute(
        sa.select(APPROVALS.c.run_id, APPROVALS.c.node_id).where(
            APPROVALS.c.run_id.in_(run_ids), APPROVALS.c.status == PENDING
        )
    )
    return {(r.run_id, r.node_id) for r in rows}


def decided_among(conn: Connection, ids: list[str]) -> set[str]:
    """Which of the approvals ``ids`` are no longer pending (one statement: the caller
    chunks)."""
    if not ids:
        return set()
    rows = conn.execute(
        sa.select(APPROVALS.c.id).where(APPROVALS.c.id.in_(ids), APPROVALS.c.status != PENDING)
    )
    return {row.id for row in rows}
