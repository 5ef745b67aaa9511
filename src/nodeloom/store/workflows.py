"""Workflows, scoped to their account. Deleted workflows are kept (soft delete) so their runs
and artifacts stay consistent, but they are invisible to every query here."""

from __future__ import annotations

import uuid
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from nodeloom.db.models import Workflow, utcnow
from nodeloom.store.paging import after_cursor


async def create(
    session: AsyncSession, *, account_id: str, name: str, graph_json: dict[str, Any]
) -> Workflow:
    now = utcnow()
    workflow = Workflow(
        id=str(uuid.uuid4()),
        account_id=account_id,
        name=name,
        graph_json=graph_json,
        node_count=len(graph_json["nodes"]),
        created_at=now,
        updated_at=now,
    )
    session.add(workflow)
    await session.flush()
    return workflow


async def get(session: AsyncSession, account_id: str, workflow_id: str) -> Workflow | None:
    return await session.scalar(
        sa.select(Workflow).where(
            Workflow.id == workflow_id,
            Workflow.account_id == account_id,
            Workflow.deleted_at.is_(None),
        )
    )


_WORKFLOWS = cast(sa.Table, Workflow.__table__)


async def page(conn: AsyncConnection, account_id: str, limit: int, cursor: str | None) -> list[Any]:
    """Summaries only: the graph itself is never loaded for a list."""
    query = (
        sa.select(
            _WORKFLOWS.c.id, _WORKFLOWS.c.name, _WORKFLOWS.c.created_at, _WORKFLOWS.c.node_count
        )
        .where(
            _WORKFLOWS.c.account_id == account_id,
            _WORKFLOWS.c.deleted_at.is_(None),
            after_cursor(_WORKFLOWS.c.created_at, _WORKFLOWS.c.id, cursor),
        )
        .order_by(_WORKFLOWS.c.created_at.desc(), _WORKFLOWS.c.id.desc())
        .limit(limit + 1)
    )
    return list((await conn.execute(query)).all())


async def update(
    session: AsyncSession,
    workflow: Workflow,
    *,
    name: str | None,
    graph_json: dict[str, Any] | None,
) -> Workflow:
    if name is not None:
        workflow.name = name
    if graph_json is not None:
        workflow.graph_json = graph_json
        workflow.node_count = len(graph_json["nodes"])
    workflow.updated_at = utcnow()
    await session.flush()
    return workflow


async def soft_delete(session: AsyncSession, workflow: Workflow) -> None:
    workflow.deleted_at = utcnow()
    await session.flush()
