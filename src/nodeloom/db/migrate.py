"""Apply Alembic migrations and, on PostgreSQL, Procrastinate's own (its job queue's schema,
db/procrastinate_queue.py). Called by ``nodeloom serve`` and ``nodeloom worker`` (before the
loop starts) and by ``nodeloom db upgrade``; tests call it in a worker thread."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

log = logging.getLogger("nodeloom.db")

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
# How long the switch to WAL waits for a lock another process holds for a moment.
WAL_SWITCH_WAIT_SECONDS = 10.0


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)
    backend = sa.engine.make_url(url).get_backend_name()
    if backend == "sqlite":
        _write_ahead(url)
    elif backend == "postgresql":
        # Imported here: SQLite installs need neither Procrastinate nor psycopg loaded.
        from nodeloom.db import procrastinate_queue

        procrastinate_queue.upgrade_schema(url, log.info)


def _write_ahead(url: str) -> None:
    """Leave a SQLite database file in WAL mode, which the file keeps, so that the server
    processes opening it next only read the mode. The switch needs the file's exclusive
    lock: two processes switching at once (the children of ``serve --processes N``,
    starting together) can deadlock, and SQLite then fails one of them at once, whatever
    its busy timeout; that child died at start."""
    path = sa.engine.make_url(url).database
    if not path or path == ":memory:":
        return
    with contextlib.closing(sqlite3.connect(path, timeout=WAL_SWITCH_WAIT_SECONDS)) as db:
        db.execute("PRAGMA journal_mode=WAL")
