"""Queue jobs written by the transaction that queues their nodes (engine/dispatch/queue.py,
ADR 0020) are the jobs Procrastinate's own defer writes, exist if and only if that
transaction commits, and never make a second waiting job for one node.

On a real PostgreSQL database migrated as a server migrates it, Procrastinate's schema
included; the library's job manager reads the jobs back.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from procrastinate import App, PsycopgConnector
from sqlalchemy.ext.asyncio import create_async_engine

from nodeloom.db.engine import Database
from nodeloom.db.procrastinate_queue import conninfo
from nodeloom.engine.dispatch.queue import TASK, insert_jobs, lock_of
from nodeloom.engine.dispatch.waits import QUEUE, WAIT_QUEUE
from nodeloom.settings import Settings
from tests.conftest import TEST_SECRET
from tests.topology.fleet import postgres_database

pytestmark = pytest.mark.postgres

JOB_COLUMNS = "queue_name, task_name, priority, lock, queueing_lock, args, status, attempts"


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    with postgres_database() as url:
        yield url


def _jobs(url: str, run_id: str) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(
                    sa.text(
                        f"SELECT {JOB_COLUMNS}, scheduled_at FROM procrastinate_jobs "
                        "WHERE args->>'run_id' = :run ORDER BY id"
                    ),
                    {"run": run_id},
                )
                return [dict(row._mapping) for row in rows]
        finally:
            await engine.dispose()

    return asyncio.run(read())


class _RolledBack(Exception):
    pass


def _in_a_transaction(url: str, run_id: str, queues: dict[str, str], commit: bool) -> None:
    """``insert_jobs`` in a write transaction of the service's own ``Database``, committed
    or rolled back (the step raised after it)."""

    def step(conn: sa.Connection) -> None:
        insert_jobs(conn, run_id, queues)
        if not commit:
            raise _RolledBack

    async def write() -> None:
        with tempfile.TemporaryDirectory() as data_dir:
            settings = Settings(data_dir=Path(data_dir), secret_key=TEST_SECRET, database_url=url)
            db = Database(settings.prepare())
            try:
                with contextlib.suppress(_RolledBack):
                    await db.write(step)
            finally:
                await db.dispose()

    asyncio.run(write())


def _deferred_by_procrastinate(url: str, run_id: str, node_id: str, queue: str) -> None:
    async def defer() -> None:
        app = App(connector=PsycopgConnector(conninfo=conninfo(url)))
        app.task(name=TASK, queue=QUEUE)(lambda run_id, node_id: None)
        async with app.open_async():
            lock = lock_of(run_id, node_id)
            await (
                app.tasks[TASK]
                .configure(lock=lock, queueing_lock=lock, queue=queue)
                .defer_async(run_id=run_id, node_id=node_id)
            )

    asyncio.run(defer())


def _without_node(job: dict[str, Any]) -> dict[str, Any]:
    node_id = job["args"]["node_id"]
    return {
        **job,
        "lock": job["lock"].removesuffix(node_id),
        "queueing_lock": job["queueing_lock"].removesuffix(node_id),
        "args": {**job["args"], "node_id": "*"},
    }


def test_a_job_written_in_the_step_is_the_job_procrastinate_defers(database: str) -> None:
    run_id = "run-beside-the-library"
    _deferred_by_procrastinate(database, run_id, "library", WAIT_QUEUE)
    _in_a_transaction(database, run_id, {"ours": WAIT_QUEUE}, commit=True)

    library, ours = _jobs(database, run_id)
    assert ours["args"] == {"run_id": run_id, "node_id": "ours"}
    assert ours["lock"] == ours["queueing_lock"] == lock_of(run_id, "ours")
    assert ours["queue_name"] == WAIT_QUEUE and ours["status"] == "todo"
    assert _without_node(ours) == _without_node(library)


def test_a_rolled_back_step_leaves_no_job(database: str) -> None:
    run_id = "run-rolled-back"
    _in_a_transaction(database, run_id, {"a": QUEUE, "b": WAIT_QUEUE}, commit=False)
    assert _jobs(database, run_id) == []

    _in_a_transaction(database, run_id, {"a": QUEUE, "b": WAIT_QUEUE}, commit=True)
    assert [(j["args"]["node_id"], j["queue_name"]) for j in _jobs(database, run_id)] == [
        ("a", QUEUE),
        ("b", WAIT_QUEUE),
    ]


def test_a_node_with_a_waiting_job_keeps_that_one_job(database: str) -> None:
    run_id = "run-twice"
    _deferred_by_procrastinate(database, run_id, "a", QUEUE)
    # The same node again (a reconciler racing a step), with another that has none yet:
    # the transaction commits, the node keeps its one waiting job, the other gets its own.
    _in_a_transaction(database, run_id, {"a": QUEUE, "b": QUEUE}, commit=True)
    _in_a_transaction(database, run_id, {"a": WAIT_QUEUE}, commit=True)

    jobs = _jobs(database, run_id)
    assert sorted(j["args"]["node_id"] for j in jobs) == ["a", "b"]
    assert all(j["queue_name"] == QUEUE for j in jobs)
