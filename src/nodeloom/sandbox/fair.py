"""Fair shares of a process's execution slots (and sandbox memory) between accounts.

Without this, slots were handed out first come first served: an account that queued fifty
CPU-burning templates held every sandbox process, and another account's two-node run waited
behind all fifty. Here:

- an account holds at most ``per_account`` slots and ``memory_per_account`` MB at once, so
  with the default share (one slot less than there are) an account that arrives while
  another saturates the process finds a slot free at once;
- when slots are contended, the next free slot goes to the waiting account that holds the
  fewest, and among those to the one served least recently (round robin), so a newcomer is
  served before an account that already holds slots, and no waiting account is passed over
  for ever;
- within one account, requests are served in the order they were made (FIFO).

The memory of a request is booked for as long as it holds its slot. When the account whose
turn it is does not fit in the memory left, nobody overtakes it: it starts as soon as enough
is returned (otherwise a large request could wait for ever behind a stream of small ones).

``FairQueue`` is the bookkeeping alone (no I/O, no clock: a property test drives it);
``FairSlots`` puts it on the event loop, where waiting is a future and holds no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


def default_share(slots: int) -> int:
    """What one account may hold of ``slots`` unless configured: all but one, so one is
    always left for the others (all of it when there is only one)."""
    return max(1, slots - 1)


@dataclass(eq=False)
class Ticket:
    """One request for a slot (and ``memory_mb`` of memory) by ``account``."""

    account: str
    memory_mb: int
    granted: bool = False
    done: bool = False  # released, or withdrawn before it was granted


@dataclass
class _Account:
    turn: int  # when it was last served (or began to wait): lower goes first among equals
    held: int = 0
    held_mb: int = 0
    waiting: deque[Ticket] = field(default_factory=deque)


class FairQueue:
    """Slots and memory granted to accounts' tickets; see the module's docstring."""

    def __init__(
        self,
        slots: int,
        per_account: int | None = None,
        *,
        memory_mb: int | None = None,
        memory_per_account: int | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError("at least one slot is needed")
        self.slots = slots
        self.per_account = min(slots, per_account or default_share(slots))
        self.memory_mb = memory_mb
        if memory_mb is None:
            self.memory_per_account: int | None = None
        elif memory_per_account is None:
            self.memory_per_account = max(1, memory_mb * self.per_account // slots)
        else:
            self.memory_per_account = max(1, min(memory_mb, memory_per_account))
        self.used = 0
        self.used_mb = 0
        self._accounts: dict[str, _Account] = {}
        self._clock = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def ask(self, account: str, memory_mb: int = 0) -> Ticket:
        """A request, put at the end of its account's line. Call ``grants`` afterwards."""
        if self.memory_per_account is not None:
            # Booked at most up to the account's share, so that a request always fits alone.
            memory_mb = min(memory_mb, self.memory_per_account)
        ticket = Ticket(account, max(0, memory_mb))
        state = self._accounts.get(account)
        if state is None:
            state = self._accounts[account] = _Account(turn=self._tick())
        state.waiting.append(ticket)
        return ticket

    def grants(self) -> list[Ticket]:
        """Every waiting ticket that may start now, in the order they are granted."""
        granted: list[Ticket] = []
        while (ticket := self._grant_one()) is not None:
            granted.append(ticket)
        return granted

    def _grant_one(self) -> Ticket | None:
        if self.used >= self.slots:
            return None
        best: _Account | None = None
        for state in self._accounts.values():
            if not state.waiting or state.held >= self.per_account:
                continue
            head = state.waiting[0]
            if (
                self.memory_per_account is not None
                and state.held_mb + head.memory_mb > self.memory_per_account
            ):
                continue  # it waits for its own memory, not for anyone else's
            if best is None or (state.held, state.turn) < (best.held, best.turn):
                best = state
        if best is None:
            return None
        ticket = best.waiting[0]
        if self.memory_mb is not None and self.used_mb + ticket.memory_mb > self.memory_mb:
            return None  # its turn: nobody overtakes it while memory is returned
        best.waiting.popleft()
        best.held += 1
        best.held_mb += ticket.memory_mb
        best.turn = self._tick()
        self.used += 1
        self.used_mb += ticket.memory_mb
        ticket.granted = True
        return ticket

    def release(self, ticket: Ticket) -> None:
        """A ticket's slot and memory come back (a granted ticket), or it leaves its line (a
        waiting one). Idempotent. Call ``grants`` afterwards."""
        if ticket.done:
            return
        ticket.done = True
        state = self._accounts[ticket.account]
        if ticket.granted:
            state.held -= 1
            state.held_mb -= ticket.memory_mb
            self.used -= 1
            self.used_mb -= ticket.memory_mb
        else:
            state.waiting.remove(ticket)
        if not state.held and not state.waiting:
            del self._accounts[ticket.account]  # bounded: only accounts with work are kept

    def held(self, account: str) -> int:
        state = self._accounts.get(account)
        return state.held if state is not None else 0

    def waiting(self, account: str | None = None) -> int:
        if account is not None:
            state = self._accounts.get(account)
            return len(state.waiting) if state is not None else 0
        return sum(len(state.waiting) for state in self._accounts.values())


class FairSlots:
    """``FairQueue`` on the event loop: ``async with slots.hold(account, mb):``."""

    def __init__(self, queue: FairQueue) -> None:
        self.queue = queue
        self._futures: dict[Ticket, asyncio.Future[None]] = {}
        self._closed: BaseException | None = None

    @classmethod
    def of(cls, slots: int, per_account: int | None = None) -> FairSlots:
        return cls(FairQueue(slots, per_account))

    @contextlib.asynccontextmanager
    async def hold(self, account: str, memory_mb: int = 0) -> AsyncIterator[Ticket]:
        if self._closed is not None:
            raise self._closed
        ticket = self.queue.ask(account, memory_mb)
        self._wake()
        if not ticket.granted:
            future = self._futures[ticket] = asyncio.get_running_loop().create_future()
            try:
                await future
            except BaseException:
                self._futures.pop(ticket, None)
                self.queue.release(ticket)  # granted just as we left, or still waiting
                self._wake()
                raise
        try:
            yield ticket
        finally:
            self.queue.release(ticket)
            self._wake()

    def _wake(self) -> None:
        for ticket in self.queue.grants():
            future = self._futures.pop(ticket, None)
            if future is not None and not future.done():
                future.set_result(None)

    def close(self, error: BaseException) -> None:
        """Fail every waiting request with ``error``, and every later one."""
        self._closed = error
        futures, self._futures = self._futures, {}
        for future in futures.values():
            if not future.done():
                future.set_exception(error)
