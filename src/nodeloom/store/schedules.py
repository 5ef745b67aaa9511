"""Schedules, scoped to their account and workflow, and the firing claim (functions of a
Core connection, run by ``db.read`` / ``db.write``). The rules are in engine/schedules.py."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Account, Schedule, Workflow, utcnow
from nodeloom.store import Record, rows
from nodeloom.store.paging import newest_first

SCHEDULES = cast(sa.Table, Schedule.__table__)
_WORKFLOWS = cast(sa.Table, Workflow.__table__)
_ACCOUNTS = cast(sa.Table, Account.__table__)


def create(conn: Connection, *, account_id: str, workflow_id: str, **values: Any) -> Record:
    now = utcnow()
    return rows.insert(
        conn,
        SCHEDULES,
        id=str(uuid.uuid4()),
        account_id=account_id,
        workflow_id=workflow_id,
        created_at=now,
        updated_at=now,
        last_fired_at=None,
        last_run_id=None,
        last_error=None,
        **values,
    )


def count(conn: Connection, account_id: str, workflow_id: str | None = None) -> int:
    """The account's schedules (of ``workflow_id`` only, when given), paused ones included."""
    query = sa.select(sa.func.count()).where(SCHEDULES.c.account_id == account_id)
    if workflow_id is not None:
        query = query.where(SCHEDULES.c.workflow_id == workflow_id)
    return int(conn.execute(query).scalar_one())


def page(
    conn: Connection, account_id: str, workflow_id: str, limit: int, cursor: str | None
) -> list[Record]:
    """Newest first, ``limit + 1`` rows so the caller can tell whether a next page exists."""
    query = sa.select(SCHEDULES).where(
        SCHEDULES.c.account_id == account_id, SCHEDULES.c.workflow_id == workflow_id
    )
    return list(conn.execute(newest_first(query, SCHEDULES, limit, cursor)).all())


def _one(account_id: str, workflow_id: str, schedule_id: str) -> Any:
    return sa.and_(
        SCHEDULES.c.id == schedule_id,
        SCHEDULES.c.account_id == account_id,
        SCHEDULES.c.workflow_id == workflow_id,
    )


def get(conn: Connection, account_id: str, workflow_id: str, schedule_id: str) -> Record | None:
    return conn.execute(
        sa.select(SCHEDULES).where(_one(account_id, workflow_id, schedule_id))
    ).first()


def update(
    conn: Connection, account_id: str, workflow_id: str, schedule_id: str, values: dict[str, Any]
) -> Record | None:
    """The schedule as changed, or None when it is not there."""
    where = _one(account_id, workflow_id, schedule_id)
    return rows.update(conn, SCHEDULES, where, **values, updated_at=utcnow())


def delete(conn: Connection, account_id: str, workflow_id: str, schedule_id: str) -> bool:
    result = conn.execute(sa.delete(SCHEDULES).where(_one(account_id, workflow_id, schedule_id)))
    return bool(result.rowcount)


@dataclass(frozen=True)
class DueSchedule:
    id: str
    account_id: str
    workflow_id: str
    cron: str
    timezone: str
    next_run_at: datetime
    input: dict[str, Any] | None
    callback_url: str | None
    plan: str


def due(conn: Connection, now: datetime, limit: int) -> list[DueSchedule]:
    """Active schedules whose time has come, of workflows that still exist and accounts
    that are not disabled, with the owner's current plan."""
    query = (
        sa.select(
            SCHEDULES.c.id,
            SCHEDULES.c.account_id,
            SCHEDULES.c.workflow_id,
            SCHEDULES.c.cron,
            SCHEDULES.c.timezone,
            SCHEDULES.c.next_run_at,
            SCHEDULES.c.input,
            SCHEDULES.c.callback_url,
            _ACCOUNTS.c.plan,
        )
        .join(_WORKFLOWS, _WORKFLOWS.c.id == SCHEDULES.c.workflow_id)
        .join(_ACCOUNTS, _ACCOUNTS.c.id == SCHEDULES.c.account_id)
        .where(
            SCHEDULES.c.active.is_(True),
            SCHEDULES.c.next_run_at <= now,
            _WORKFLOWS.c.deleted_at.is_(None),
            _ACCOUNTS.c.disabled_at.is_(None),
        )
        .order_by(SCHEDULES.c.next_run_at)
        .limit(limit)
    )
    return [DueSchedule(*row) for row in conn.execute(query).all()]


def claim(
    conn: Connection,
    schedule_id: str,
    was: datetime,
    following: datetime | None,
    now: datetime,
) -> bool:
    """Move ``next_run_at`` from ``was`` (the value read) to ``following``: true for exactly
    one process of any number trying at once."""
    result = conn.execute(
        sa.update(SCHEDULES)
        .where(
            SCHEDULES.c.id == schedule_id,
            SCHEDULES.c.active.is_(True),
            SCHEDULES.c.next_run_at == was,
        )
        .values(next_run_at=following, last_fired_at=now)
    )
    return result.rowcount == 1


def record_firing(
    conn: Connection,
    schedule_id: str,
    at: datetime,
    run_id: str | None,
    error: dict[str, str] | None,
) -> None:
    conn.execute(
        sa.update(SCHEDULES)
        .where(SCHEDULES.c.id == schedule_id)
        .values(last_fired_at=at, last_run_id=run_id, last_error=error)
    )
