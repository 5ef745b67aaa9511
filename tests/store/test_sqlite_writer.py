"""How the SQLite writer behaves when several processes share the file, and where its
checkpoints go (db/engine.py)."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from nodeloom.db import engine as db_engine
from nodeloom.db.engine import Database
from nodeloom.settings import Settings
from tests.sqlite_lock import another_writer, loop_turns

INSERT = sa.text(
    "insert into credential_revocations (scope, created_at) values (:s, '2026-01-01 00:00:00')"
)
COUNT = sa.text("select count(*) from credential_revocations where scope like 'w%'")


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = Database(settings)
    yield database
    await database.dispose()


def db_file(settings: Settings) -> Path:
    return Path(db_engine._sqlite_path(settings.effective_database_url))


class TestAnotherProcessHoldsTheLock:
    async def test_writes_wait_on_the_loop_and_commit_together(
        self, db: Database, settings: Settings
    ) -> None:
        with another_writer(db_file(settings)) as other:  # another process writing
            async with loop_turns() as turns:
                groups = db.write_groups
                first = asyncio.create_task(db.write(lambda c: c.execute(INSERT, {"s": "w1"})))
                await asyncio.sleep(0.05)
                second = asyncio.create_task(db.write(lambda c: c.execute(INSERT, {"s": "w2"})))
                await asyncio.sleep(0.05)
                assert not first.done() and not second.done()
                assert turns.count > 20  # the loop was never held
            other.execute("COMMIT")
            await asyncio.wait_for(asyncio.gather(first, second), 2)
        assert db.write_groups == groups + 1  # the second joined the waiting group
        assert await db.read(lambda c: c.execute(COUNT).scalar()) == 2

    async def test_a_process_starting_waits_for_the_file(self, settings: Settings) -> None:
        """A sibling holds the file for a moment (its own start, a checkpoint) just as this
        process opens it: this one waits instead of failing to start."""
        other = sqlite3.connect(db_file(settings), isolation_level=None, check_same_thread=False)
        other.execute("PRAGMA locking_mode=EXCLUSIVE")
        other.execute("BEGIN IMMEDIATE")
        other.execute(
            "insert into credential_revocations (scope, created_at)"
            " values ('w0', '2026-01-01 00:00:00')"
        )
        other.execute("COMMIT")  # the file stays locked until this connection closes
        threading.Timer(0.3, other.close).start()
        database = Database(settings)
        try:
            database.start()
            assert await database.read(lambda c: c.execute(COUNT).scalar()) == 1
        finally:
            await database.dispose()

    async def test_a_write_that_fails_while_grouped_rolls_back_alone(self, db: Database) -> None:
        def bad(conn: sa.Connection) -> None:
            conn.execute(INSERT, {"s": "w-bad"})
            raise ValueError("no")

        results = await asyncio.gather(
            db.write(lambda c: c.execute(INSERT, {"s": "w-ok"})),
            db.write(bad),
            db.write(lambda c: c.execute(INSERT, {"s": "w-ok2"})),
            return_exceptions=True,
        )
        assert isinstance(results[1], ValueError)
        assert await db.read(lambda c: c.execute(COUNT).scalar()) == 2


class TestCheckpoints:
    async def test_commits_reach_the_database_file_in_the_background(
        self, db: Database, settings: Settings, tmp_path: Path
    ) -> None:
        db.start()
        for i in range(20):
            await db.write(lambda c, i=i: c.execute(INSERT, {"s": f"w{i}"}))
        await asyncio.sleep(db_engine.CHECKPOINT_SECONDS * 3)
        # The database file alone, without its WAL, already holds every commit.
        copy = tmp_path / "copy.db"
        shutil.copy(db_file(settings), copy)
        with sqlite3.connect(copy) as conn:
            assert conn.execute(COUNT.text).fetchone() == (20,)

    async def test_a_clean_stop_checkpoints_what_is_left(
        self, settings: Settings, tmp_path: Path
    ) -> None:
        database = Database(settings)
        database.start()
        await database.write(lambda c: c.execute(INSERT, {"s": "w-last"}))
        await database.dispose()
        copy = tmp_path / "copy.db"
        shutil.copy(db_file(settings), copy)
        with sqlite3.connect(copy) as conn:
            assert conn.execute(COUNT.text).fetchone() == (1,)

    async def test_the_log_starts_over_while_reads_and_writes_never_stop(
        self, settings: Settings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Small numbers for a short test: restart past 64 frames, a round every 50 ms.
        monkeypatch.setattr(db_engine, "WAL_RESTART_FRAMES", 64)
        monkeypatch.setattr(db_engine, "CHECKPOINT_SECONDS", 0.05)
        database = Database(settings)
        database.start()
        await database.write(lambda c: c.execute(sa.text("create table blobs (b blob)")))
        blob = {"b": b"x" * 16_000}  # four pages a row
        stop = asyncio.Event()

        async def keep_reading() -> None:
            while not stop.is_set():
                await database.read(lambda c: c.execute(sa.text("select count(*) from blobs")))
                await asyncio.sleep(0)

        reader = asyncio.create_task(keep_reading())
        for _ in range(600):  # ~2,400 frames, 10 MB, if the log never started over
            await database.write(
                lambda c: c.execute(sa.text("insert into blobs values (:b)"), blob)
            )
            await asyncio.sleep(0.001)
        stop.set()
        await reader
        wal = Path(str(db_file(settings)) + "-wal")
        assert wal.stat().st_size < 6_000_000, wal.stat().st_size  # 15 MB without restarts
        assert (
            await database.read(lambda c: c.execute(sa.text("select count(*) from blobs")).scalar())
            == 600
        )
        await database.dispose()
