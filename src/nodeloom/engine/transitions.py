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
from sqlalchemy.engine import Connection

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
    claimed_by: str | None = None  # who the started nodes are claimed by
    ended: list[_NodeEnd] = field(default_factory=list)
    bulk: list[tuple[NodeStatus, list[str], datetime, dict[str, Any] | None]] = field(
        default_factory=list
    )
    queued: list[tuple[str, datetime]] = field(default_factory=list)
    run_end: tuple[RunStatus, datetime, dict[str, Any] | None, int, int] | None = None
    events: list[tuple[str, str | None, dict[str, Any], datetime]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.started or self.ended or self.bulk or self.queued or self.run_end or self.events
        )

    def event(self, type_: str, at: datetime, node_id: str | None = None, **data: Any) -> None:
        self.events.append((type_, node_id, data, at))

    def start_node(self, node_id: str, at: datetime, claimed_by: str) -> None:
        """Claimed by ``claimed_by`` (one claimant per batch) and started."""
        assert self.claimed_by in (None, claimed_by), "one claimant per batch"
        self.claimed_by = claimed_by
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

    def queue_nodes(self, node_ids: list[str], at: datetime) -> None:
        """Runnable now (from pending), or again (from running: the process that ran them
        died). No event: nothing started or finished; the run status shows ``queued``."""
        self.queued.extend((node_id, at) for node_id in node_ids)

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


# Statements are built once: building a statement costs more than executing it.
_NODE = _t(NodeRun)
_RUN = _t(Run)
_ACCOUNT = _t(Account)
_LEDGER = _t(CreditEntry)
_CACHE = _t(CacheEntry)
_ARTIFACT = _t(Artifact)
_EVENTS = _t(RunEvent)
_IDS: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)

_QUEUE = (
    sa.update(_NODE)
    .where(
        _NODE.c.run_id == sa.bindparam("run"),
        _NODE.c.node_id.in_(_IDS),
        _NODE.c.status.in_(_from(NodeStatus.QUEUED)),
    )
    .values(
        status=NodeStatus.QUEUED.value,
        queued_at=sa.bindparam("at", type_=_NODE.c.queued_at.type),
        started_at=None,
        claimed_by=None,
    )
)
_START = (
    sa.update(_NODE)
    .where(
        _NODE.c.run_id == sa.bindparam("run"),
        _NODE.c.node_id.in_(_IDS),
        _NODE.c.status.in_(_from(NodeStatus.RUNNING)),
    )
    .values(
        status=NodeStatus.RUNNING.value,
        started_at=sa.bindparam("at", type_=_NODE.c.started_at.type),
        claimed_by=sa.bindparam("claimed_by"),
        attempts=_NODE.c.attempts + 1,
    )
)


def _end_statement(status: NodeStatus) -> sa.Update:
    return (
        sa.update(_NODE)
        .where(
            _NODE.c.run_id == sa.bindparam("run"),
            _NODE.c.node_id == sa.bindparam("node"),
            _NODE.c.status.in_(_from(status)),
        )
        .values(
            status=status.value,
            finished_at=sa.bindparam("at", type_=_NODE.c.finished_at.type),
            artifact_id=sa.bindparam("artifact"),
            credits_used=sa.bindparam("credits"),
            cached=sa.bindparam("cached"),
            cache_key=sa.bindparam("key"),
            error=sa.bindparam("error", type_=_NODE.c.error.type),
        )
    )


def _bulk_statement(status: NodeStatus) -> sa.Update:
    return (
        sa.update(_NODE)
        .where(
            _NODE.c.run_id == sa.bindparam("run"),
            _NODE.c.node_id.in_(_IDS),
            _NODE.c.status.in_(_from(status)),
        )
        .values(
            status=status.value,
            finished_at=sa.bindparam("at", type_=_NODE.c.finished_at.type),
            error=sa.bindparam("error", type_=_NODE.c.error.type),
        )
    )


_END = {status: _end_statement(status) for status in (NodeStatus.COMPLETED, NodeStatus.FAILED)}
_BULK = {status: _bulk_statement(status) for status in (NodeStatus.SKIPPED, NodeStatus.CANCELLED)}


def _run_end_statement(status: RunStatus) -> sa.Update:
    return (
        sa.update(_RUN)
        .where(
            _RUN.c.id == sa.bindparam("run"), _RUN.c.status.in_([s.value for s in RUN_FROM[status]])
        )
        .values(
            status=status.value,
            finished_at=sa.bindparam("at", type_=_RUN.c.finished_at.type),
            error=sa.bindparam("error", type_=_RUN.c.error.type),
            credits_used=sa.bindparam("used"),
        )
    )


_RUN_END = {
    status: _run_end_statement(status) for status in (RunStatus.COMPLETED, RunStatus.FAILED)
}
_RELEASE = (
    sa.update(_ACCOUNT)
    .where(_ACCOUNT.c.id == sa.bindparam("account"))
    .values(credits_balance=_ACCOUNT.c.credits_balance + sa.bindparam("amount"))
)
_INSERT_LEDGER = sa.insert(_LEDGER)
_ARTIFACT_EXISTS = sa.select(_ARTIFACT.c.id).where(_ARTIFACT.c.id == sa.bindparam("id"))
_INSERT_ARTIFACT = sa.insert(_ARTIFACT)
_INSERT_EVENTS = sa.insert(_EVENTS)


def apply(conn: Connection, batch: Batch, next_seq: int) -> list[Event]:
    """Write the batch; return its events with their seq (starting at ``next_seq``).
    Raises StaleTransition (the transaction rolls back) when a change no longer applies."""
    run_id = batch.run_id
    if batch.queued:
        ids = [node_id for node_id, _ in batch.queued]
        result = conn.execute(_QUEUE, {"run": run_id, "ids": ids, "at": batch.queued[0][1]})
        if result.rowcount != len(ids):
            raise StaleTransition(f"run {run_id}: nodes {ids} were not all pending or running")
    # Starts before ends: a node the in-process driver started and finished within one
    # step (an instant node) must be running when its end is written.
    for at, ids in _grouped_by_time(batch.started):
        result = conn.execute(
            _START, {"run": run_id, "ids": ids, "at": at, "claimed_by": batch.claimed_by}
        )
        if result.rowcount != len(ids):
            raise StaleTransition(f"run {run_id}: nodes {ids} were not all pending or queued")
    ledger: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    cache: list[dict[str, Any]] = []
    for end in batch.ended:
        _end_node(conn, batch, end, ledger, artifacts, cache)
    if artifacts:
        conn.execute(_INSERT_ARTIFACT, artifacts)
    if cache:
        conn.execute(insert_ignoring_conflicts(conn, _CACHE), cache)
    for status, node_ids, at, error in batch.bulk:
        conn.execute(_BULK[status], {"run": run_id, "ids": node_ids, "at": at, "error": error})
    if batch.run_end is not None:
        _end_run(conn, batch, ledger)
    if ledger:
        # Unique (run, node, kind): a second charge for the same node fails loudly.
        conn.execute(_INSERT_LEDGER, ledger)
    return write_events(conn, batch, next_seq)


def _grouped_by_time(started: list[tuple[str, datetime]]) -> list[tuple[datetime, list[str]]]:
    """Nodes started at the same moment share one UPDATE (the usual case: one scheduling
    pass); a chain of instant nodes started one after the other keeps each its own time."""
    groups: dict[datetime, list[str]] = {}
    for node_id, at in started:
        groups.setdefault(at, []).append(node_id)
    return list(groups.items())


def _end_node(
    conn: Connection,
    batch: Batch,
    end: _NodeEnd,
    ledger: list[dict[str, Any]],
    artifacts: list[dict[str, Any]],
    cache: list[dict[str, Any]],
) -> None:
    if end.new_artifact is not None:
        art = end.new_artifact
        artifacts.append(
            {
                "id": art.id,
                "account_id": batch.account_id,
                "run_id": batch.run_id,
                "workflow_id": batch.workflow_id,
                "node_id": end.node_id,
                "content_type": art.content_type,
                "size_bytes": art.size_bytes,
                "sha256": art.sha256,
                "width": art.width,
                "height": art.height,
                "duration_ms": art.duration_ms,
                "created_at": end.at,
            }
        )
    if end.cached and end.artifact_id is not None:
        # A cache hit reuses another run's artifact: make sure retention did not remove it
        # since the look-up (the step then rolls back and the run is resumed without it).
        if conn.execute(_ARTIFACT_EXISTS, {"id": end.artifact_id}).first() is None:
            raise StaleTransition(f"run {batch.run_id}: cached artifact {end.artifact_id} gone")
    result = conn.execute(
        _END[end.status],
        {
            "run": batch.run_id,
            "node": end.node_id,
            "at": end.at,
            "artifact": end.artifact_id,
            "credits": end.credits,
            "cached": end.cached,
            "key": end.cache_key,
            "error": end.error,
        },
    )
    if result.rowcount != 1:
        raise StaleTransition(f"run {batch.run_id}: node {end.node_id} is no longer running")
    if end.credits > 0:
        ledger.append(
            {
                "account_id": batch.account_id,
                "run_id": batch.run_id,
                "node_id": end.node_id,
                "kind": "charge",
                "amount": end.credits,
                "note": None,
                "created_at": end.at,
            }
        )
    if end.cache_key is not None and not end.cached and end.artifact_id is not None:
        cache.append(
            {
                "account_id": batch.account_id,
                "cache_key": end.cache_key,
                "artifact_id": end.artifact_id,
                "created_at": end.at,
            }
        )


def _end_run(conn: Connection, batch: Batch, ledger: list[dict[str, Any]]) -> None:
    assert batch.run_end is not None
    status, at, error, credits_used, release = batch.run_end
    result = conn.execute(
        _RUN_END[status], {"run": batch.run_id, "at": at, "error": error, "used": credits_used}
    )
    if result.rowcount != 1:
        raise StaleTransition(f"run {batch.run_id} is no longer running")
    if release > 0:
        conn.execute(_RELEASE, {"account": batch.account_id, "amount": release})
        ledger.append(
            {
                "account_id": batch.account_id,
                "run_id": batch.run_id,
                "node_id": "",
                "kind": "release",
                "amount": release,
                "note": None,
                "created_at": at,
            }
        )


def write_events(conn: Connection, batch: Batch, next_seq: int) -> list[Event]:
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
    conn.execute(
        _INSERT_EVENTS,
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
