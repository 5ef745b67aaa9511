"""The only module that reaches Procrastinate, the PostgreSQL job queue: it imports the
library and names its tables and SQL functions (``procrastinate_*``). The queue is the
library's (ADR 0006), but our statements write its job table and call its functions by name
for speed (ADR 0020, 0021), so a release that changes them must be caught in one place:
tests/store/test_procrastinate_pin.py pins the release and a fingerprint of its schema and
checks that nothing outside this module reaches the library (ADR 0042).

Here:
- the library's objects the dispatcher uses (``App``, ``JobContext``, ``Status``), the app
  built on a psycopg pool checked only when idle (``new_app``);
- the job's fetch and completion on our asyncpg pool (``OwnPoolJobManager``, ADR 0021);
- our statements on its tables: the jobs a step inserts (``ENQUEUE``), the job a finish step
  deletes (``DELETE_DONE``), the reconciler's queries (``ORPHANS``, ``STALE_CLAIMS``);
- its schema, installed and brought up to the installed release by ``nodeloom db upgrade``
  (``upgrade_schema``).

The job manager: Procrastinate's worker runs every job through two statements of its own,
the fetch (``procrastinate_fetch_job_v2``, which marks the job ``doing``) and, once the task
returned, the completion (``procrastinate_finish_job_v1``, which deletes a job that
succeeded). Sent through the library's connector, each was a psycopg pool checkout, a cursor,
psycopg's async wait loop; sent on our pool, straight on asyncpg, with the completion folded
into the finish step, a worker spent 10-30% less CPU per run (ADR 0021 has the figures). The
completion of a job whose node finished normally is not a statement of its own at all: the
dispatcher's finish step deletes the job in its own transaction (``DELETE_DONE``), as the
library's completion would, and tells the manager (``finished_by_step``) so that the worker's
completion call for that job sends nothing. Every other outcome (failed, aborted, cancelled
at shutdown) is completed the library's way, on our pool. Everything else — the worker loop,
job slots, heartbeats, LISTEN/NOTIFY, aborts, stalled-job queries — stays the library's, on
its own pool.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
import psycopg_pool
import sqlalchemy as sa
from procrastinate import App, JobContext, PsycopgConnector
from procrastinate.connector import BaseConnector
from procrastinate.jobs import Job, Status
from procrastinate.manager import JobManager
from procrastinate.schema import SchemaManager
from procrastinate.worker import Worker
from sqlalchemy.dialects import postgresql

from nodeloom.db.engine import IDLE_PING_SECONDS, Database
from nodeloom.db.prepared import IF_CREATED_ROW, Prepared

__all__ = [
    "DELETE_DONE",
    "ENQUEUE",
    "ENQUEUE_IF_CREATED",
    "ORPHANS",
    "STALE_CLAIMS",
    "App",
    "JobContext",
    "OwnPoolJobManager",
    "QueueWorker",
    "Status",
    "conninfo",
    "new_app",
    "release",
    "schema_sql",
    "scripts",
    "upgrade_schema",
]

# -- the library -------------------------------------------------------------------------


def release() -> str:
    """The installed Procrastinate release."""
    return importlib.metadata.version("procrastinate")


def conninfo(url: str) -> str:
    """A libpq connection string from our SQLAlchemy URL (postgresql+asyncpg://...)."""
    return (
        sa.engine.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    )


def pool_checked_when_idle(**kwargs: Any) -> psycopg_pool.AsyncConnectionPool:
    """Procrastinate's connection pool, checking a connection only when it sat unused for
    ``IDLE_PING_SECONDS`` (as db/engine.py does for ours), not at every checkout: the
    library's check is an empty query, one more round trip in front of every fetch, every
    job's completion and every heartbeat. A connection broken meanwhile fails the one
    query that finds it (Procrastinate retries a fetch; the reconciler sees to the rest)
    and the pool replaces it."""
    returned: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
        weakref.WeakKeyDictionary()
    )

    async def check(conn: psycopg.AsyncConnection[Any]) -> None:
        used_at = returned.get(conn)
        if used_at is None or time.monotonic() - used_at > IDLE_PING_SECONDS:
            await psycopg_pool.AsyncConnectionPool.check_connection(conn)

    async def reset(conn: psycopg.AsyncConnection[Any]) -> None:
        returned[conn] = time.monotonic()

    kwargs["check"] = check
    kwargs["reset"] = reset
    return psycopg_pool.AsyncConnectionPool(**kwargs)


def new_app(url: str, *, max_size: int, db: Database) -> tuple[App, OwnPoolJobManager]:
    """A Procrastinate app on its own psycopg pool (heartbeats, LISTEN/NOTIFY, aborts), its
    jobs fetched and finished on ``db``'s pool."""
    app = App(
        connector=PsycopgConnector(
            conninfo=conninfo(url),
            min_size=1,
            max_size=max_size,
            pool_factory=pool_checked_when_idle,
        )
    )
    jobs = OwnPoolJobManager(app.connector, db)
    app.job_manager = jobs
    return app, jobs


class QueueWorker:
    """A Procrastinate worker made here rather than inside ``App.run_worker_async``, so
    that its owner can ask it to stop (its running jobs get the shutdown grace) instead of
    cancelling its task; typed, which the library's methods are not."""

    def __init__(self, app: App, **options: Any) -> None:
        self._worker = Worker(app=app, **options)

    async def run(self) -> None:
        await self._worker.run()  # type: ignore[no-untyped-call]

    def stop(self) -> None:
        """Idempotent. A stop asked before ``run`` began is forgotten when it begins."""
        self._worker.stop()  # type: ignore[no-untyped-call]


# -- a job's fetch and completion on our pool (ADR 0021) ---------------------------------

# The library's own fetch and completion, positional for asyncpg.
_FETCH = (
    "SELECT id, status, task_name, priority, lock, queueing_lock, args, scheduled_at,"
    " queue_name, attempts, worker_id"
    " FROM procrastinate_fetch_job_v2($1::varchar[], $2::bigint)"
)
_FINISH = (
    "SELECT procrastinate_finish_job_v1($1::bigint, $2::procrastinate_job_status, $3::boolean)"
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


# -- our statements on its tables ---------------------------------------------------------

_JOBS = sa.table("procrastinate_jobs", sa.column("id"))
# What ``procrastinate_finish_job_v1`` does with a job that succeeded (``delete_jobs=
# "successful"``), as one statement of the finish step's transaction.
DELETE_DONE = Prepared(
    sa.delete(_JOBS).where(
        _JOBS.c.id == sa.bindparam("job", type_=sa.BigInteger),
        sa.text("status IN ('todo', 'doing')"),  # an enum of the library's: literals
    )
)

# Procrastinate's own defer (``procrastinate_defer_jobs_v1``) as one statement of the
# caller's transaction; a node that already has a waiting job keeps it (its queueing lock),
# where the library's defer would raise and abort the transaction. Parameters: ``task``,
# ``run``, and per job ``nodes``, ``queues``, ``locks`` (the lock is the queueing lock too).
_TEXTS = postgresql.ARRAY(sa.Text)
_ENQUEUE_SQL = """
    INSERT INTO procrastinate_jobs (queue_name, task_name, lock, queueing_lock, args)
    SELECT j.queue, :task, j.lock, j.lock,
           jsonb_build_object('run_id', CAST(:run AS text), 'node_id', j.node)
    FROM unnest(CAST(:nodes AS text[]), CAST(:queues AS text[]), CAST(:locks AS text[]))
         AS j(node, queue, lock)
    {condition}ON CONFLICT (queueing_lock) WHERE status = 'todo' DO NOTHING
"""


def _enqueue(condition: str) -> Prepared:
    return Prepared(
        sa.text(_ENQUEUE_SQL.format(condition=condition)).bindparams(
            sa.bindparam("task", type_=sa.Text),
            sa.bindparam("run", type_=sa.Text),
            sa.bindparam("nodes", type_=_TEXTS),
            sa.bindparam("queues", type_=_TEXTS),
            sa.bindparam("locks", type_=_TEXTS),
        )
    )


ENQUEUE = _enqueue("")
# The same insert as a part of an acceptance sent as one statement (db/prepared.py's
# ``if_created``): the jobs are inserted only if the run's row was.
ENQUEUE_IF_CREATED = _enqueue(f"WHERE {IF_CREATED_ROW} ")

# Nodes queued before ``:before`` without a waiting or running job (the reconciler gives
# them one); the queueing lock is ``node:<run>:<node>`` (dispatch/queue.py's ``lock_of``).
ORPHANS = sa.text(
    """
    SELECT n.run_id, n.node_id FROM node_runs n
    WHERE n.status = 'queued' AND n.queued_at < :before
      AND NOT EXISTS (
        SELECT 1 FROM procrastinate_jobs j
        WHERE j.queueing_lock = 'node:' || n.run_id || ':' || n.node_id
          AND j.status IN ('todo', 'doing'))
    LIMIT 500
    """
)
# Nodes running since before ``:before`` under a job's claim (``job:<id>@<process>``,
# dispatch/queue.py's ``claim_of``) whose job is no longer running.
STALE_CLAIMS = sa.text(
    """
    SELECT n.run_id, n.node_id, n.claimed_by FROM node_runs n
    LEFT JOIN procrastinate_jobs j
      ON j.id = CAST(split_part(substr(n.claimed_by, 5), '@', 1) AS bigint)
     AND j.status = 'doing'
    WHERE n.status = 'running' AND n.claimed_by LIKE 'job:%' AND j.id IS NULL
      AND n.started_at < :before
    LIMIT 500
    """
)

# -- its schema ---------------------------------------------------------------------------

# Which of the library's migration scripts a database has run, by file name. Ours, but named
# like the library's tables: it lives and goes with them (test_migrations and `db copy-to`
# leave ``procrastinate_*`` alone).
APPLIED_TABLE = "procrastinate_applied_migrations"
# Databases migrated before that table existed got the schema of 3.10.0 from our Alembic
# migration 0005 (the only release pyproject.toml allowed then): they have run every script
# up to this one.
BASELINE = "03.04.00_50_post_add_retry_failed_job_procedure.sql"
# One `db upgrade` at a time (a fleet's workers start together and each upgrades first).
_LOCK_KEY = 0x70726F63  # "proc"


def schema_sql() -> str:
    """The library's full schema, what a new database gets."""
    return SchemaManager.get_schema()


def scripts() -> dict[str, str]:
    """The library's migration scripts, by name in the order they apply (their names start
    with the release, zero-padded: ``03.04.00_50_post_...``)."""
    folder = importlib.resources.files("procrastinate.sql.migrations")
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".sql")
    }


def upgrade_schema(url: str, log: Callable[[str], None] = lambda _: None) -> list[str]:
    """Install Procrastinate's schema in a PostgreSQL database, or bring it up to the
    installed release: the migration scripts it has not run, in order, in one transaction,
    each recorded in ``APPLIED_TABLE``. Idempotent; returns the scripts applied (for a new
    database, the schema's name)."""
    known = scripts()
    with psycopg.connect(conninfo(url)) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {APPLIED_TABLE} ("
            " name text PRIMARY KEY, release text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        applied = {row[0] for row in conn.execute(f"SELECT name FROM {APPLIED_TABLE}")}  # noqa: S608
        done: list[str] = []
        if not applied:
            installed = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
            if installed is not None and installed[0] is not None:
                applied = {name for name in known if name <= BASELINE}
            else:
                # The schema is every script of the release at once.
                _run_script(conn, schema_sql())
                applied = set(known)
                done.append("schema.sql")
            _record(conn, applied)
        for name, script in known.items():
            if name in applied:
                continue
            log(f"applying Procrastinate's migration {name}")
            _run_script(conn, script)
            _record(conn, [name])
            done.append(name)
    return done


def _run_script(conn: psycopg.Connection[Any], script: str) -> None:
    # Many statements in one string: psycopg sends it as a simple query (no parameters).
    conn.execute(script.encode())


def _record(conn: psycopg.Connection[Any], names: Iterable[str]) -> None:
    with conn.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {APPLIED_TABLE} (name, release) VALUES (%s, %s)"  # noqa: S608
            " ON CONFLICT (name) DO NOTHING",
            [(name, release()) for name in sorted(names)],
        )
