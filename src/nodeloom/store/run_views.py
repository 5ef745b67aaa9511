"""Read models of runs for the API: only the columns a response shows (a run row also holds
the graph snapshot, which a status poll must not load), as prebuilt Core statements."""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from nodeloom.db.models import NodeRun, Run, Workflow
from nodeloom.store.paging import after_cursor

_RUNS = cast(sa.Table, Run.__table__)
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
)
_RUN = sa.select(*SUMMARY_COLUMNS, _RUNS.c.input).where(
    _RUNS.c.id == sa.bindparam("run"),
    _RUNS.c.account_id == sa.bindparam("account"),
    _RUNS.c.workflow_id == sa.bindparam("workflow"),
)
_NODE_RUNS = (
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
    )
    .where(_NODES.c.run_id == sa.bindparam("run"))
    .order_by(_NODES.c.position)
)
_WORKFLOW_EXISTS = sa.select(_WORKFLOWS.c.id).where(
    _WORKFLOWS.c.id == sa.bindparam("workflow"),
    _WORKFLOWS.c.account_id == sa.bindparam("account"),
    _WORKFLOWS.c.deleted_at.is_(None),
)
_SO_FAR = (
    sa.select(_NODES.c.run_id, sa.func.sum(_NODES.c.credits_used))
    .where(_NODES.c.run_id.in_(sa.bindparam("runs", expanding=True)))
    .group_by(_NODES.c.run_id)
)


async def run(conn: AsyncConnection, account_id: str, workflow_id: str, run_id: str) -> Any:
    params = {"run": run_id, "account": account_id, "workflow": workflow_id}
    return (await conn.execute(_RUN, params)).first()


async def node_runs(conn: AsyncConnection, run_id: str) -> list[Any]:
    return list((await conn.execute(_NODE_RUNS, {"run": run_id})).all())


async def workflow_exists(conn: AsyncConnection, account_id: str, workflow_id: str) -> bool:
    params = {"workflow": workflow_id, "account": account_id}
    return (await conn.execute(_WORKFLOW_EXISTS, params)).first() is not None


async def page(
    conn: AsyncConnection,
    account_id: str,
    workflow_id: str,
    status: str | None,
    limit: int,
    cursor: str | None,
) -> list[Any]:
    query = (
        sa.select(*SUMMARY_COLUMNS)
        .where(
            _RUNS.c.account_id == account_id,
            _RUNS.c.workflow_id == workflow_id,
            after_cursor(_RUNS.c.created_at, _RUNS.c.id, cursor),
        )
        .order_by(_RUNS.c.created_at.desc(), _RUNS.c.id.desc())
        .limit(limit + 1)
    )
    if status is not None:
        query = query.where(_RUNS.c.status == status)
    return list((await conn.execute(query)).all())


async def credits_so_far(conn: AsyncConnection, run_ids: list[str]) -> dict[str, int]:
    if not run_ids:
        return {}
    rows = await conn.execute(_SO_FAR, {"runs": run_ids})
    return {run_id: int(total or 0) for run_id, total in rows.all()}
