"""Every change of run and node state goes through here, as a ``Batch`` applied in one
transaction together with its artifact rows, credit-ledger rows and events.

The runner collects what one step of a run changed (nodes finished, nodes started, the run
ended) into a batch, so a step costs one commit however many transitions it holds. Events
get their ``seq`` when the batch is applied, under the runner's commit lock, so the log has
no gaps and commit order equals ``seq`` order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from nodeloom.db.dialect import insert_ignoring_conflicts
from nodeloom.db.models import (
    Account,
    Artifact,
    CacheEntry,
    CreditEntry,
    NodeRun,
    Run,
    RunEvent,
)
from nodeloom.engine.states import NODE_FROM, RUN_FROM, NodeStatus, RunStatus, StaleTransition
from nodeloom.events.model import Event


@dataclass(frozen=True)
class NewArtifact:
    id: str
    content_type: str
    size_bytes: int
    sha256: str
    width: int | None
    height: int | None
    duration_ms: int | None


@dataclass
class _NodeEnd:
    node_id: str
    status: NodeStatus
    at: datetime
    artifact_id: str | None = None
    new_artifact: NewArtifact | None = None
    credits: int = 0
    cached: bool = False
    cache_key: str | None = None
    error: dict[str, Any] | None = None


@dataclass
class Batch:
    run_id: str
    workflow_id: str
    account_id: str
    started: list[tuple[str, datetime]] = field(default_factory=list)
    ended: list[_NodeEnd] = field(default_factory=list)
    bulk: list[tuple[NodeStatus, list[str], datetime, dict[str, Any] | None]] = field(
        default_factory=list
    )
    reset: list[str] = field(default_factory=list)
    run_end: tuple[RunStatus, datetime, dict[str, Any] | None, int, int] | None = None
    events: list[tuple[str, str | None, dict[str, Any], datetime]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.started or self.ended or self.bulk or self.reset or self.run_end or self.events
        )

    def event(self, type_: str, at: datetime, node_id: str | None = None, **data: Any) -> None:
        self.events.append((type_, node_id, data, at))

    def start_node(self, node_id: str, at: datetime) -> None:
        self.started.append((node_id, at))
        self.event("node.started", at, node_id)

    def complete_node(
        self,
        node_id: str,
        at: datetime,
        *,
        artifact_id: str,
        new_artifact: NewArtifact | None,
        credits: int,
        cached: bool,
        cache_key: str | None,
    ) -> None:
        self.ended.append(
            _NodeEnd(
                node_id,
                NodeStatus.COMPLETED,
                at,
                artifact_id=artifact_id,
                new_artifact=new_artifact,
                credits=credits,
                cached=cached,
                cache_key=cache_key,
            )
        )
        self.event(
            "node.completed",
            at,
            node_id,
            artifact_id=artifact_id,
            credits_used=credits,
            cached=cached,
        )

    def fail_node(self, node_id: str, at: datetime, error: dict[str, Any]) -> None:
        self.ended.append(_NodeEnd(node_id, NodeStatus.FAILED, at, error=error))
        self.event("node.failed", at, node_id, error=error)

    def skip_nodes(self, node_ids: list[str], at: datetime, because: str) -> None:
        if node_ids:
            reason = {"code": "upstream_failed", "message": f"upstream node {because} failed"}
            self.bulk.append((NodeStatus.SKIPPED, node_ids, at, reason))
            for node_id in node_ids:
                self.event("node.skipped", at, node_id, reason=reason)

    def cancel_nodes(self, node_ids: list[str], at: datetime) -> None:
        if node_ids:
            self.bulk.append((NodeStatus.CANCELLED, node_ids, at, None))
            for node_id in node_ids:
                self.event("node.cancelled", at, node_id)

    def reset_nodes(self, node_ids: list[str]) -> None:
        """Nodes interrupted by a crash go back to pending (no event: nothing finished)."""
        self.reset.extend(node_ids)

    def finish_run(
        self,
        status: RunStatus,
        at: datetime,
        error: dict[str, Any] | None,
        *,
        credits_used: int,
        release: int,
        duration_ms: int,
    ) -> None:
        self.run_end = (status, at, error, credits_used, release)
        data: dict[str, Any] = {"credits_used": credits_used, "duration_ms": duration_ms}
        if error is not None:
            data["error"] = error
        self.event(f"run.{status.value}", at, None, **data)


def _t(model: type[Any]) -> sa.Table:
    table: sa.Table = model.__table__
    return table


def _from(status: NodeStatus) -> list[str]:
    return [s.value for s in NODE_FROM[status]]


async def apply(session: AsyncSession, batch: Batch, next_seq: int) -> list[Event]:
    """Write the batch; return its events with their seq (starting at ``next_seq``).
    Raises StaleTransition (the caller rolls back) when a change no longer applies."""
    run_id = batch.run_id
    node = _t(NodeRun)
    if batch.reset:
        await session.execute(
            sa.update(node)
            .where(
                node.c.run_id == run_id,
                node.c.node_id.in_(batch.reset),
                node.c.status.in_(_from(NodeStatus.PENDING)),
            )
            .values(status=NodeStatus.PENDING.value, started_at=None)
        )
    for end in batch.ended:
        await _end_node(session, batch, end)
    for status, node_ids, at, error in batch.bulk:
        await session.execute(
            sa.update(node)
            .where(
                node.c.run_id == run_id,
                node.c.node_id.in_(node_ids),
                node.c.status.in_(_from(status)),
            )
            .values(status=status.value, finished_at=at, error=error)
        )
    if batch.started:
        ids = [node_id for node_id, _ in batch.started]
        result = await session.execute(
            sa.update(node)
            .where(
                node.c.run_id == run_id,
                node.c.node_id.in_(ids),
                node.c.status.in_(_from(NodeStatus.RUNNING)),
            )
            .values(
                status=NodeStatus.RUNNING.value,
                started_at=batch.started[0][1],
                attempts=node.c.attempts + 1,
            )
        )
        if result.rowcount != len(ids):  # type: ignore[attr-defined]
            raise StaleTransition(f"run {run_id}: nodes {ids} were not all pending")
    if batch.run_end is not None:
        await _end_run(session, batch)
    return await _write_events(session, batch, next_seq)


async def _end_node(session: AsyncSession, batch: Batch, end: _NodeEnd) -> None:
    node = _t(NodeRun)
    if end.new_artifact is not None:
        art = end.new_artifact
        await session.execute(
            sa.insert(_t(Artifact)).values(
                id=art.id,
                account_id=batch.account_id,
                run_id=batch.run_id,
                workflow_id=batch.workflow_id,
                node_id=end.node_id,
                content_type=art.content_type,
                size_bytes=art.size_bytes,
                sha256=art.sha256,
                width=art.width,
                height=art.height,
                duration_ms=art.duration_ms,
                created_at=end.at,
            )
        )
    result = await session.execute(
        sa.update(node)
        .where(
            node.c.run_id == batch.run_id,
            node.c.node_id == end.node_id,
            node.c.status.in_(_from(end.status)),
        )
        .values(
            status=end.status.value,
            finished_at=end.at,
            artifact_id=end.artifact_id,
            credits_used=end.credits,
            cached=end.cached,
            cache_key=end.cache_key,
            error=end.error,
        )
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise StaleTransition(f"run {batch.run_id}: node {end.node_id} is no longer running")
    if end.credits > 0:
        # Unique (run, node, kind): a second charge for the same node fails loudly.
        await session.execute(
            sa.insert(_t(CreditEntry)).values(
                account_id=batch.account_id,
                run_id=batch.run_id,
                node_id=end.node_id,
                kind="charge",
                amount=end.credits,
                created_at=end.at,
            )
        )
    if end.cache_key is not None and not end.cached and end.artifact_id is not None:
        await session.execute(
            insert_ignoring_conflicts(session, _t(CacheEntry)).values(
                account_id=batch.account_id,
                cache_key=end.cache_key,
                artifact_id=end.artifact_id,
                created_at=end.at,
            )
        )


async def _end_run(session: AsyncSession, batch: Batch) -> None:
    assert batch.run_end is not None
    status, at, error, credits_used, release = batch.run_end
    runs = _t(Run)
    result = await session.execute(
        sa.update(runs)
        .where(runs.c.id == batch.run_id, runs.c.status.in_([s.value for s in RUN_FROM[status]]))
        .values(
            status=status.value,
            finished_at=at,
            error=error,
            credits_used=credits_used,
            lease_owner=None,
            lease_expires_at=None,
        )
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise StaleTransition(f"run {batch.run_id} is no longer running")
    if release > 0:
        accounts = _t(Account)
        await session.execute(
            sa.update(accounts)
            .where(accounts.c.id == batch.account_id)
            .values(credits_balance=accounts.c.credits_balance + release)
        )
        await session.execute(
            sa.insert(_t(CreditEntry)).values(
                account_id=batch.account_id,
                run_id=batch.run_id,
                node_id="",
                kind="release",
                amount=release,
                created_at=at,
            )
        )


async def _write_events(session: AsyncSession, batch: Batch, next_seq: int) -> list[Event]:
    if not batch.events:
        return []
    events = [
        Event(
            type=type_,
            seq=next_seq + i,
            ts=at,
            run_id=batch.run_id,
            workflow_id=batch.workflow_id,
            account_id=batch.account_id,
            node_id=node_id,
            data=data,
        )
        for i, (type_, node_id, data, at) in enumerate(batch.events)
    ]
    await session.execute(
        sa.insert(_t(RunEvent)),
        [
            {
                "run_id": e.run_id,
                "seq": e.seq,
                "type": e.type,
                "node_id": e.node_id,
                "data": e.data,
                "ts": e.ts,
            }
            for e in events
        ],
    )
    return events
