"""Procrastinate is pinned and fenced: our statements write its job table and call its SQL
functions by name (db/procrastinate_queue.py), so a new release may change what they meet.

- Only db/procrastinate_queue.py imports the library or names ``procrastinate_*``.
- The installed release is the one of requirements.lock, and its schema and migration
  scripts are the ones read (a fingerprint): any other release fails here until someone has
  read its migrations against our statements, checked that ``nodeloom db upgrade`` applies
  them (it runs the scripts a database has not run), and recorded the new fingerprint.
- ``nodeloom db upgrade`` installs the schema on a new PostgreSQL database, brings an older
  one up to the installed release, and does nothing the second time (ADR 0042).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from nodeloom.db import procrastinate_queue
from nodeloom.db.migrate import upgrade
from tests.conftest import postgres_database

ROOT = Path(__file__).parents[2]
FENCE = ROOT / "src" / "nodeloom" / "db" / "procrastinate_queue.py"

PINNED_VERSION = "3.10.0"
# sha256 of the schema a new database gets, and of every migration script (name and text,
# in order): a release that changes either changes these.
SCHEMA_SHA256 = "c70ec4b400a60ad9592787653aae5ae77ae41bf801d56b5bd2712751a07f2009"
MIGRATIONS_SHA256 = "8cd24fda945fc4b7bed25bd0e7b7cbc42e684f3ed8ad6322dfebb5e8fb5a837f"
LAST_MIGRATION = "03.04.00_50_post_add_retry_failed_job_procedure.sql"

# What our own statements use of Procrastinate's schema.
FUNCTIONS_WE_CALL = {"procrastinate_fetch_job_v2", "procrastinate_finish_job_v1"}
JOB_COLUMNS_WE_WRITE = {"queue_name", "task_name", "lock", "queueing_lock", "args", "status"}

UPGRADING = (
    "Procrastinate {found} is not the release read ({pinned}). Before recording its "
    "fingerprint in tests/store/test_procrastinate_pin.py: read its migration scripts "
    "against the statements of db/procrastinate_queue.py (the job insert, fetch, completion "
    "and the reconciler's queries), run this file on PostgreSQL (`nodeloom db upgrade` "
    "applies the new scripts), and update requirements.lock and docs/operations.md."
)


def _migrations_fingerprint() -> str:
    digest = hashlib.sha256()
    for name, script in procrastinate_queue.scripts().items():
        digest.update(name.encode() + b"\0" + script.encode() + b"\0")
    return digest.hexdigest()


def test_only_the_fence_reaches_procrastinate() -> None:
    reaching = re.compile(r"^\s*(from|import)\s+procrastinate\b|\bprocrastinate_\w+", re.MULTILINE)
    outside = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}: {m.group(0).strip()}"
        for path in sorted((ROOT / "src" / "nodeloom").rglob("*.py"))
        if path != FENCE
        for text in [path.read_text()]
        for m in reaching.finditer(text)
        if m.group(0) != "procrastinate_queue"  # the fence's own name
    ]
    assert not outside, (
        "Procrastinate is reached outside db/procrastinate_queue.py; move it there:\n"
        + "\n".join(outside)
    )


def test_the_installed_release_is_the_pinned_one() -> None:
    found = importlib.metadata.version("procrastinate")
    assert found == procrastinate_queue.release()
    assert found == PINNED_VERSION, UPGRADING.format(found=found, pinned=PINNED_VERSION)
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    assert f"procrastinate=={PINNED_VERSION}" in lock, (
        f"requirements.lock does not pin procrastinate=={PINNED_VERSION}"
    )


def test_its_schema_and_migrations_are_the_ones_read() -> None:
    found = importlib.metadata.version("procrastinate")
    message = UPGRADING.format(found=found, pinned=PINNED_VERSION)
    schema = procrastinate_queue.schema_sql()
    assert hashlib.sha256(schema.encode()).hexdigest() == SCHEMA_SHA256, message
    assert _migrations_fingerprint() == MIGRATIONS_SHA256, message
    assert list(procrastinate_queue.scripts())[-1] == LAST_MIGRATION, message
    # Databases migrated before db upgrade kept a record ran every script up to the baseline.
    assert procrastinate_queue.BASELINE in procrastinate_queue.scripts()


async def _read(url: str, query: str) -> set[str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return {str(v) for v in (await conn.execute(sa.text(query))).scalars()}
    finally:
        await engine.dispose()


async def _execute(url: str, statement: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text(statement))
    finally:
        await engine.dispose()


_APPLIED = f"SELECT name FROM {procrastinate_queue.APPLIED_TABLE}"


@pytest.mark.postgres
async def test_a_migrated_database_has_what_our_statements_use(postgres_template: str) -> None:
    async with postgres_database(postgres_template) as url:
        functions = await _read(
            url, "SELECT proname FROM pg_proc WHERE proname LIKE 'procrastinate_%'"
        )
        columns = await _read(
            url,
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'procrastinate_jobs'",
        )
    assert FUNCTIONS_WE_CALL <= functions
    assert JOB_COLUMNS_WE_WRITE <= columns


@pytest.mark.postgres
async def test_db_upgrade_installs_the_schema_once() -> None:
    async with postgres_database() as url:
        await asyncio.to_thread(upgrade, url)
        assert await _read(url, _APPLIED) == set(procrastinate_queue.scripts())
        assert await _read(url, "SELECT to_regclass('procrastinate_jobs')::text") == {
            "procrastinate_jobs"
        }
        # Again: nothing to do, nothing applied (a fleet's processes all upgrade at start).
        assert await asyncio.to_thread(procrastinate_queue.upgrade_schema, url) == []


@pytest.mark.postgres
async def test_db_upgrade_applies_the_scripts_a_database_has_not_run(
    postgres_template: str,
) -> None:
    async with postgres_database(postgres_template) as url:
        # As if the database were one release behind: its last script not run yet.
        await _execute(
            url,
            f"DELETE FROM {procrastinate_queue.APPLIED_TABLE} WHERE name = '{LAST_MIGRATION}'",
        )
        applied = await asyncio.to_thread(procrastinate_queue.upgrade_schema, url)
        assert applied == [LAST_MIGRATION]
        assert LAST_MIGRATION in await _read(url, _APPLIED)
        assert FUNCTIONS_WE_CALL <= await _read(
            url, "SELECT proname FROM pg_proc WHERE proname LIKE 'procrastinate_%'"
        )


@pytest.mark.postgres
async def test_a_database_installed_by_migration_0005_is_taken_as_3_10_0(
    postgres_template: str,
) -> None:
    async with postgres_database(postgres_template) as url:
        # What a database migrated before the record existed looks like: the tables, no record.
        await _execute(url, f"DROP TABLE {procrastinate_queue.APPLIED_TABLE}")
        assert await asyncio.to_thread(procrastinate_queue.upgrade_schema, url) == []
        recorded = await _read(url, _APPLIED)
    assert recorded == {n for n in procrastinate_queue.scripts() if n <= LAST_MIGRATION}
