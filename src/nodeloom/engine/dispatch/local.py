"""The in-process executor of the embedded mode: each run is an asyncio task of the process
that drives it.

A run is driven by exactly one live process: ``runs.driver`` holds its token from the
moment the run is accepted (engine/submit.py), and another process takes a run over only
with a conditional UPDATE naming the previous driver, and only when that driver is gone
(``ProcessIdentity.is_alive``: its lock is free). So any number of ``nodeloom serve``
processes may share one SQLite file, and none runs another's nodes.

Every ``SWEEP_SECONDS`` (and at start) a sweep adopts the running runs of dead processes —
including this process's previous life after a crash — and passes on cancellations made by
other processes. On stop it drains: no new nodes start, running nodes get
``shutdown_grace_seconds`` to finish and commit, and whatever remains is adopted by the next
process to start.

Driver slots (``max_active_runs``) are shared fairly between accounts (``sandbox/fair.py``):
an account drives at most all but one of them, and a freed slot goes to the waiting run of
the account that drives the fewest; an account's own runs start in the order they came. A
driven run whose nodes only wait (approvals, child runs, provider jobs) gives its slot back
(``park``) and asks for one again, in its account's line, before it goes on (``unpark``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nodeloom.db.models import Run
from nodeloom.db.prepared import Params, Prepared
from nodeloom.engine.dispatch.base import Handover
from nodeloom.engine.executor import ExecutorEnv
from nodeloom.engine.items import AccountItems
from nodeloom.engine.process import ProcessIdentity
from nodeloom.engine.run_state import RunState
from nodeloom.engine.runner import RunDriver
from nodeloom.sandbox.fair import FairQueue, Ticket
from nodeloom.states import RunStatus

log = logging.getLogger("nodeloom.dispatch")

SWEEP_SECONDS = 2.0

_RUNS = cast(sa.Table, Run.__table__)
_RUNNING = sa.select(
    _RUNS.c.id, _RUNS.c.driver, _RUNS.c.cancel_requested, _RUNS.c.account_id
).where(_RUNS.c.status == RunStatus.RUNNING.value)
_ADOPT = (
    sa.update(_RUNS)
    .where(
        _RUNS.c.id == sa.bindparam("run"),
        _RUNS.c.status == RunStatus.RUNNING.value,
        sa.or_(_RUNS.c.driver == sa.bindparam("previous"), _RUNS.c.driver.is_(None)),
    )
    .values(driver=sa.bindparam("me"))
)


class LocalDispatcher:
    def __init__(self, env: ExecutorEnv, identity: ProcessIdentity) -> None:
        self.env = env
        self.identity = identity
        self.accepting = False
        self._drivers: dict[str, RunDriver] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._sweep_now = asyncio.Event()
        # Driver slots, granted fairly between accounts; runs waiting for one (bounded
        # memory per waiting run), and the slot each driven run holds.
        self._slots = FairQueue(env.settings.max_active_runs)
        self._waiting: dict[str, tuple[Ticket, RunState | None]] = {}
        self._run_of: dict[Ticket, str] = {}
        self._held: dict[str, Ticket] = {}
        # Parked runs asking for a slot again, woken when it is granted.
        self._unparking: dict[Ticket, asyncio.Future[None]] = {}
        # Batch items in flight per account, across the runs driven here (engine/items.py).
        self._items = AccountItems(env.settings.batch_items_in_flight_per_account)

    @property
    def owner(self) -> str | None:
        """What accepted runs record as their driver: this process."""
        return self.identity.token

    @property
    def active_runs(self) -> int:
        return len(self._tasks)

    @property
    def waiting_runs(self) -> int:
        return len(self._waiting)

    @property
    def parked_runs(self) -> int:
        return sum(1 for driver in self._drivers.values() if driver.parked)

    async def start(self) -> None:
        self.accepting = True
        await self._sweep()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="run-sweeper")

    async def _sweep(self) -> None:
        """Adopt the runs of dead drivers; pass on cancellations of runs driven here."""
        rows = await self.env.db.read(lambda c: c.execute(_RUNNING).all())
        me = self.identity.token
        alive: dict[str, bool] = {}
        for run_id, driver, cancel_requested, account_id in rows:
            if driver == me:
                local = self._drivers.get(run_id)
                if local is not None and cancel_requested:
                    local.cancel_requested.set()
                elif run_id not in self._tasks and run_id not in self._waiting:
                    self._enqueue(run_id, account_id)  # ours, but its driver ended early
                continue
            if driver is not None:
                if driver not in alive:
                    alive[driver] = self.identity.is_alive(driver)
                if alive[driver]:
                    continue
            if await self.env.db.write(_adopter(run_id, driver, me)):
                log.info("adopting run %s (its driver %s is gone)", run_id, driver or "none")
                self._enqueue(run_id, account_id)

    async def _sweep_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SWEEP_SECONDS):
                    await self._sweep_now.wait()
            self._sweep_now.clear()
            try:
                await self._sweep()
            except Exception:
                log.warning("run sweep failed", exc_info=True)

    async def submit(self, run_id: str, fresh: RunState | None = None) -> None:
        if self.accepting and run_id not in self._tasks:
            # Without its state (a resubmission) the run is counted under no account until
            # the sweep finds it; every run accepted here comes with its state.
            self._enqueue(run_id, fresh.account_id if fresh is not None else "", fresh)

    def handover(
        self, conn: Connection | None, nodes: Handover
    ) -> tuple[Prepared, Params | None] | None:
        return None  # this process drives the run: ``submit`` once it is committed

    def _enqueue(self, run_id: str, account_id: str, fresh: RunState | None = None) -> None:
        """Drive now if the account may have a slot (``max_active_runs``), else wait."""
        if not self.accepting or run_id in self._tasks or run_id in self._waiting:
            return
        ticket = self._slots.ask(account_id)
        self._waiting[run_id] = (ticket, fresh)
        self._run_of[ticket] = run_id
        self._next()

    def _next(self) -> None:
        if not self.accepting:
            return
        for ticket in self._slots.grants():
            resumed = self._unparking.pop(ticket, None)
            if resumed is not None:
                resumed.set_result(None)
                continue
            run_id = self._run_of.pop(ticket)
            _, fresh = self._waiting.pop(run_id)
            self._launch(run_id, fresh, ticket)

    def park(self, run_id: str) -> None:
        ticket = self._held.pop(run_id, None)
        if ticket is not None:
            self._slots.release(ticket)
            self._next()

    async def unpark(self, run_id: str, account_id: str) -> None:
        if not self.accepting:
            return  # stopping: the driver drains, starting nothing, and needs no slot
        ticket = self._slots.ask(account_id)
        granted = asyncio.get_running_loop().create_future()
        self._unparking[ticket] = granted
        self._next()
        try:
            await granted
        except asyncio.CancelledError:
            self._unparking.pop(ticket, None)
            self._slots.release(ticket)  # granted or not: given back or withdrawn
            self._next()
            raise
        self._held[run_id] = ticket

    def _forget_waiting(self, run_id: str) -> None:
        ticket, _ = self._waiting.pop(run_id)
        del self._run_of[ticket]
        self._slots.release(ticket)

    def _launch(
        self, run_id: str, fresh: RunState | None = None, ticket: Ticket | None = None
    ) -> None:
        driver = RunDriver(
            self.env, run_id, self.identity.token, fresh, items=self._items, slots=self
        )
        if ticket is not None:
            self._held[run_id] = ticket
        self._drivers[run_id] = driver
        task = asyncio.create_task(self._drive(driver), name=f"run:{run_id}")
        self._tasks[run_id] = task

    async def _drive(self, driver: RunDriver) -> None:
        try:
            await driver.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            # The run stays "running" in the database, driven by us: the sweep tries again.
            log.exception("driving run %s failed; it will be retried", driver.run_id)
        finally:
            self._drivers.pop(driver.run_id, None)
            self._tasks.pop(driver.run_id, None)
            ticket = self._held.pop(driver.run_id, None)
            if ticket is not None:
                self._slots.release(ticket)
            self._next()

    async def cancel(self, run_id: str) -> None:
        """The run's cancel flag is committed: act on it here, or let the sweep (here or in
        the process that drives it) do so."""
        driver = self._drivers.get(run_id)
        if driver is not None:
            driver.cancel_requested.set()
            return
        if run_id in self._waiting:
            self._forget_waiting(run_id)
            self._launch(run_id)  # it reads the flag and cancels before anything runs
            return
        self._sweep_now.set()

    async def stop(self) -> None:
        self.accepting = False
        for run_id in list(self._waiting):  # still running in the database: adopted later
            self._forget_waiting(run_id)
        for ticket, resumed in list(self._unparking.items()):  # drained without a slot
            del self._unparking[ticket]
            self._slots.release(ticket)
            resumed.set_result(None)
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for driver in self._drivers.values():
            driver.drain()  # a run that only waits for people stops at once, left for adoption
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.env.settings.shutdown_grace_seconds)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


def _adopter(run_id: str, previous: str | None, me: str) -> Callable[[Connection], bool]:
    def adopt(conn: Connection) -> bool:
        params = {"run": run_id, "previous": previous, "me": me}
        return bool(conn.execute(_ADOPT, params).rowcount)

    return adopt
