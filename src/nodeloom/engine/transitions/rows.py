"""The rows a batch adds (artifacts, ledger entries, events, a created run's nodes), gathered
once per table whether the run is updated (apply.py) or created (create.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

import nodeloom.engine.transitions.statements as sql
from nodeloom.db.prepared import Prepared
from nodeloom.engine.transitions.changes import Batch, NodeEnd
from nodeloom.events.model import Event
from nodeloom.states import StaleTransition


@dataclass
class Rows:
    """Rows a batch adds, inserted once per table."""

    ledger: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)  # of a run created
    # Balance changes, made last (``apply``): a new run's hold (amount, given back at once),
    # an ended run's release.
    hold: tuple[int, int] | None = None
    release: int = 0


def inserts(rows: Rows, events: list[Event]) -> list[tuple[Prepared, Any]]:
    """The rows a batch adds, as the parts of a combined statement (``apply``'s and
    ``created_alone``'s)."""
    return [
        (sql.INSERT_NODES, rows.nodes),
        (sql.INSERT_ARTIFACT, rows.artifacts),
        # Unique (run, node, kind): a second charge for the same node fails loudly.
        (sql.INSERT_LEDGER, rows.ledger),
        (sql.INSERT_EVENTS, [_event_row(e) for e in events]),
    ]


def node_row(
    run_id: str,
    node_id: str,
    position: int,
    item_index: int | None,
    type_: str,
    status: str,
    queued_at: datetime | None = None,
) -> dict[str, Any]:
    """A node row as it is first written: not started, nothing produced or charged."""
    return {
        "run_id": run_id,
        "node_id": node_id,
        "position": position,
        "item_index": item_index,
        "type": type_,
        "status": status,
        "artifact_id": None,
        "credits_used": 0,
        "cached": False,
        "started_at": None,
        "finished_at": None,
        "error": None,
        "attempts": 0,
        "claimed_by": None,
        "queued_at": queued_at,
        "ports": None,
    }


def ledger_row(batch: Batch, node_id: str, kind: str, amount: int, at: datetime) -> dict[str, Any]:
    return {
        "account_id": batch.account_id,
        "run_id": batch.run_id,
        "node_id": node_id,
        "kind": kind,
        "amount": amount,
        "note": None,
        "created_at": at,
    }


def end_rows(batch: Batch, end: NodeEnd, rows: Rows) -> None:
    """What a node's end adds: its new artifact (with the cache key it answers), its charge."""
    if end.new_artifact is not None:
        art = end.new_artifact
        rows.artifacts.append(
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
                "data": art.data,
                "cache_key": end.cache_key,
            }
        )
    if end.credits > 0:
        rows.ledger.append(ledger_row(batch, end.node_id, "charge", end.credits, end.at))


def check_cached(conn: Connection, batch: Batch, end: NodeEnd) -> None:
    """A cache hit reuses another run's artifact: make sure retention did not remove it since
    the look-up (the step then rolls back and the run is resumed without it)."""
    if end.cached and end.artifact_id is not None:
        if sql.ARTIFACT_EXISTS.run(conn, {"id": end.artifact_id}).first() is None:
            raise StaleTransition(f"run {batch.run_id}: cached artifact {end.artifact_id} gone")


def numbered(batch: Batch, next_seq: int) -> list[Event]:
    """The batch's events, numbered from ``next_seq`` in the order they were recorded."""
    return [
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


def _event_row(e: Event) -> dict[str, Any]:
    return {
        "run_id": e.run_id,
        "seq": e.seq,
        "type": e.type,
        "node_id": e.node_id,
        "data": e.data,
        "ts": e.ts,
    }
