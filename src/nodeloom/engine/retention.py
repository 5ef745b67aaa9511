"""Retention: the database and the artifact folder do not grow without bound.

Every ``retention_check_seconds`` (and on ``nodeloom db prune``):

- finished runs older than ``retention_days`` go, with their node runs, events and artifact
  rows (an artifact row is also its output-cache entry) — a few hundred runs per
  transaction, so SQLite's single writer is never held for long. An artifact that a kept run
  still shows (a later run's cache hit reuses the earlier artifact) stays until that run goes
  too;
- idempotency keys past their 24 hours and revocation-feed rows past a day go;
- artifact files that no artifact row or asset (its file or thumbnail) references any more
  go, once they are older than ``FILE_GRACE`` (a file is written before its row commits; a
  crash between the two leaves an orphan, which this collects too).

The credit ledger is never touched: it is the proof of every balance. How a store removes a
blob safely while nodes may be producing the same bytes is the store's business
(``ArtifactStore.collect``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom import background
from nodeloom.artifacts.store import ArtifactStore
from nodeloom.auth import revocation
from nodeloom.db.engine import Database
from nodeloom.db.models import (
    Artifact,
    IdempotencyKey,
    NodeRun,
    Run,
    RunEvent,
    utcnow,
)
from nodeloom.settings import Settings
from nodeloom.states import RunStatus
from nodeloom.store import assets as asset_store
from nodeloom.store import callbacks as callback_store

log = logging.getLogger("nodeloom.retention")

RUNS_PER_TRANSACTION = 200
FILE_GRACE = timedelta(hours=1)
IDEMPOTENCY_KEEP = timedelta(hours=24)
_SHAS_PER_QUERY = 500

_RUNS = cast(sa.Table, Run.__table__)
_NODES = cast(sa.Table, NodeRun.__table__)
_EVENTS = cast(sa.Table, RunEvent.__table__)
_ARTIFACTS = cast(sa.Table, Artifact.__table__)
_IDEMPOTENCY = cast(sa.Table, IdempotencyKey.__table__)
_IDS: sa.BindParameter[list[str]] = sa.bindparam("ids", expanding=True)


@dataclass
class PruneReport:
    runs: int = 0
    artifacts: int = 0
    files: int = 0
    bytes: int = 0

    def __str__(self) -> str:
        return (
            f"{self.runs} runs, {self.artifacts} artifact rows, "
            f"{self.files} files ({self.bytes / 1e6:.1f} MB)"
        )


def prune_runs(conn: Connection, cutoff: datetime) -> tuple[int, int]:
    """One transaction: up to RUNS_PER_TRANSACTION finished runs older than ``cutoff``.
    (runs, artifact rows) removed."""
    run_ids = list(
        conn.execute(
            sa.select(_RUNS.c.id)
            .where(_RUNS.c.status != RunStatus.RUNNING.value, _RUNS.c.finished_at < cutoff)
            .order_by(_RUNS.c.finished_at)
            .limit(RUNS_PER_TRANSACTION)
        ).scalars()
    )
    if not run_ids:
        return 0, 0
    # The artifacts these runs made or reused (a cache hit points at another run's artifact),
    # less those that a run we keep still points at.
    made = sa.select(_ARTIFACTS.c.id).where(_ARTIFACTS.c.run_id.in_(_IDS))
    reused = sa.select(_NODES.c.artifact_id).where(
        _NODES.c.run_id.in_(_IDS), _NODES.c.artifact_id.is_not(None)
    )
    candidates = set(conn.execute(made, {"ids": run_ids}).scalars())
    candidates.update(conn.execute(reused, {"ids": run_ids}).scalars())
    kept = set()
    if candidates:
        still_used = (
            sa.select(_NODES.c.artifact_id)
            .where(
                _NODES.c.artifact_id.in_(_IDS),
                _NODES.c.run_id.not_in(sa.bindparam("runs", expanding=True)),
            )
            .distinct()
        )
        kept = set(conn.execute(still_used, {"ids": list(candidates), "runs": run_ids}).scalars())
    artifact_ids = sorted(candidates - kept)
    if artifact_ids:
        conn.execute(sa.delete(_ARTIFACTS).where(_ARTIFACTS.c.id.in_(_IDS)), {"ids": artifact_ids})
    # Idempotency keys that answered with these runs go with them.
    conn.execute(sa.delete(_IDEMPOTENCY).where(_IDEMPOTENCY.c.run_id.in_(_IDS)), {"ids": run_ids})
    callback_store.delete_of_runs(conn, run_ids)
    conn.execute(sa.delete(_EVENTS).where(_EVENTS.c.run_id.in_(_IDS)), {"ids": run_ids})
    conn.execute(sa.delete(_NODES).where(_NODES.c.run_id.in_(_IDS)), {"ids": run_ids})
    conn.execute(sa.delete(_RUNS).where(_RUNS.c.id.in_(_IDS)), {"ids": run_ids})
    return len(run_ids), len(artifact_ids)


def prune_small_tables(conn: Connection) -> None:
    conn.execute(
        sa.delete(_IDEMPOTENCY).where(_IDEMPOTENCY.c.created_at < utcnow() - IDEMPOTENCY_KEEP)
    )
    revocation.prune(conn)


def referenced(conn: Connection, shas: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(shas), _SHAS_PER_QUERY):
        chunk = shas[start : start + _SHAS_PER_QUERY]
        query = sa.select(_ARTIFACTS.c.sha256).where(_ARTIFACTS.c.sha256.in_(_IDS)).distinct()
        found.update(conn.execute(query, {"ids": chunk}).scalars())
        found.update(asset_store.referenced(conn, chunk))
    return found


class Retention:
    def __init__(self, settings: Settings, db: Database, store: ArtifactStore) -> None:
        self.settings = settings
        self.db = db
        self.store = store
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.settings.retention_days > 0:
            self._task = asyncio.create_task(self._forever(), name="retention")

    async def stop(self) -> None:
        await background.cancel_and_wait(self._task)

    async def _forever(self) -> None:
        seconds = self.settings.retention_check_seconds
        await background.every(
            seconds,
            self._prune_and_say,
            log,
            "retention pass failed; trying again later",
            first_wait=min(60.0, seconds),
        )

    async def _prune_and_say(self) -> None:
        report = await self.prune()
        if report.runs or report.files:
            log.info("retention removed %s", report)

    async def prune(self, now: datetime | None = None) -> PruneReport:
        """One pass; ``now`` is the moment the runs' age is counted from (the clock's by
        default: a test names it, so that its runs' ages do not depend on how fast it ran)."""
        report = PruneReport()
        if self.settings.retention_days > 0:
            cutoff = (now or utcnow()) - timedelta(days=self.settings.retention_days)
            while True:
                runs, artifacts = await self.db.write(lambda c: prune_runs(c, cutoff))
                report.runs += runs
                report.artifacts += artifacts
                if runs < RUNS_PER_TRANSACTION:
                    break
        await self.db.write(prune_small_tables)
        files, size = await self._collect_files()
        report.files, report.bytes = files, size
        return report

    async def _collect_files(self) -> tuple[int, int]:
        async def still_used(shas: list[str]) -> set[str]:
            return await self.db.read(lambda c: referenced(c, shas))

        older_than = time.time() - FILE_GRACE.total_seconds()
        return await self.store.collect(older_than, still_used)
