"""Procrastinate is pinned: our dispatch code writes its job table and calls its functions by
name (engine/dispatch/queue.py, jobs.py), so a new release may change what those statements
meet. These tests fail on any other release until someone has read its migrations, added an
Alembic migration that applies them (as 0005 applied its schema), and recorded the new
fingerprint here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
from pathlib import Path

import pytest
import sqlalchemy as sa
from procrastinate.schema import SchemaManager
from sqlalchemy.ext.asyncio import create_async_engine

from tests.conftest import postgres_database

PINNED_VERSION = "3.10.0"
# sha256 of SchemaManager.get_schema() of the pinned release: the schema a new database gets.
SCHEMA_SHA256 = "c70ec4b400a60ad9592787653aae5ae77ae41bf801d56b5bd2712751a07f2009"
# The last of its migration scripts: an upgraded database has applied it and every earlier one.
LAST_MIGRATION = "03.04.00_50_post_add_retry_failed_job_procedure.sql"

# What our own statements use of Procrastinate's schema.
FUNCTIONS_WE_CALL = {
    "procrastinate_defer_jobs_v1",
    "procrastinate_fetch_job_v2",
    "procrastinate_finish_job_v1",
}
JOB_COLUMNS_WE_WRITE = {"queue_name", "task_name", "lock", "queueing_lock", "args", "status"}


def test_the_installed_release_is_the_pinned_one() -> None:
    assert importlib.metadata.version("procrastinate") == PINNED_VERSION
    lock = Path(__file__).parents[2] / "requirements.lock"
    assert f"procrastinate=={PINNED_VERSION}" in lock.read_text().splitlines()


def test_its_schema_and_migrations_are_the_ones_read() -> None:
    schema = SchemaManager.get_schema()
    assert hashlib.sha256(schema.encode()).hexdigest() == SCHEMA_SHA256
    scripts = importlib.resources.files("procrastinate.sql.migrations").iterdir()
    assert max(p.name for p in scripts if p.name.endswith(".sql")) == LAST_MIGRATION


@pytest.mark.postgres
async def test_a_migrated_database_has_what_our_statements_use(postgres_template: str) -> None:
    async with postgres_database(postgres_template) as url:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                functions = set(
                    (
                        await conn.execute(
                            sa.text(
                                "SELECT proname FROM pg_proc WHERE proname LIKE 'procrastinate_%'"
                            )
                        )
                    ).scalars()
                )
                columns = set(
                    (
                        await conn.execute(
                            sa.text(
                                "SELECT column_name FROM information_schema.columns"
                                " WHERE table_name = 'procrastinate_jobs'"
                            )
                        )
                    ).scalars()
                )
        finally:
            await engine.dispose()
    assert FUNCTIONS_WE_CALL <= functions
    assert JOB_COLUMNS_WE_WRITE <= columns
