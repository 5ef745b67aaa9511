"""A queue job's own statements — its fetch and its completion — on the service's asyncpg
pool, not on Procrastinate's psycopg one (ADR 0021).

Procrastinate's worker runs every job through two statements of its own: the fetch
(``procrastinate_fetch_job_v2``, which marks the job ``doing``) and, once the task returned,
the completion (``procrastinate_finish_job_v1``, which deletes a job that succeeded). Each
went through the library's connector: a psycopg pool checkout, a cursor, psycopg's async
wait loop; the completion was a transaction of its own after the finish step had
committed, and the fetch sits between a node becoming runnable and its start. Sent on our
pool, with the completion folded into the finish step, a worker spent 10-30% less CPU per
run (measured one run at a time; ADR 0021 has the figures).

``OwnPoolJobManager`` is the library's job manager with those two statements sent on our
pool, straight on asyncpg, the same SQL functions with the same arguments (the schema and
its semantics stay Procrastinate's). Better still, the completion of a job whose node
finished normally is not a statement of its own at all: the dispatcher's finish step
deletes the job in its own transaction (``DELETE_DONE``), as the library's completion
would, and tells the manager (``finished_by_step``) so that the worker's completion call
for that job sends nothing. The job is gone if and only if the step committed; should the
worker die between the two, nothing is left to do. Every other outcome (failed, aborted,
cancelled at shutdown) is completed the library's way, on our pool.

Everything else — the worker loop, job slots, heartbeats, LISTEN/NOTIFY, aborts,
stalled-job queries, cancelling — stays the library's, on its own pool.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from procrastinate.connector import BaseConnector
from procrastinate.jobs import Job, Status
from procrastinate.manager import JobManager

from nodeloom.db.engine import Database
from nodeloom.db.prepared import Prepared

# The library's own fetch and completion, positional for asyncpg.
_FETCH = (
    "SELECT id, status, task_name, priority, lock, queueing_lock, args, scheduled_at,"
    " queue_name, attempts, worker_id"
    " FROM procrastinate_fetch_job_v2($1::varchar[], $2::bigint)"
)
_FINISH = (
    "SELECT procrastinate_finish_job_v1($1::bigint, $2::procrastinate_job_status, $3::boolean)"
)
_JOBS = sa.table("procrastinate_jobs", sa.column("id"))
# What ``procrastinate_finish_job_v1`` does with a job that succeeded (``delete_jobs=
# "successful"``), as one statement of the finish step's transaction.
DELETE_DONE = Prepared(
    sa.delete(_JOBS).where(
        _JOBS.c.id == sa.bindparam("job", type_=sa.BigInteger),
        sa.text("status IN ('todo', 'doing')"),  # an enum of the library's: literals
    )
)


class OwnPoolJobManager(JobManager):
    """Procrastinate's job manager, its fetch and completion on our pool (module doc)."""

    def __init__(self, connector: BaseConnector, db: Database) -> None:
        super().__init__(connector)
        self.db = db
        self._finished: set[int] = set()

    def finished_by_step(self, job_id: int) -> None:
        """The job's row was deleted by a committed step: its completion is done."""
        self._finished.add(job_id)

    async def fetch_job(self, queues: Iterable[str] | None, worker_id: int) -> Job | None:
        names = list(queues) if queues is not None else None
        row = await self.db.fetch_row_alone(_FETCH, names, worker_id)
        if row is None or row["id"] is None:
            return None
        # ``args`` (jsonb) comes decoded: the pool's connections carry SQLAlchemy's codec.
        return Job.from_row(dict(row))

    async def finish_job(self, job: Job, status: Status, delete_job: bool) -> None:
        assert job.id is not None
        if job.id in self._finished:
            self._finished.discard(job.id)
            return
        await self.finish_job_by_id_async(job.id, status, delete_job)

    async def finish_job_by_id_async(self, job_id: int, status: Status, delete_job: bool) -> None:
        await self.db.fetch_row_alone(_FINISH, job_id, status.value, delete_job)
