"""Moving an embedded installation to PostgreSQL: every row of every table, ids kept, in an
order that satisfies the foreign keys, a batch at a time (``nodeloom db copy-to``).

The source must be at rest (no run running: stop the server first) and the target empty
(just migrated). Identity columns (the ledger's and the revocation feed's ids) continue after
the copied rows. Artifact files are not rows: they stay where they are (the same data
directory), or ``artifacts.upload_all`` puts them into S3-compatible storage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from nodeloom.db.models import Base

BATCH = 1000
# Parents before children; the rest in any order.
ORDER = (
    "accounts",
    "account_balances",
    "api_keys",
    "credentials",
    "workflows",
    "workflow_versions",
    "runs",
    "node_runs",
    "approvals",
    "artifacts",
    "credit_ledger",
    "idempotency_keys",
    "webhooks",
    "schedules",
    "callback_deliveries",
    "callback_attempts",
    "run_events",
    "credential_revocations",
    "assets",
    "account_storage",
    "apps",
    "app_runs",
    "app_challenges",
    "tus_uploads",
    "comfyui_drains",
)
IDENTITY = {"credit_ledger": "id", "credential_revocations": "id"}


class CopyRefused(Exception):
    """The source is not at rest or the target is not empty."""


@dataclass
class Copied:
    rows: dict[str, int]


async def copy_database(
    source: AsyncEngine,
    target: AsyncEngine,
    progress: Callable[[str, int], None] = lambda table, rows: None,
) -> Copied:
    tables = Base.metadata.tables
    assert set(ORDER) == set(tables), "a table is missing from the copy order"
    async with source.connect() as conn:
        running = (
            await conn.execute(sa.text("SELECT count(*) FROM runs WHERE status = 'running'"))
        ).scalar()
    if running:
        raise CopyRefused(f"{running} runs are still running: stop the server first")
    async with target.connect() as conn:
        existing = (await conn.execute(sa.text("SELECT count(*) FROM accounts"))).scalar()
    if existing:
        raise CopyRefused("the target database already has accounts: copy into an empty one")
    copied: dict[str, int] = {}
    async with source.connect() as src, target.begin() as dst:
        for name in ORDER:
            table = tables[name]
            count = 0
            result = await src.stream(sa.select(table))
            async for rows in result.partitions(BATCH):
                await dst.execute(sa.insert(table), [dict(row._mapping) for row in rows])
                count += len(rows)
                progress(name, count)
            copied[name] = count
        if target.dialect.name == "postgresql":
            for name, column in IDENTITY.items():
                await dst.execute(
                    sa.text(
                        f"SELECT setval(pg_get_serial_sequence('{name}', '{column}'), "  # noqa: S608 - constants
                        f"coalesce((SELECT max({column}) FROM {name}), 0) + 1, false)"
                    )
                )
    return Copied(copied)
