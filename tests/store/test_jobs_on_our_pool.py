"""A queue job's fetch and completion on our asyncpg pool (db/procrastinate_queue.py, ADR 0021)
do what Procrastinate's own do: the fetch takes the job the library would and marks it as
the library does, a completion leaves the row as the library's leaves it, and a job whose
row a committed step deleted is completed without another statement.

On a real PostgreSQL database migrated as a server migrates it; the library's own job
manager (its psycopg connector) does the reference fetch and reads the jobs back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from procrastinate import App, PsycopgConnector
from procrastinate.jobs import Job, Status

from nodeloom.db.engine import Database
from nodeloom.db.procrastinate_queue import DELETE_DONE, OwnPoolJobManager, conninfo
from nodeloom.engine.dispatch.queue import TASK, insert_jobs
from nodeloom.engine.dispatch.waits import QUEUE, WAIT_QUEUE
from nodeloom.settings import Settings
from tests.conftest import TEST_SECRET
from tests.topology.fleet import postgres_database

pytestmark = pytest.mark.postgres


@pytest.fixture
def database() -> Iterator[str]:
    with postgres_database() as url:
        yield url


@pytest.fixture
async def db(database: str, tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(
        Settings(data_dir=tmp_path, secret_key=TEST_SECRET, database_url=database).prepare()
    )
    try:
        yield db
    finally:
        await db.dispose()


@pytest.fixture
async def library(database: str) -> AsyncIterator[App]:
    app = App(connector=PsycopgConnector(conninfo=conninfo(database)))
    async with app.open_async():
        yield app


@dataclass
class Worker:
    """Our job manager, and the id the library registered a worker under."""

    jobs: OwnPoolJobManager
    id: int

    async def take(self) -> Job:
        job = await self.jobs.fetch_job([QUEUE], self.id)
        assert job is not None and job.id is not None
        return job


@pytest.fixture
async def worker(db: Database, library: App) -> Worker:
    return Worker(
        OwnPoolJobManager(library.connector, db), await library.job_manager.register_worker()
    )


async def _queue(db: Database, run_id: str, queues: dict[str, str]) -> None:
    await db.write(lambda c: insert_jobs(c, run_id, queues))


async def _rows(db: Database, run_id: str) -> dict[str, dict[str, Any]]:
    def read(c: sa.Connection) -> dict[str, dict[str, Any]]:
        rows = c.execute(
            sa.text(
                "SELECT args->>'node_id' AS node, status::text AS status, worker_id, attempts"
                " FROM procrastinate_jobs WHERE args->>'run_id' = :run"
            ),
            {"run": run_id},
        )
        return {row.node: dict(row._mapping) for row in rows}

    return await db.read(read)


def _as_taken(job: Job) -> dict[str, Any]:
    """What a fetch says of a job, but for what differs from one job to the next."""
    fields = job.asdict()
    for name in ("id", "lock", "queueing_lock", "task_kwargs"):
        fields.pop(name)
    return fields


class TestFetch:
    async def test_takes_the_job_the_library_takes_and_marks_it_doing_for_the_worker(
        self, db: Database, library: App, worker: Worker
    ) -> None:
        await _queue(db, "run-1", {"a": QUEUE, "w": WAIT_QUEUE})
        await _queue(db, "run-2", {"a": QUEUE})

        taken = await worker.take()
        reference = await library.job_manager.fetch_job([QUEUE], worker.id)

        assert reference is not None
        # Oldest first, as the library's own order has it; the other queue's job stays.
        assert taken.task_kwargs == {"run_id": "run-1", "node_id": "a"}
        assert reference.task_kwargs == {"run_id": "run-2", "node_id": "a"}
        assert taken.task_name == TASK and taken.queue == QUEUE
        assert _as_taken(taken) == _as_taken(reference)
        rows = await _rows(db, "run-1")
        assert rows["a"]["status"] == "doing" and rows["a"]["worker_id"] == worker.id
        assert rows["w"]["status"] == "todo"
        assert await worker.jobs.fetch_job([QUEUE], worker.id) is None

    async def test_a_job_whose_lock_runs_elsewhere_is_not_taken(
        self, db: Database, worker: Worker
    ) -> None:
        await _queue(db, "run-1", {"a": QUEUE})
        first = await worker.take()
        # The reconciler queues the node again while its first job still runs.
        await _queue(db, "run-1", {"a": QUEUE})

        assert await worker.jobs.fetch_job([QUEUE], worker.id) is None
        await worker.jobs.finish_job(first, Status.SUCCEEDED, delete_job=True)
        assert (await worker.take()).id != first.id


class TestCompletion:
    async def test_success_deletes_the_job_and_failure_keeps_it_counted(
        self, db: Database, worker: Worker
    ) -> None:
        await _queue(db, "run-1", {"ok": QUEUE, "bad": QUEUE})
        ok, bad = await worker.take(), await worker.take()

        await worker.jobs.finish_job(ok, Status.SUCCEEDED, delete_job=True)
        await worker.jobs.finish_job(bad, Status.FAILED, delete_job=False)

        rows = await _rows(db, "run-1")
        failed = str(bad.task_kwargs["node_id"])
        assert list(rows) == [failed]
        assert rows[failed]["status"] == "failed" and rows[failed]["attempts"] == 1

    async def test_a_job_a_committed_step_deleted_is_completed_without_a_statement(
        self, db: Database, worker: Worker
    ) -> None:
        await _queue(db, "run-1", {"a": QUEUE})
        job = await worker.take()
        assert job.id is not None

        await db.write(lambda c: DELETE_DONE.run(c, {"job": job.id}))
        worker.jobs.finished_by_step(job.id)
        sent = db.statements
        await worker.jobs.finish_job(job, Status.SUCCEEDED, delete_job=True)

        assert db.statements == sent
        assert await _rows(db, "run-1") == {}

    async def test_a_step_that_rolled_back_leaves_the_job_to_its_completion(
        self, db: Database, worker: Worker
    ) -> None:
        await _queue(db, "run-1", {"a": QUEUE})
        job = await worker.take()

        def deleted_then_failed(c: sa.Connection) -> None:
            DELETE_DONE.run(c, {"job": job.id})
            raise RuntimeError("the step failed after deleting its job")

        with pytest.raises(RuntimeError):
            await db.write(deleted_then_failed)
        assert (await _rows(db, "run-1"))["a"]["status"] == "doing"

        await worker.jobs.finish_job(job, Status.FAILED, delete_job=False)
        assert (await _rows(db, "run-1"))["a"]["status"] == "failed"
