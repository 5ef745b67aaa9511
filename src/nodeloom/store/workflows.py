"""Workflows and their versions, scoped to their account (functions of a Core connection,
run by ``db.read`` / ``db.write``). Deleted workflows are kept (soft delete) so their runs and
artifacts stay consistent, but they are invisible to every query here.

Every save (create, update, restore) writes the workflow row and an immutable
``workflow_versions`` row in the same transaction: ``workflows.version`` is bumped by the
UPDATE itself (``version = version + 1``), so two concurrent saves always get two numbers, and
an update that names the version it read (``If-Match``) changes nothing when another save
came first (the UPDATE's WHERE no longer matches; the caller answers 412)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Account, ApiKey, Run, Workflow, WorkflowVersion, utcnow
from nodeloom.errors import PreconditionFailed
from nodeloom.notes import node_count
from nodeloom.store import Record, rows
from nodeloom.store.paging import highest_first, newest_first

WORKFLOWS = cast(sa.Table, Workflow.__table__)
VERSIONS = cast(sa.Table, WorkflowVersion.__table__)
_RUNS = cast(sa.Table, Run.__table__)
_ACCOUNTS = cast(sa.Table, Account.__table__)
_KEYS = cast(sa.Table, ApiKey.__table__)
_VISIBLE = WORKFLOWS.c.deleted_at.is_(None)


@dataclass(frozen=True)
class Save:
    """Who saves a version, and why: recorded with it, never changed."""

    account_id: str
    via: str | None  # "api_key" or "jwt"; None: saved on the server, not through the API
    api_key_id: str | None = None
    message: str | None = None
    restored_from: int | None = None


def _add_version(conn: Connection, row: Record, save: Save) -> None:
    conn.execute(
        sa.insert(VERSIONS).values(
            workflow_id=row.id,
            number=row.version,
            name=row.name,
            node_count=row.node_count,
            created_at=row.updated_at,
            author_account_id=save.account_id,
            author_via=save.via,
            author_api_key_id=save.api_key_id,
            message=save.message,
            restored_from=save.restored_from,
            graph_json=row.graph_json,
        )
    )


def create(
    conn: Connection,
    *,
    account_id: str,
    name: str,
    graph_json: dict[str, Any],
    save: Save | None = None,
) -> Record:
    """The new workflow, at version 1 (``save`` None: made on the server by its account)."""
    now = utcnow()
    row = rows.insert(
        conn,
        WORKFLOWS,
        id=str(uuid.uuid4()),
        account_id=account_id,
        name=name,
        graph_json=graph_json,
        node_count=node_count(graph_json),
        created_at=now,
        updated_at=now,
        deleted_at=None,
        version=1,
    )
    _add_version(conn, row, save or Save(account_id=account_id, via=None))
    return row


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
    query = sa.select(*columns).where(WORKFLOWS.c.account_id == account_id, _VISIBLE)
    query = newest_first(query, WORKFLOWS, limit, cursor)
    return list(conn.execute(query).all())


def update(
    conn: Connection,
    account_id: str,
    workflow_id: str,
    *,
    name: str | None,
    graph_json: dict[str, Any] | None,
    save: Save,
    expected_version: int | None = None,
) -> Record | None:
    """The workflow as changed (a new version), or None when it is not there (any more).
    ``expected_version``: change it only if that is still its current version, else raise
    PreconditionFailed (the check and the change are one statement)."""
    values: dict[str, Any] = {"updated_at": utcnow(), "version": WORKFLOWS.c.version + 1}
    if name is not None:
        values["name"] = name
    if graph_json is not None:
        values["graph_json"] = graph_json
        values["node_count"] = node_count(graph_json)
    where = [WORKFLOWS.c.id == workflow_id, WORKFLOWS.c.account_id == account_id, _VISIBLE]
    if expected_version is not None:
        where.append(WORKFLOWS.c.version == expected_version)
    row = rows.update(conn, WORKFLOWS, sa.and_(*where), **values)
    if row is None:
        current = current_version(conn, account_id, workflow_id)
        if current is not None and expected_version is not None:
            raise lost_update(current)
        return None
    _add_version(conn, row, save)
    return row


def lost_update(current: int) -> PreconditionFailed:
    return PreconditionFailed(
        f"The workflow was saved by someone else since you read it: version {current} is "
        "the current one now. Nothing was saved; read it again and reapply your change.",
        extra={"current_version": current},
        headers={"ETag": etag(current)},
    )


def etag(version: int) -> str:
    """A workflow's ETag: its version number, strong (``If-Match`` compares strongly)."""
    return f'"v{version}"'


def current_version(conn: Connection, account_id: str, workflow_id: str) -> int | None:
    query = sa.select(WORKFLOWS.c.version).where(
        WORKFLOWS.c.id == workflow_id, WORKFLOWS.c.account_id == account_id, _VISIBLE
    )
    value = conn.execute(query).scalar()
    return None if value is None else int(value)


_VERSION_COLUMNS = (
    VERSIONS.c.workflow_id,
    VERSIONS.c.number,
    VERSIONS.c.name,
    VERSIONS.c.node_count,
    VERSIONS.c.created_at,
    VERSIONS.c.author_account_id,
    VERSIONS.c.author_via,
    VERSIONS.c.author_api_key_id,
    _ACCOUNTS.c.email.label("author_email"),
    _KEYS.c.name.label("author_api_key_name"),
    VERSIONS.c.message,
    VERSIONS.c.restored_from,
)


def _versions_of(account_id: str, workflow_id: str, *extra: Any) -> Any:
    """The versions of a visible workflow of the account, with their authors' e-mail and
    key name (an author or key deleted since leaves them null)."""
    return (
        sa.select(*_VERSION_COLUMNS, *extra)
        .select_from(
            VERSIONS.join(WORKFLOWS, WORKFLOWS.c.id == VERSIONS.c.workflow_id)
            .outerjoin(_ACCOUNTS, _ACCOUNTS.c.id == VERSIONS.c.author_account_id)
            .outerjoin(_KEYS, _KEYS.c.id == VERSIONS.c.author_api_key_id)
        )
        .where(
            VERSIONS.c.workflow_id == workflow_id,
            WORKFLOWS.c.account_id == account_id,
            _VISIBLE,
        )
    )


def versions_page(
    conn: Connection, account_id: str, workflow_id: str, limit: int, before: int | None
) -> list[Record]:
    """Newest first, ``limit + 1`` rows (the extra one says a next page exists), numbers
    below ``before`` when given; without the graphs."""
    query = highest_first(_versions_of(account_id, workflow_id), VERSIONS.c.number, limit, before)
    return list(conn.execute(query).all())


def version(conn: Connection, account_id: str, workflow_id: str, number: int) -> Record | None:
    """One version, with its graph."""
    query = _versions_of(account_id, workflow_id, VERSIONS.c.graph_json).where(
        VERSIONS.c.number == number
    )
    return conn.execute(query).first()


def soft_delete(conn: Connection, account_id: str, workflow_id: str) -> bool:
    result = conn.execute(
        sa.update(WORKFLOWS)
        .where(WORKFLOWS.c.id == workflow_id, WORKFLOWS.c.account_id == account_id, _VISIBLE)
        .values(deleted_at=utcnow())
    )
    return bool(result.rowcount)
