"""The tables the code uses are exactly what the migrations build, on both databases: a
column added to a model without a migration (or the reverse) fails here, not in production."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from nodeloom.db.models import Base
from nodeloom.settings import Settings


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
