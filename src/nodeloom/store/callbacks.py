"""Run callback deliveries, their attempt log and the account's signing secret (functions
of a Core connection, run by ``db.read`` / ``db.write``). The rules they serve are in
engine/callbacks.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Account, CallbackAttempt, CallbackDelivery, Run
from nodeloom.states import RunStatus
from nodeloom.store import Record
from nodeloom.store import runs as run_store

DELIVERIES = cast(sa.Table, CallbackDelivery.__table__)
ATTEMPTS = cast(sa.Table, CallbackAttempt.__table__)
_RUNS = cast(sa.Table, Run.__table__)
_ACCOUNTS = cast(sa.Table, Account.__table__)
PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"


def secret_of(conn: Connection, account_id: str) -> Record | None:
    """(callback_secret_encrypted, callback_secret_created_at) of the account."""
    return conn.execute(
        sa.select(
            _ACCOUNTS.c.callback_secret_encrypted, _ACCOUNTS.c.callback_secret_created_at
        ).where(_ACCOUNTS.c.id == account_id)
    ).first()


def has_secret(conn: Connection, account_id: str) -> bool:
    row = secret_of(conn, account_id)
    return row is not None and row.callback_secret_encrypted is not None


def set_secret(conn: Connection, account_id: str, encrypted: str, at: datetime) -> None:
    conn.execute(
        sa.update(_ACCOUNTS)
        .where(_ACCOUNTS.c.id == account_id)
        .values(callback_secret_encrypted=encrypted, callback_secret_created_at=at)
    )


def due(conn: Connection, now: datetime, limit: int) -> list[str]:
    """Pending deliveries whose run has ended, whose next attempt is due and that nobody
    holds a live claim on."""
    query = (
        sa.select(DELIVERIES.c.id)
        .join(_RUNS, _RUNS.c.id == DELIVERIES.c.run_id)
        .where(
            DELIVERIES.c.state == PENDING,
            DELIVERIES.c.next_attempt_at <= now,
            sa.or_(DELIVERIES.c.claimed_until.is_(None), DELIVERIES.c.claimed_until < now),
            _RUNS.c.status != RunStatus.RUNNING.value,
        )
        .order_by(DELIVERIES.c.next_attempt_at)
        .limit(limit)
    )
    return list(conn.execute(query).scalars())


def claim(conn: Connection, delivery_id: str, now: datetime, until: datetime) -> bool:
    """Take the delivery for one attempt: true for exactly one of any number of processes
    asking at once (the UPDATE names the state it read)."""
    result = conn.execute(
        sa.update(DELIVERIES)
        .where(
            DELIVERIES.c.id == delivery_id,
            DELIVERIES.c.state == PENDING,
            sa.or_(DELIVERIES.c.claimed_until.is_(None), DELIVERIES.c.claimed_until < now),
        )
        .values(claimed_until=until)
    )
    return result.rowcount == 1


def for_sending(
    conn: Connection, delivery_id: str
) -> tuple[Record, Record, list[Record], str | None] | None:
    """The delivery, its run (summary columns and input), the run's nodes and the account's
    encrypted signing secret; None when the run is gone."""
    delivery = conn.execute(sa.select(DELIVERIES).where(DELIVERIES.c.id == delivery_id)).first()
    if delivery is None:
        return None
    parents = _RUNS.alias("parent_runs")
    run = conn.execute(
        sa.select(
            *run_store.SUMMARY_COLUMNS,
            _RUNS.c.input,
            parents.c.workflow_id.label("parent_workflow_id"),
        )
        .select_from(_RUNS.outerjoin(parents, parents.c.id == _RUNS.c.parent_run_id))
        .where(_RUNS.c.id == delivery.run_id)
    ).first()
    if run is None:
        return None
    secret = secret_of(conn, delivery.account_id)
    encrypted = secret.callback_secret_encrypted if secret is not None else None
    return delivery, run, run_store.node_runs(conn, delivery.run_id), encrypted


def give_up(conn: Connection, delivery_id: str, at: datetime) -> None:
    conn.execute(
        sa.update(DELIVERIES)
        .where(DELIVERIES.c.id == delivery_id, DELIVERIES.c.state == PENDING)
        .values(state=FAILED, finished_at=at, claimed_until=None)
    )


def record_attempt(
    conn: Connection,
    delivery_id: str,
    *,
    attempt: int,
    at: datetime,
    duration_ms: int,
    status_code: int | None,
    response: str | None,
    error: str | None,
    delivered: bool,
    next_attempt_at: datetime | None,
) -> None:
    """The attempt's log row and the delivery moved on: delivered, failed for good (no next
    attempt), or pending again from ``next_attempt_at`` with its claim released."""
    conn.execute(
        sa.insert(ATTEMPTS).values(
            delivery_id=delivery_id,
            attempt=attempt,
            at=at,
            duration_ms=duration_ms,
            status_code=status_code,
            response=response,
            error=error,
        )
    )
    values: dict[str, Any] = {"attempts": attempt, "claimed_until": None}
    if delivered:
        values.update(state=DELIVERED, finished_at=at)
    elif next_attempt_at is None:
        values.update(state=FAILED, finished_at=at)
    else:
        values.update(next_attempt_at=next_attempt_at)
    conn.execute(sa.update(DELIVERIES).where(DELIVERIES.c.id == delivery_id).values(**values))


def of_run(conn: Connection, run_id: str) -> list[tuple[Record, list[Record]]]:
    """The run's deliveries (at most one today), each with its attempts in order."""
    deliveries = conn.execute(
        sa.select(DELIVERIES).where(DELIVERIES.c.run_id == run_id).order_by(DELIVERIES.c.created_at)
    ).all()
    out = []
    for delivery in deliveries:
        attempts = conn.execute(
            sa.select(ATTEMPTS)
            .where(ATTEMPTS.c.delivery_id == delivery.id)
            .order_by(ATTEMPTS.c.attempt)
        ).all()
        out.append((delivery, list(attempts)))
    return out


def delete_of_runs(conn: Connection, run_ids: list[str]) -> None:
    """Retention: the deliveries of runs being removed, with their log."""
    ids: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)
    of_runs = sa.select(DELIVERIES.c.id).where(DELIVERIES.c.run_id.in_(ids))
    conn.execute(sa.delete(ATTEMPTS).where(ATTEMPTS.c.delivery_id.in_(of_runs)), {"ids": run_ids})
    conn.execute(sa.delete(DELIVERIES).where(DELIVERIES.c.run_id.in_(ids)), {"ids": run_ids})
