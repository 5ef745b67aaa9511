"""Everything one Nodeloom process runs besides HTTP, built from settings: the database, the
artifact store, the event bus, the sandbox, the executor and its dispatcher, revocation and
retention. ``nodeloom serve`` wraps it in the web app (api/app.py); ``nodeloom worker`` runs
it alone.

Which dispatcher depends on the database:

- SQLite (the embedded default): ``LocalDispatcher``; each process drives the runs it
  accepted, in memory, and adopts those of dead processes sharing the file.
- PostgreSQL: ``QueueDispatcher``; every runnable node is a job of the Procrastinate queue,
  run by whichever worker (``serve`` unless ``--no-worker``, or ``nodeloom worker``) takes it;
  instant nodes are executed by the step that makes them runnable instead (ADR 0011).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nodeloom.artifacts.store import ArtifactStore, LocalArtifactStore
from nodeloom.auth.revocation import RevocationFeed, Revocations
from nodeloom.db.engine import Database
from nodeloom.engine.callbacks import CallbackSender
from nodeloom.engine.child_runs import ChildRuns
from nodeloom.engine.dispatch.base import Dispatcher
from nodeloom.engine.dispatch.local import LocalDispatcher
from nodeloom.engine.executor import ExecutorEnv, NodeExecutor
from nodeloom.engine.graph_cache import GraphCache
from nodeloom.engine.process import ProcessIdentity
from nodeloom.engine.retention import Retention
from nodeloom.engine.scratch import ScratchSpace
from nodeloom.engine.submit import Acceptor
from nodeloom.events.bus import EventBus, MemoryBus
from nodeloom.events.links import LogReader, PollingBus
from nodeloom.metrics import Metrics
from nodeloom.nodes.adapters import comfyui_fleet
from nodeloom.nodes.adapters.comfyui_drains import DrainFeed
from nodeloom.nodes.adapters.comfyui_reports import FleetReports
from nodeloom.nodes.registry import Registry, build_registry
from nodeloom.ratelimit import LocalWindows, Windows
from nodeloom.sandbox.fair import FairSlots
from nodeloom.sandbox.pool import SandboxPool
from nodeloom.settings import Settings
from nodeloom.store import runs as run_store

log = logging.getLogger("nodeloom")


def build_store(settings: Settings, db: Database) -> ArtifactStore:
    if settings.artifact_store == "s3":
        from nodeloom.artifacts.s3 import S3ArtifactStore

        return S3ArtifactStore(settings)
    return LocalArtifactStore(
        settings.artifacts_dir, fsync=settings.sqlite_synchronous == "FULL" or not db.is_sqlite
    )


def build_bus(settings: Settings, db: Database, origin: str) -> EventBus:
    """Redis links processes when configured; without it, processes sharing PostgreSQL (or
    the processes of one ``serve --processes N``) read each other's events from the log; one
    SQLite process needs neither."""
    if settings.redis_url:
        from nodeloom.events.redis_bus import RedisBus  # redis-py only where Redis is used

        return RedisBus(settings.redis_url, origin, LogReader(db))
    if not db.is_sqlite or settings.processes > 1:
        return PollingBus(LogReader(db))
    return MemoryBus()


def build_windows(settings: Settings) -> Windows:
    """Where rate limits are counted: Redis when configured (every replica shares it); else a
    file the processes of one ``serve --processes N`` share; else this process's memory."""
    if settings.redis_url:
        from nodeloom.ratelimit_redis import RedisWindows

        return RedisWindows(settings.redis_url)
    if settings.processes > 1:
        from nodeloom.ratelimit_shared import SharedWindows, windows_file

        return SharedWindows(windows_file(settings.data_dir))
    return LocalWindows()


@dataclass
class Runtime:
    settings: Settings
    db: Database
    registry: Registry
    store: ArtifactStore
    bus: EventBus
    metrics: Metrics
    sandbox: SandboxPool
    identity: ProcessIdentity
    scratch: ScratchSpace
    env: ExecutorEnv
    dispatcher: Dispatcher
    revocations: Revocations
    revocation_feed: RevocationFeed
    retention: Retention
    callbacks: CallbackSender
    fleet_reports: FleetReports
    drain_feed: DrainFeed

    @classmethod
    def build(
        cls, settings: Settings, registry: Registry | None = None, *, executes: bool = True
    ) -> Runtime:
        """``executes``: this process runs nodes (not for an API-only replica)."""
        db = Database(settings)
        registry = registry or build_registry(settings=settings)
        store = build_store(settings, db)
        identity = ProcessIdentity(settings.data_dir)
        bus = build_bus(settings, db, identity.token)
        metrics = Metrics()
        sandbox = SandboxPool(settings)
        scratch = ScratchSpace(settings.data_dir, identity)
        env = ExecutorEnv(
            settings=settings,
            db=db,
            registry=registry,
            store=store,
            bus=bus,
            slots=FairSlots.of(settings.max_concurrent_nodes),
            metrics=metrics,
            sandbox=sandbox,
            scratch=scratch,
        )
        dispatcher: Dispatcher
        if db.is_sqlite:
            dispatcher = LocalDispatcher(env, identity)
        else:
            # Procrastinate and psycopg only where PostgreSQL is used.
            from nodeloom.engine.dispatch.queue import QueueDispatcher

            dispatcher = QueueDispatcher(
                env,
                executes=executes,
                concurrency=settings.worker_concurrency,
                wait_concurrency=settings.worker_wait_concurrency,
            )
        revocations = Revocations()
        runtime = cls(
            settings=settings,
            db=db,
            registry=registry,
            store=store,
            bus=bus,
            metrics=metrics,
            sandbox=sandbox,
            identity=identity,
            scratch=scratch,
            env=env,
            dispatcher=dispatcher,
            revocations=revocations,
            revocation_feed=RevocationFeed(db, revocations),
            retention=Retention(settings, db, store),
            callbacks=CallbackSender(settings, db),
            fleet_reports=FleetReports(settings.redis_url, identity.token),
            drain_feed=DrainFeed(settings, db),
        )
        runtime._gauges()
        return runtime

    def build_acceptor(self, graphs: GraphCache) -> Acceptor:
        """The process's acceptor of runs; Workflow nodes executed here start their child
        runs through it (engine/subworkflows.py)."""
        acceptor = Acceptor(
            settings=self.settings,
            db=self.db,
            graphs=graphs,
            bus=self.bus,
            dispatcher=self.dispatcher,
            metrics=self.metrics,
            # Every process executes instant nodes while accepting a run, API-only replicas
            # too: they need no sandbox, slot or scratch directory, so a run made only of
            # them is accepted and finished in one transaction, never queued (ADR 0011).
            executor=NodeExecutor(self.env),
            claimant=self.identity.token,
        )
        self.env.children = ChildRuns(self.env, acceptor, self.cancel_run)
        return acceptor

    async def cancel_run(self, run_id: str) -> None:
        """Ask a running run to stop, as the cancel endpoint does (a child run whose
        parent was cancelled)."""
        await self.db.write(lambda c: run_store.request_cancel(c, [run_id]))
        await self.dispatcher.cancel(run_id)

    def _gauges(self) -> None:
        metrics, db, sandbox, dispatcher = self.metrics, self.db, self.sandbox, self.dispatcher
        metrics.gauge(
            "nodeloom_db_statements", "Statements sent to the database.", lambda: db.statements
        )
        metrics.gauge("nodeloom_db_write_groups", "SQLite group commits.", lambda: db.write_groups)
        metrics.gauge(
            "nodeloom_db_grouped_writes",
            "Write transactions carried by SQLite group commits.",
            lambda: db.grouped_writes,
        )
        if db.sqlite_memory_bytes is not None:
            metrics.gauge(
                "nodeloom_sqlite_memory_bytes",
                "Memory SQLite holds in this process (page caches, prepared statements).",
                lambda: db.sqlite_memory_bytes or 0,
            )
        metrics.gauge(
            "nodeloom_sandbox_processes", "Sandbox processes alive.", lambda: sandbox.processes
        )
        metrics.gauge(
            "nodeloom_sandbox_memory_booked_mb",
            "Memory budgets of the nodes running now.",
            lambda: sandbox.memory_booked_mb,
        )
        metrics.gauge(
            "nodeloom_sandbox_jobs_waiting",
            "Sandbox jobs waiting for a slot or memory (their account's share, or the pool's).",
            lambda: sandbox.jobs_waiting,
        )
        metrics.gauge(
            "nodeloom_runs_active",
            "Runs driven by this process.",
            lambda: float(getattr(dispatcher, "active_runs", 0)),
        )
        metrics.gauge(
            "nodeloom_runs_waiting",
            "Accepted runs waiting for a driver slot in this process.",
            lambda: float(getattr(dispatcher, "waiting_runs", 0)),
        )
        metrics.gauge(
            "nodeloom_runs_parked",
            "Runs driven here whose nodes only wait (approvals, child runs, provider jobs):"
            " their driver slots are given back meanwhile.",
            lambda: float(getattr(dispatcher, "parked_runs", 0)),
        )

    def describe(self) -> str:
        """What this process runs on, for the start-up log."""
        settings = self.settings
        database = "SQLite" if self.db.is_sqlite else "PostgreSQL"
        executor = type(self.dispatcher).__name__
        events = type(self.bus).__name__
        if settings.redis_url:
            limits = "Redis"
        elif settings.processes > 1:
            limits = f"a file shared by this server's {settings.processes} processes"
        else:
            limits = "this process's memory"
        return (
            f"{database}; executor {executor}; events {events}; rate limits in {limits}; "
            f"artifacts in {type(self.store).__name__}; process {self.identity.token}"
        )

    async def start(self) -> None:
        log.info("Nodeloom runs on %s", self.describe())
        self.identity.open()
        self.db.start()
        self.scratch.open()
        await self.bus.start()
        await self.revocation_feed.start()
        await self.sandbox.start()
        await self.dispatcher.start()
        await self.retention.start()
        await self.callbacks.start()
        await self.fleet_reports.start()
        await self.drain_feed.start()

    async def stop(self) -> None:
        await self.drain_feed.stop()
        await self.fleet_reports.stop()
        await self.callbacks.stop()
        await self.retention.stop()
        await self.dispatcher.stop()
        await self.env.connections.aclose()  # after the nodes that use them
        await comfyui_fleet.close_all()  # after the nodes: their health checks and clients
        await self.sandbox.stop()
        self.scratch.close()
        await self.revocation_feed.stop()
        await self.bus.stop()
        await self.db.dispose()
        self.identity.close()
