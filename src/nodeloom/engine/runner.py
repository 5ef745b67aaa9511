"""The in-process driver of one run (the embedded mode): start runnable nodes, execute them,
record each step durably, finish.

The process that drives a run owns it (``runs.driver`` holds its token, see
dispatch/local.py), so it keeps the run's state in memory (``RunState``) between steps: the
database row is the truth, the memory a cache of it that only this process writes. A step is
everything that changed since the last commit (nodes finished, nodes started or queued, the
run ended); it is written as one transaction (``transitions.Batch``) and only then announced,
one step at a time (a per-run commit lock), so event ``seq`` numbers follow the run's log
(``stepper.write``).

What a step does — loading an adopted run, failing one whose graph no longer validates,
giving interrupted nodes another go or failing them ``node_crashed``, cancelling, ending the
run, throttling progress — is engine/stepper.py's, shared with the queue workers (steps.py).

A run whose running nodes all wait on something outside the process (a person's approval,
a child run, a provider's job) gives its driver slot back while it waits (``DriverSlots``)
and asks for one again before it starts anything more: a slot held by a wait that may last
days starved every other run, and a parent run holding its account's last slot while it
waited for a child run that needed one never ended.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Protocol

from nodeloom.db.models import utcnow
from nodeloom.engine import stepper
from nodeloom.engine.dispatch.waits import may_wait, node_of
from nodeloom.engine.executor import ExecutorEnv, NodeExecutor, NodeTask
from nodeloom.engine.items import AccountItems
from nodeloom.engine.run_state import Outcome, RunState
from nodeloom.engine.stepper import RunGraphs, Unrunnable
from nodeloom.engine.transitions import Batch
from nodeloom.events.model import EventType
from nodeloom.nodes.approval import APPROVAL_TYPE
from nodeloom.states import NodeStatus

log = logging.getLogger("nodeloom.engine")


class DriverSlots(Protocol):
    """The dispatcher's driver slots, as a driven run gives its own back and asks again."""

    def park(self, run_id: str) -> None:
        """The run only waits: its slot may go to another run."""

    async def unpark(self, run_id: str, account_id: str) -> None:
        """Back once the run holds a slot again (at once when the process is stopping)."""


class RunDriver:
    def __init__(
        self,
        env: ExecutorEnv,
        run_id: str,
        owner: str,
        fresh: RunState | None = None,
        graphs: RunGraphs | None = None,
        items: AccountItems | None = None,
        slots: DriverSlots | None = None,
    ) -> None:
        self.env = env
        self.run_id = run_id
        self.owner = owner  # this process's token: the claim on every node it starts
        self._fresh = fresh  # the state of a run just accepted here, as accepted
        self.graphs = graphs or RunGraphs(env.registry, env.settings, size=1)
        self.executor = NodeExecutor(env)
        self.cancel_requested = asyncio.Event()
        self._drained = asyncio.Event()  # set by ``drain``: wakes a run that waits for people
        self._commit_lock = asyncio.Lock()
        self._tasks: dict[asyncio.Task[Outcome], str] = {}
        self._throttle = stepper.Throttle()
        self.state: RunState | None = None
        # The process's count of batch items in flight per account (engine/items.py), and
        # the event another run of the account sets when it frees room.
        self.items = items
        self._wake: asyncio.Event | None = None
        self.slots = slots
        self.parked = False  # its slot given back while its nodes only wait
        self._waits: set[asyncio.Task[Outcome]] = set()  # tasks of nodes that only wait

    def drain(self) -> None:
        """The process is stopping: start no more nodes, and stop driving as soon as every
        running node waits for a person (Approval nodes). Such a run is left running in the
        database, its approvals stored, for the next process to adopt: nothing will finish
        within the shutdown grace, so it is not spent on them. A provider's job or a child
        run may well end within the grace, and a node interrupted counts an attempt
        (``stepper.interrupted``): those are waited for, as computing nodes are."""
        self._drained.set()

    @property
    def draining(self) -> bool:
        """The process is stopping (``drain``)."""
        return self._drained.is_set()

    def _only_people(self, state: RunState) -> bool:
        """Every running node of the run waits for a person (an Approval node)."""
        nodes = [node_of(state.graph, node_id) for node_id in self._tasks.values()]
        return all(node is not None and node.type == APPROVAL_TYPE for node in nodes)

    # -- loading ---------------------------------------------------------------------------

    async def _load(self) -> RunState | None:
        """The run as stored (or as just created); None when it is not running, or its
        graph no longer validates (then it is failed here)."""
        if self._fresh is not None:
            return self._fresh
        load = functools.partial(stepper.load, run_id=self.run_id, graphs=self.graphs)
        try:
            state = await self.env.db.read(load)
        except Unrunnable as unrunnable:
            fail = functools.partial(
                stepper.fail_unrunnable, run_id=self.run_id, problem=unrunnable.problem
            )
            events = await self.env.db.write(fail)
            await self._announce(events)
            return None
        if state is not None and state.cancel_requested:
            self.cancel_requested.set()
        return state

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        state = await self._load()
        if state is None:
            return
        self.state = state
        batch = state.batch()
        limit = self.env.settings.node_max_attempts
        interrupted = state.with_status(NodeStatus.RUNNING)
        stepper.interrupted(state, batch, interrupted, utcnow(), limit)
        if self.items is not None:
            self._wake = self.items.join(state.account_id, self.run_id)
        try:
            await self._loop(state, batch)
        finally:
            if self.items is not None:
                self.items.leave(state.account_id, self.run_id)
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _loop(self, state: RunState, batch: Batch) -> None:
        cancel_wait: asyncio.Future[Any] = asyncio.ensure_future(self.cancel_requested.wait())
        drained: asyncio.Future[Any] = asyncio.ensure_future(self._drained.wait())
        try:
            while True:
                if self.cancel_requested.is_set():
                    await self._cancel(state, batch)
                    return
                if self.parked:
                    batch = await self._unpark(state, batch, cancel_wait)
                    continue  # the cancel check again: a cancel may have ended the wait
                if self._wake is not None:
                    self._wake.clear()  # room freed before this advance is seen by it
                started = await self._run_instant(state, batch, self._advance(state, batch))
                finished = batch.run_end is not None
                await self._commit(batch)
                for node_id in started:
                    task = asyncio.create_task(self._execute(state, node_id), name=node_id)
                    self._tasks[task] = node_id
                    node = node_of(state.graph, node_id)
                    if node is not None and may_wait(node):
                        self._waits.add(task)
                # Nothing runs here but items are held by the account's cap: another run
                # of the account wakes this one when its items end (engine/items.py).
                held = state.held and self._wake is not None and not self.draining
                if finished or (not self._tasks and not held):
                    return
                if self._tasks and not held and self._waits.issuperset(self._tasks):
                    self._park()
                    if self.draining and self._only_people(state):
                        return  # the approvals wait on without this driver (``drain``)
                waiting: list[asyncio.Future[Any]] = [*self._tasks, cancel_wait]
                if not self.draining:  # once seen, a done future would end every wait
                    waiting.append(drained)
                if self._wake is not None:
                    wake_wait = asyncio.ensure_future(self._wake.wait())
                    waiting.append(wake_wait)
                try:
                    done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if self._wake is not None:
                        wake_wait.cancel()
                batch = state.batch()
                for task in list(self._tasks):
                    if task in done:
                        self._tasks.pop(task)
                        self._waits.discard(task)
                        state.record(batch, task.result())
                self._count_items(state)
        finally:
            cancel_wait.cancel()
            drained.cancel()

    def _park(self) -> None:
        if self.slots is not None and not self.parked:
            self.parked = True
            self.slots.park(self.run_id)

    async def _unpark(
        self, state: RunState, batch: Batch, cancel_wait: asyncio.Future[Any]
    ) -> Batch:
        """Commit what the waits ended with (their nodes' outcomes are announced now, not
        once a slot is free), then wait for a slot or a cancel; the batch to go on with."""
        await self._commit(batch)
        assert self.slots is not None
        unpark = asyncio.ensure_future(self.slots.unpark(self.run_id, state.account_id))
        try:
            await asyncio.wait([unpark, cancel_wait], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not unpark.done():
                unpark.cancel()  # cancelled: its request for a slot is withdrawn
                await asyncio.gather(unpark, return_exceptions=True)
        self.parked = not unpark.done() or unpark.cancelled()
        return state.batch()

    async def _run_instant(self, state: RunState, batch: Batch, started: list[str]) -> list[str]:
        # Within the step: no timeout, execution slot or scratch directory (an instant node
        # needs none), the output cache still honoured; a node that needs a sandbox after
        # all (a template Jinja must render) is left to run as a task.
        return await stepper.run_instant(
            state,
            batch,
            started,
            lambda node_id: self.executor.execute_in_step(NodeTask.of(state, node_id)),
            lambda: self._advance(state, batch),
            self.cancel_requested.is_set,
        )

    def _advance(self, state: RunState, batch: Batch) -> list[str]:
        # Draining for shutdown: finish what runs, start nothing new.
        limit = 0 if self.draining else self.env.settings.max_concurrent_nodes_per_run
        room = max(0, limit - state.count(NodeStatus.RUNNING))
        if self.items is not None:
            state.items_allowed = self.items.allowed(state.account_id, self.run_id)
        started = stepper.advance(state, batch, utcnow(), self.owner, room)
        self._count_items(state)  # before any await: other drivers count these now
        return started

    def _count_items(self, state: RunState) -> None:
        if self.items is not None and state.graph.batches:
            self.items.update(
                state.account_id, self.run_id, state.items_in_flight(), holding=state.held
            )

    async def _cancel(self, state: RunState, batch: Batch) -> None:
        """Stop the nodes running here, then cancel: nothing runs elsewhere."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        stepper.cancel(state, batch, utcnow())
        await self._commit(batch)

    # -- committing ------------------------------------------------------------------------

    async def _commit(self, batch: Batch) -> None:
        if not batch:
            return
        state = self.state
        assert state is not None
        write = functools.partial(stepper.write, state=state, batch=batch)
        async with self._commit_lock:
            events = await self.env.db.write(write)
            stepper.committed(state, events)
            await self.env.bus.publish(events)
        stepper.count_events(self.env.metrics, events)

    async def _announce(self, events: list[Any]) -> None:
        await self.env.bus.publish(events)
        stepper.count_events(self.env.metrics, events)

    async def _progress(self, node_id: str, fraction: float) -> None:
        if not self._throttle.due(node_id, fraction):
            return
        assert self.state is not None
        batch = self.state.batch()
        stepper.progress_event(batch, node_id, fraction)
        try:
            await self._commit(batch)
        except Exception:  # progress is advisory: never fail a node over it
            log.warning("could not record progress of %s/%s", self.run_id, node_id, exc_info=True)

    # -- executing one node ----------------------------------------------------------------

    async def _execute(self, state: RunState, node_id: str) -> Outcome:
        async def report(fraction: float) -> None:
            await self._progress(node_id, fraction)

        async def waiting(data: dict[str, Any]) -> None:
            batch = state.batch()
            batch.event(EventType.NODE_WAITING, utcnow(), node_id, **data)
            await self._commit(batch)

        try:
            return await self.executor.execute(NodeTask.of(state, node_id), report, waiting)
        finally:
            self._throttle.forget(node_id)
