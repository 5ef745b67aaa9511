"""Apps and the runs started through them (functions of a Core connection, run by
``db.read`` / ``db.write``). The rules — what a form may show, who may open an app, what it
may spend — are in engine/apps.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db import dialect
from nodeloom.db.models import App, AppChallenge, AppRun, Run, Workflow, WorkflowVersion, utcnow
from nodeloom.ids import uuid7
from nodeloom.states import RunStatus
from nodeloom.store import Record, rows
from nodeloom.store.paging import newest_first

APPS = cast(sa.Table, App.__table__)
APP_RUNS = cast(sa.Table, AppRun.__table__)
APP_CHALLENGES = cast(sa.Table, AppChallenge.__table__)
_RUNS = cast(sa.Table, Run.__table__)
_WORKFLOWS = cast(sa.Table, Workflow.__table__)
_VERSIONS = cast(sa.Table, WorkflowVersion.__table__)


def version_graph(
    conn: Connection, account_id: str, workflow_id: str, number: int
) -> dict[str, Any] | None:
    """The graph of saved version ``number`` of the account's (not deleted) workflow."""
    value = conn.execute(
        sa.select(_VERSIONS.c.graph_json)
        .join(_WORKFLOWS, _WORKFLOWS.c.id == _VERSIONS.c.workflow_id)
        .where(
            _VERSIONS.c.workflow_id == workflow_id,
            _VERSIONS.c.number == number,
            _WORKFLOWS.c.account_id == account_id,
            _WORKFLOWS.c.deleted_at.is_(None),
        )
    ).scalar_one_or_none()
    return cast(dict[str, Any] | None, value)


def current_version(conn: Connection, account_id: str, workflow_id: str) -> int | None:
    value = conn.execute(
        sa.select(_WORKFLOWS.c.version).where(
            _WORKFLOWS.c.id == workflow_id,
            _WORKFLOWS.c.account_id == account_id,
            _WORKFLOWS.c.deleted_at.is_(None),
        )
    ).scalar_one_or_none()
    return None if value is None else int(value)


def create(conn: Connection, *, account_id: str, **values: Any) -> Record:
    now = utcnow()
    return rows.insert(
        conn, APPS, id=uuid7(), account_id=account_id, created_at=now, updated_at=now, **values
    )


def page(
    conn: Connection,
    account_id: str,
    limit: int,
    cursor: str | None,
    workflow_id: str | None = None,
) -> list[Record]:
    """Newest first, ``limit + 1`` rows so the caller can tell whether a next page exists;
    only the apps of ``workflow_id`` when given."""
    query = sa.select(APPS).where(APPS.c.account_id == account_id)
    if workflow_id is not None:
        query = query.where(APPS.c.workflow_id == workflow_id)
    return list(conn.execute(newest_first(query, APPS, limit, cursor)).all())


def get(conn: Connection, account_id: str, app_id: str) -> Record | None:
    return conn.execute(
        sa.select(APPS).where(APPS.c.id == app_id, APPS.c.account_id == account_id)
    ).first()


def update(conn: Connection, account_id: str, app_id: str, values: dict[str, Any]) -> Record | None:
    """The app as changed, or None when it is not the account's."""
    where = sa.and_(APPS.c.id == app_id, APPS.c.account_id == account_id)
    return rows.update(conn, APPS, where, **values, updated_at=utcnow())


def delete(conn: Connection, account_id: str, app_id: str) -> bool:
    result = conn.execute(
        sa.delete(APPS).where(APPS.c.id == app_id, APPS.c.account_id == account_id)
    )
    return bool(result.rowcount)


def _published() -> sa.Select[Any]:
    """Published apps whose workflow still exists."""
    return (
        sa.select(APPS)
        .join(_WORKFLOWS, _WORKFLOWS.c.id == APPS.c.workflow_id)
        .where(APPS.c.published.is_(True), _WORKFLOWS.c.deleted_at.is_(None))
    )


def published(conn: Connection, slug: str) -> Record | None:
    """The published app named ``slug`` whose workflow still exists."""
    return conn.execute(_published().where(APPS.c.slug == slug)).first()


def public_page(conn: Connection, limit: int, cursor: str | None) -> list[Record]:
    """Published apps whose access is ``public`` (of every account), newest first,
    ``limit + 1`` rows: the gallery. Read at each request, so an app unpublished, made
    private or deleted is gone from the next page read."""
    query = _published().where(APPS.c.access == "public")
    return list(conn.execute(newest_first(query, APPS, limit, cursor)).all())


def by_id_published(conn: Connection, app_id: str) -> Record | None:
    return conn.execute(_published().where(APPS.c.id == app_id)).first()


def lock_published(conn: Connection, app_id: str) -> bool:
    """Take the app's row for the rest of the transaction (PostgreSQL: a row lock, so the
    acceptances of one app are checked one after the other; SQLite writes one transaction at
    a time anyway). False when the app is no longer published."""
    result = conn.execute(
        sa.update(APPS)
        .where(APPS.c.id == app_id, APPS.c.published.is_(True))
        .values(published=True)
    )
    return bool(result.rowcount)


def record_run(conn: Connection, app_id: str, run_id: str, token_hash: str) -> None:
    conn.execute(
        sa.insert(APP_RUNS).values(
            run_id=run_id, app_id=app_id, token_hash=token_hash, created_at=utcnow()
        )
    )


def spent(conn: Connection, app_id: str, since: datetime | None) -> int:
    """Credits the app's runs took (since ``since``): what a finished run was charged, and
    what a running one holds (its estimate), so a run cannot start on credits that the runs
    still going may yet spend."""
    amount = sa.case(
        (_RUNS.c.status == RunStatus.RUNNING.value, _RUNS.c.estimated_credits),
        else_=_RUNS.c.credits_used,
    )
    query = (
        sa.select(sa.func.coalesce(sa.func.sum(amount), 0))
        .select_from(APP_RUNS.join(_RUNS, _RUNS.c.id == APP_RUNS.c.run_id))
        .where(APP_RUNS.c.app_id == app_id)
    )
    if since is not None:
        query = query.where(APP_RUNS.c.created_at >= since)
    return int(conn.execute(query).scalar_one())


def running(conn: Connection, app_id: str) -> int:
    return int(
        conn.execute(
            sa.select(sa.func.count())
            .select_from(APP_RUNS.join(_RUNS, _RUNS.c.id == APP_RUNS.c.run_id))
            .where(APP_RUNS.c.app_id == app_id, _RUNS.c.status == RunStatus.RUNNING.value)
        ).scalar_one()
    )


def running_runs(conn: Connection, app_id: str) -> list[Record]:
    """The app's runs still running: their streams are told when the app closes."""
    return list(
        conn.execute(
            sa.select(_RUNS.c.id, _RUNS.c.workflow_id, _RUNS.c.account_id)
            .select_from(APP_RUNS.join(_RUNS, _RUNS.c.id == APP_RUNS.c.run_id))
            .where(APP_RUNS.c.app_id == app_id, _RUNS.c.status == RunStatus.RUNNING.value)
        ).all()
    )


def visitor_run(conn: Connection, app_id: str, run_id: str) -> Record | None:
    """The app's run ``run_id`` with the token hash that reads it."""
    return conn.execute(
        sa.select(_RUNS, APP_RUNS.c.token_hash)
        .join(APP_RUNS, APP_RUNS.c.run_id == _RUNS.c.id)
        .where(APP_RUNS.c.app_id == app_id, APP_RUNS.c.run_id == run_id)
    ).first()


def use_challenge(conn: Connection, nonce: str, expires_at: datetime, now: datetime) -> bool:
    """Mark the challenge ``nonce`` answered; False when it was already. Challenges past
    their expiry are dropped first (they are refused as expired, not as used, so they need
    not be kept)."""
    conn.execute(sa.delete(APP_CHALLENGES).where(APP_CHALLENGES.c.expires_at < now))
    return dialect.insert_missing(conn, APP_CHALLENGES, {"nonce": nonce, "expires_at": expires_at})
