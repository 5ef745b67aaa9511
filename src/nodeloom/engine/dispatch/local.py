"""The in-process executor of the embedded default: each run is an asyncio task.

On start it resumes every run the database says is ``running`` (this process is the only
executor), and a periodic sweep picks up any run that is running but not driven here (a
submission lost to an error), so no run stays ``running`` forever while the service is up.
On stop it drains: no new nodes start, running nodes get ``shutdown_grace_seconds`` to
finish and commit, and whatever remains is resumed on the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict

from nodeloom.engine.runner import ExecutorEnv, RunDriver
from nodeloom.engine.submit import PreparedRun
from nodeloom.store import runs as run_store

log = logging.getLogger("nodeloom.dispatch")

SWEEP_SECONDS = 30.0
COMMIT_RETRY_SECONDS = 2.0


class LocalDispatcher:
    def __init__(self, env: ExecutorEnv) -> None:
        self.env = env
        self.accepting = False
        self._drivers: dict[str, RunDriver] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        # Runs waiting for a driver slot, in arrival order (bounded memory per waiting run).
        self._waiting: OrderedDict[str, PreparedRun | None] = OrderedDict()

    @property
    def active_runs(self) -> int:
        return len(self._tasks)

    @property
    def waiting_runs(self) -> int:
        return len(self._waiting)

    async def start(self) -> None:
        self.accepting = True
        await self._resume_all()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="run-sweeper")

    async def _resume_all(self) -> None:
        async with self.env.db.read() as session:
            run_ids = await run_store.running_ids(session)
        for run_id in run_ids:
            if run_id not in self._tasks and run_id not in self._waiting:
                log.info("resuming run %s", run_id)
                self._enqueue(run_id, None)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                await self._resume_all()
            except Exception:
                log.warning("run sweep failed", exc_info=True)

    async def submit(self, run_id: str, prepared: PreparedRun | None = None) -> None:
        if self.accepting and run_id not in self._tasks:
            self._enqueue(run_id, prepared)

    def _enqueue(self, run_id: str, prepared: PreparedRun | None) -> None:
        """Drive now if a slot is free (``max_active_runs``), else wait in line."""
        if len(self._tasks) < self.env.settings.max_active_runs:
            self._launch(run_id, prepared)
        else:
            self._waiting.setdefault(run_id, prepared)

    def _next(self) -> None:
        while self._waiting and self.accepting:
            if len(self._tasks) >= self.env.settings.max_active_runs:
                return
            run_id, prepared = self._waiting.popitem(last=False)
            if run_id not in self._tasks:
                self._launch(run_id, prepared)

    def _launch(self, run_id: str, prepared: PreparedRun | None = None) -> None:
        driver = RunDriver(self.env, run_id, prepared)
        self._drivers[run_id] = driver
        task = asyncio.create_task(self._drive(driver), name=f"run:{run_id}")
        self._tasks[run_id] = task

    async def _drive(self, driver: RunDriver) -> None:
        try:
            await driver.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            # The run stays "running" in the database; the sweep will try it again.
            log.exception("driving run %s failed; it will be retried", driver.run_id)
        finally:
            self._drivers.pop(driver.run_id, None)
            self._tasks.pop(driver.run_id, None)
            self._next()

    async def cancel(self, run_id: str) -> None:
        driver = self._drivers.get(run_id)
        if driver is not None:
            driver.cancel_requested.set()
        elif self.accepting:
            # Not driven here (or still waiting): drive it first; it reads the flag and
            # cancels before anything runs.
            self._waiting.pop(run_id, None)
            self._launch(run_id)

    async def stop(self) -> None:
        self.accepting = False
        self._waiting.clear()  # still "running" in the database: resumed on the next start
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for driver in self._drivers.values():
            driver.draining = True
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.env.settings.shutdown_grace_seconds)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
