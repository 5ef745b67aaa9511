"""The tables the code uses are exactly what the migrations build, on both databases: a
column added to a model without a migration (or the reverse) fails here, not in production."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import sqlite3
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from nodeloom.db.engine import _sqlite_engine, _uncounted
from nodeloom.db.migrate import alembic_config, upgrade
from nodeloom.db.migrations import shapes
from nodeloom.db.models import Base
from nodeloom.settings import Settings
from tests.at_once import OPENED, at_once
from tests.conftest import postgres_database
from tests.services import require_postgres

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

# Without the switch in the migration this failed 5 runs in 5 (about 4 s with it).
ATTEMPTS_AT_ONCE = 200


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _ours(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Procrastinate's job tables (PostgreSQL) are the queue library's, not ours."""
    return not (name or "").startswith("procrastinate_")


def _differences(conn: sa.Connection) -> list[object]:
    context = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": _ours})
    return list(compare_metadata(context, Base.metadata))


async def test_models_match_the_migrated_schema(settings: Settings) -> None:
    engine = create_async_engine(settings.effective_database_url)
    try:
        async with engine.connect() as conn:
            differences = await conn.run_sync(_differences)
    finally:
        await engine.dispose()
    assert differences == []


def _downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


@pytest.fixture
async def empty_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """A database nothing has migrated yet."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
        return
    require_postgres()
    async with postgres_database() as url:
        yield url


async def _rows(
    url: str, query: str, params: Mapping[str, object] | None = None
) -> list[tuple[object, ...]]:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            result = await conn.execute(sa.text(query), params or {})
            return [tuple(r) for r in result.all()] if result.returns_rows else []
    finally:
        await engine.dispose()


async def test_cache_entries_move_onto_their_artifacts_and_back(empty_url: str) -> None:
    """0007: an output cached before the upgrade is still found after it (and after a
    downgrade)."""
    await asyncio.to_thread(upgrade, empty_url, "0006")
    at = datetime(2026, 11, 24, 12, 0, 0)
    for query, params in (
        (
            "INSERT INTO accounts (id, email, password_hash, plan, credits_balance, created_at)"
            " VALUES ('acc', 'a@example.com', 'h', 'free', 10, :at)",
            {"at": at},
        ),
        (
            "INSERT INTO artifacts (id, account_id, run_id, workflow_id, node_id, content_type,"
            " size_bytes, sha256, created_at) VALUES"
            " ('art-1', 'acc', 'r', 'w', 'n', 'text/plain', 1, 's', :at),"
            " ('art-2', 'acc', 'r', 'w', 'm', 'text/plain', 1, 's', :at)",
            {"at": at},
        ),
        (
            "INSERT INTO cache_entries (account_id, cache_key, artifact_id, created_at)"
            " VALUES ('acc', 'key-1', 'art-1', :at)",
            {"at": at},
        ),
    ):
        await _rows(empty_url, query, params)

    await asyncio.to_thread(upgrade, empty_url, "0007")
    keys = await _rows(empty_url, "SELECT id, cache_key FROM artifacts ORDER BY id")
    assert keys == [("art-1", "key-1"), ("art-2", None)]

    await asyncio.to_thread(_downgrade, empty_url, "0006")
    entries = await _rows(empty_url, "SELECT account_id, cache_key, artifact_id FROM cache_entries")
    assert entries == [("acc", "key-1", "art-1")]


async def test_existing_workflows_become_version_one_and_back(empty_url: str) -> None:
    """0010: a workflow saved before versions existed has its content as version 1 (no
    author), and its runs no version; a downgrade drops the history and keeps the workflow."""
    await asyncio.to_thread(upgrade, empty_url, "0009")
    at = datetime(2026, 11, 24, 12, 0, 0)
    await _rows(
        empty_url,
        "INSERT INTO accounts (id, email, password_hash, plan, credits_balance, created_at)"
        " VALUES ('acc', 'a@example.com', 'h', 'free', 10, :at)",
        {"at": at},
    )
    await _rows(
        empty_url,
        "INSERT INTO workflows (id, account_id, name, node_count, created_at, updated_at,"
        " graph_json) VALUES ('wf', 'acc', 'Old', 0, :at, :at, :graph)",
        {"at": at, "graph": '{"nodes": [], "edges": [], "viewport": {"x": 0, "y": 0, "zoom": 1}}'},
    )
    await asyncio.to_thread(upgrade, empty_url, "0010")
    assert await _rows(empty_url, "SELECT id, version FROM workflows") == [("wf", 1)]
    versions = await _rows(
        empty_url,
        "SELECT workflow_id, number, name, node_count, author_account_id, message"
        " FROM workflow_versions",
    )
    assert versions == [("wf", 1, "Old", 0, None, None)]

    await asyncio.to_thread(_downgrade, empty_url, "0009")
    assert await _rows(empty_url, "SELECT id, name FROM workflows") == [("wf", "Old")]


async def test_balances_move_to_their_own_table_and_back(empty_url: str) -> None:
    """0016: every account keeps its balance when it moves to ``account_balances``, the
    balance still cannot go below zero there, and a downgrade puts it back on the account."""
    await asyncio.to_thread(upgrade, empty_url, "0015")
    at = datetime(2026, 11, 26, 12, 0, 0)
    await _rows(
        empty_url,
        "INSERT INTO accounts (id, email, password_hash, plan, credits_balance, created_at)"
        " VALUES ('a1', 'a1@example.com', 'h', 'free', 10, :at),"
        " ('a2', 'a2@example.com', 'h', 'pro', 0, :at)",
        {"at": at},
    )
    await asyncio.to_thread(upgrade, empty_url, "0016")
    moved = await _rows(
        empty_url, "SELECT account_id, credits_balance FROM account_balances ORDER BY account_id"
    )
    assert moved == [("a1", 10), ("a2", 0)]
    with pytest.raises(sa.exc.IntegrityError):
        await _rows(
            empty_url,
            "UPDATE account_balances SET credits_balance = credits_balance - 11"
            " WHERE account_id = 'a1'",
        )
    await _rows(
        empty_url, "UPDATE account_balances SET credits_balance = 7 WHERE account_id = 'a2'"
    )

    await asyncio.to_thread(_downgrade, empty_url, "0015")
    back = await _rows(empty_url, "SELECT id, credits_balance FROM accounts ORDER BY id")
    assert back == [("a1", 10), ("a2", 7)]
    with pytest.raises(sa.exc.IntegrityError):
        await _rows(empty_url, "UPDATE accounts SET credits_balance = -1 WHERE id = 'a1'")


# 200 rounds of forking the test process twice: late in a full run that process holds
# over 2 GB, and beside other work the rounds outlasted the suite's 120 s timeout.
@pytest.mark.timeout(600)
def test_a_migrated_sqlite_file_opens_in_every_process_starting_at_once(tmp_path: Path) -> None:
    """``serve`` migrates, then ``--processes N`` starts its children together, each setting
    its connection to WAL. Two switching a file to WAL at once could deadlock, and SQLite
    failed one without waiting (the child died at start). A migrated file is in WAL mode
    already; then every process opens it."""
    migrated = tmp_path / "migrated.db"
    upgrade(f"sqlite+aiosqlite:///{migrated}")
    with sqlite3.connect(migrated) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    for attempt in range(ATTEMPTS_AT_ONCE):
        path = tmp_path / f"copy-{attempt}.db"
        shutil.copyfile(migrated, path)

        def connect(path: Path = path) -> None:
            _sqlite_engine(f"sqlite:///{path}", "NORMAL", _uncounted).connect().close()

        assert at_once(connect) == [OPENED, OPENED]


# What db/migrations/shapes.py builds is history: revisions 0001-0023 made databases with it.
SHAPES_SHA256 = "106c693bdfbdaceaeeec595886fc6c392d2abc19417b3e7e1251d40d40df4c05"


def test_the_migrations_shared_shapes_are_not_edited() -> None:
    """A change to shapes.py would change what re-running an old revision builds (a fresh
    database, a downgrade and upgrade) without changing any database that already ran it:
    the two would drift apart in silence. A new migration writes its own shape instead."""
    source = Path(shapes.__file__).read_bytes()
    assert hashlib.sha256(source).hexdigest() == SHAPES_SHA256, (
        "db/migrations/shapes.py changed: old revisions would build another schema; "
        "add a new function (or write the shape out in the new migration) instead"
    )
