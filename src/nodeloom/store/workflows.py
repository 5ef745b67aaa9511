"""Workflows, scoped to their account (functions of a Core connection, run by ``db.read``
/ ``db.write``). Deleted workflows are kept (soft delete) so their runs and artifacts stay
consistent, but they are invisible to every query here."""

from __future__ import annotations

import uuid
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Run, Workflow, utcnow
from nodeloom.store import Record
from nodeloom.store.paging import after_cursor

WORKFLOWS = cast(sa.Table, Workflow.__table__)
_RUNS = cast(sa.Table, Run.__table__)
_VISIBLE = WORKFLOWS.c.deleted_at.is_(None)


def create(conn: Connection, *, account_id: str, name: str, graph_json: dict[str, Any]) -> Record:
    now = utcnow()
    return conn.execute(
        sa.insert(WORKFLOWS)
        .values(
            id=str(uuid.uuid4()),
            account_id=account_id,
            name=name,
            graph_json=graph_json,
            node_count=len(graph_json["nodes"]),
            created_at=now,
            updated_at=now,
            deleted_at=None,
        )
        .returning(*WORKFLOWS.c)
    ).one()


def get(conn: Connection, account_id: str, workflow_id: str) -> Record | None:
    query = sa.select(WORKFLOWS).where(
        WORKFLOWS.c.id == workflow_id, WORKFLOWS.c.account_id == account_id, _VISIBLE
    )
    return conn.execute(query).first()


def exists(conn: Connection, account_id: str, workflow_id: str) -> bool:
    query = sa.select(WORKFLOWS.c.id).where(
        WORKFLOWS.c.id == workflow_id, WORKFLOWS.c.account_id == account_id, _VISIBLE
    )
    return conn.execute(query).first() is not None


def _last_run(column: sa.Column[Any]) -> Any:
    """A column of the workflow's newest run: one probe of ix_runs_workflow_created."""
    return (
        sa.select(column)
        .where(_RUNS.c.workflow_id == WORKFLOWS.c.id)
        .order_by(_RUNS.c.created_at.desc(), _RUNS.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )


def page(
    conn: Connection,
    account_id: str,
    limit: int,
    cursor: str | None,
    with_last_run: bool = False,
) -> list[Record]:
    """Summaries only: the graph itself is never loaded for a list. ``with_last_run`` adds
    the status and start of each workflow's newest run."""
    columns: list[Any] = [
        WORKFLOWS.c.id,
        WORKFLOWS.c.name,
        WORKFLOWS.c.created_at,
        WORKFLOWS.c.node_count,
    ]
    if with_last_run:
        columns.append(_last_run(_RUNS.c.status).label("last_run_status"))
        columns.append(_last_run(_RUNS.c.created_at).label("last_run_at"))
    query = (
        sa.select(*columns)
        .where(
            WORKFLOWS.c.account_id == account_id,
            _VISIBLE,
            after_cursor(WORKFLOWS.c.created_at, WORKFLOWS.c.id, cursor),
        )
        .order_by(WORKFLOWS.c.created_at.desc(), WORKFLOWS.c.id.desc())
        .limit(limit + 1)
    )
    return list(conn.execute(query).all())


def update(
    conn: Connection,
    account_id: str,
    workflow_id: str,
    *,
    name: str | None,
    graph_json: dict[str, Any] | None,
) -> Record | None:
    """The workflow as changed, or None when it is not there (any more)."""
    values: dict[str, Any] = {"updated_at": utcnow()}
    if name is not None:
        values["name"] = name
    if graph_json is not None:
        values["graph_json"] = graph_json
        values["node_count"] = len(graph_json["nodes"])
    return conn.execute(
        sa.update(WORKFLOWS)
        .where(WORKFLOWS.c.id == workflow_id, WORKFLOWS.c.account_id == account_id, _VISIBLE)
        .values(**values)
        .returning(*WORKFLOWS.c)
    ).first()


def soft_delete(conn: Connection, account_id: str, workflow_id: str) -> bool:
    result = conn.execute(
        sa.update(WORKFLOWS)
        .where(WORKFLOWS.c.id == workflow_id, WORKFLOWS.c.account_id == account_id, _VISIBLE)
        .values(deleted_at=utcnow())
    )
    return bool(result.rowcount)
