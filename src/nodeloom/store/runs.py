"""Reading runs, node runs and artifacts for the API and the executor."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from nodeloom.db.models import Artifact, CacheEntry, NodeRun, Run, RunEvent


async def get(
    session: AsyncSession, account_id: str, run_id: str, workflow_id: str | None = None
) -> Run | None:
    query = sa.select(Run).where(Run.id == run_id, Run.account_id == account_id)
    if workflow_id is not None:
        query = query.where(Run.workflow_id == workflow_id)
    return await session.scalar(query)


async def by_id(session: AsyncSession, run_id: str) -> Run | None:
    return await session.get(Run, run_id)


async def node_runs(session: AsyncSession, run_id: str) -> list[NodeRun]:
    query = sa.select(NodeRun).where(NodeRun.run_id == run_id).order_by(NodeRun.position)
    return list(await session.scalars(query))


async def running_ids(session: AsyncSession) -> list[str]:
    query = sa.select(Run.id).where(Run.status == "running").order_by(Run.created_at)
    return list(await session.scalars(query))


async def running_ids_of_workflow(session: AsyncSession, workflow_id: str) -> list[str]:
    query = sa.select(Run.id).where(Run.workflow_id == workflow_id, Run.status == "running")
    return list(await session.scalars(query))


async def request_cancel(session: AsyncSession, run_ids: list[str]) -> None:
    if run_ids:
        await session.execute(
            sa.update(Run)
            .where(Run.id.in_(run_ids), Run.status == "running")
            .values(cancel_requested=True)
        )


async def artifact(session: AsyncSession, account_id: str, artifact_id: str) -> Artifact | None:
    return await session.scalar(
        sa.select(Artifact).where(Artifact.id == artifact_id, Artifact.account_id == account_id)
    )


async def artifact_any(session: AsyncSession, artifact_id: str) -> Artifact | None:
    return await session.get(Artifact, artifact_id)


async def artifacts_by_id(session: AsyncSession, ids: list[str]) -> dict[str, Artifact]:
    if not ids:
        return {}
    rows = await session.scalars(sa.select(Artifact).where(Artifact.id.in_(ids)))
    return {a.id: a for a in rows}


async def cached_artifact(
    session: AsyncSession, account_id: str, cache_key: str
) -> Artifact | None:
    return await session.scalar(
        sa.select(Artifact)
        .join(CacheEntry, CacheEntry.artifact_id == Artifact.id)
        .where(CacheEntry.account_id == account_id, CacheEntry.cache_key == cache_key)
    )


async def events_after(session: AsyncSession, run_id: str, after_seq: int) -> list[RunEvent]:
    query = (
        sa.select(RunEvent)
        .where(RunEvent.run_id == run_id, RunEvent.seq > after_seq)
        .order_by(RunEvent.seq)
    )
    return list(await session.scalars(query))


async def last_seq(session: AsyncSession, run_id: str) -> int:
    value = await session.scalar(
        sa.select(sa.func.max(RunEvent.seq)).where(RunEvent.run_id == run_id)
    )
    return int(value or 0)
