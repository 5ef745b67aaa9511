"""The fair sharing of slots and memory between accounts (``sandbox/fair.py``): who is served
next, what an account may hold, and that waiting on the event loop leaks nothing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeloom.sandbox.fair import FairQueue, FairSlots, Ticket, default_share

ACCOUNTS = ["a", "b", "c", "d"]


class TestDefaults:
    def test_one_slot_is_left_for_others(self) -> None:
        assert [default_share(n) for n in (1, 2, 3, 16)] == [1, 1, 2, 15]

    def test_memory_share_follows_the_slot_share(self) -> None:
        queue = FairQueue(16, memory_mb=6144)
        assert queue.per_account == 15
        assert queue.memory_per_account == 6144 * 15 // 16

    def test_a_configured_share_is_kept_within_the_whole(self) -> None:
        queue = FairQueue(4, 9, memory_mb=1000, memory_per_account=5000)
        assert (queue.per_account, queue.memory_per_account) == (4, 1000)


class TestTheAttack:
    def test_a_flooding_account_leaves_a_slot_that_a_newcomer_gets_at_once(self) -> None:
        queue = FairQueue(2)
        flood = [queue.ask("attacker") for _ in range(30)]
        assert queue.grants() == flood[:1]
        victim = queue.ask("victim")
        assert queue.grants() == [victim]

    def test_a_freed_slot_goes_to_the_account_holding_the_fewest(self) -> None:
        queue = FairQueue(3, 3)
        flood = [queue.ask("attacker") for _ in range(30)]
        assert queue.grants() == flood[:3]
        first, second = queue.ask("victim"), queue.ask("victim")
        assert queue.grants() == []
        queue.release(flood[0])
        assert queue.grants() == [first]
        # Both hold one now: turns alternate, the one served least recently first.
        queue.release(flood[1])
        assert queue.grants() == [flood[3]]
        queue.release(flood[2])
        assert queue.grants() == [second]
        queue.release(flood[3])
        assert queue.grants() == [flood[4]]

    def test_the_account_whose_turn_it_is_is_not_overtaken_for_memory(self) -> None:
        queue = FairQueue(4, 4, memory_mb=1000)
        big_holder = queue.ask("a", 600)
        assert queue.grants() == [big_holder]
        large = queue.ask("b", 600)
        small = queue.ask("c", 100)
        # b asked first and holds as few as c: its turn, though only c would fit.
        assert queue.grants() == []
        queue.release(big_holder)
        assert queue.grants() == [large, small]

    def test_an_account_at_its_memory_share_waits_without_blocking_others(self) -> None:
        queue = FairQueue(4, 4, memory_mb=1000, memory_per_account=500)
        held = queue.ask("a", 400)
        assert queue.grants() == [held]
        more = queue.ask("a", 200)
        other = queue.ask("b", 300)
        assert queue.grants() == [other]
        queue.release(held)
        assert queue.grants() == [more]

    def test_a_request_larger_than_a_share_is_booked_at_the_share_and_runs_alone(self) -> None:
        queue = FairQueue(2, memory_mb=1000)
        ticket = queue.ask("a", 5000)
        assert ticket.memory_mb == 500
        assert queue.grants() == [ticket]


# -- properties ---------------------------------------------------------------------------

ask = st.tuples(st.just("ask"), st.sampled_from(ACCOUNTS), st.integers(0, 700))
release = st.tuples(st.just("release"), st.integers(0, 1000), st.just(0))
withdraw = st.tuples(st.just("withdraw"), st.integers(0, 1000), st.just(0))
operations = st.lists(st.one_of(ask, ask, release, withdraw), max_size=120)


@dataclass
class Model:
    """What the test itself saw: tickets asked, granted and given back, by account."""

    queue: FairQueue
    asked: dict[str, list[Ticket]] = field(default_factory=dict)
    granted: list[Ticket] = field(default_factory=list)
    holding: list[Ticket] = field(default_factory=list)
    waiting: list[Ticket] = field(default_factory=list)

    def held(self, account: str) -> list[Ticket]:
        return [t for t in self.holding if t.account == account]

    def head(self, account: str) -> Ticket | None:
        return next((t for t in self.waiting if t.account == account), None)

    def eligible(self, account: str) -> bool:
        """It waits, and its next request fits its own share of slots and memory."""
        head = self.head(account)
        if head is None or len(self.held(account)) >= self.queue.per_account:
            return False
        share = self.queue.memory_per_account
        return share is None or sum(t.memory_mb for t in self.held(account)) + head.memory_mb <= (
            share
        )

    def apply(self, op: str, arg: str | int, mb: int) -> None:
        if op == "ask":
            assert isinstance(arg, str)
            ticket = self.queue.ask(arg, mb)
            self.asked.setdefault(arg, []).append(ticket)
            self.waiting.append(ticket)
        elif op == "release" and self.holding:
            assert isinstance(arg, int)
            self.queue.release(self.holding.pop(arg % len(self.holding)))
        elif op == "withdraw" and self.waiting:
            assert isinstance(arg, int)
            self.queue.release(self.waiting.pop(arg % len(self.waiting)))
        for ticket in self.queue.grants():
            self.check_grant(ticket)
            self.waiting.remove(ticket)
            self.holding.append(ticket)
            self.granted.append(ticket)
        self.check_state()

    def check_grant(self, ticket: Ticket) -> None:
        account = ticket.account
        assert ticket is self.head(account), "an account's requests are served in order"
        assert self.eligible(account)
        mine = len(self.held(account))
        for other in ACCOUNTS:
            if other != account and self.eligible(other):
                assert mine <= len(self.held(other)), "a slot went to an account holding more"

    def check_state(self) -> None:
        queue = self.queue
        assert len(self.holding) == queue.used <= queue.slots
        used_mb = sum(t.memory_mb for t in self.holding)
        assert used_mb == queue.used_mb
        if queue.memory_mb is not None:
            assert used_mb <= queue.memory_mb
        for account in ACCOUNTS:
            held = self.held(account)
            assert len(held) <= queue.per_account
            if queue.memory_per_account is not None:
                assert sum(t.memory_mb for t in held) <= queue.memory_per_account
            assert queue.held(account) == len(held)
            assert queue.waiting(account) == sum(t.account == account for t in self.waiting)
        # Work-conserving: a slot stays free only while no waiting account may take it, or
        # one whose turn it is waits for memory to come back.
        if queue.used < queue.slots:
            eligible = [a for a in ACCOUNTS if self.eligible(a)]
            if queue.memory_mb is None:
                assert not eligible
            else:
                heads = [self.head(a) for a in eligible]
                assert all(h is not None for h in heads)
                assert not eligible or any(
                    h is not None and used_mb + h.memory_mb > queue.memory_mb for h in heads
                )


class TestProperties:
    @settings(max_examples=300, deadline=None)
    @given(
        slots=st.integers(1, 5),
        share=st.one_of(st.none(), st.integers(1, 6)),
        memory=st.one_of(st.none(), st.integers(200, 2000)),
        memory_share=st.one_of(st.none(), st.integers(64, 2000)),
        ops=operations,
    )
    def test_bounds_order_and_least_held_first(
        self,
        slots: int,
        share: int | None,
        memory: int | None,
        memory_share: int | None,
        ops: list[tuple[str, str | int, int]],
    ) -> None:
        model = Model(FairQueue(slots, share, memory_mb=memory, memory_per_account=memory_share))
        for op in ops:
            model.apply(*op)
        # Whatever was asked, every request that was not withdrawn is served once all are
        # given back: nobody waits for ever.
        while model.holding:
            model.apply("release", 0, 0)
        assert not model.waiting
        assert model.queue.used == model.queue.used_mb == 0

    @settings(max_examples=300, deadline=None)
    @given(steps=st.lists(st.one_of(st.sampled_from(ACCOUNTS), st.just("serve")), max_size=60))
    def test_one_slot_is_served_round_robin(self, steps: list[str]) -> None:
        """From the moment an account waits until it is served, no other account is served
        twice."""
        queue = FairQueue(1)
        served_since: dict[str, list[str]] = {}  # waiting account -> accounts served since

        def serve() -> None:
            for ticket in queue.grants():
                account = ticket.account
                served_since.pop(account, None)
                for waiting, served in served_since.items():
                    assert account not in served, (waiting, served, account)
                    served.append(account)
                queue.release(ticket)
                if queue.waiting(account):
                    served_since[account] = []  # it waits again, from now

        for step in steps:
            if step == "serve":
                serve()
            else:
                queue.ask(step)
                served_since.setdefault(step, [])
        while queue.waiting():
            serve()
        assert queue.used == 0


# -- on the event loop ----------------------------------------------------------------------


class TestFairSlots:
    async def test_waiting_holds_no_slot_and_a_cancelled_waiter_leaves_the_line(self) -> None:
        slots = FairSlots.of(1)
        entered = asyncio.Event()
        leave = asyncio.Event()

        async def hold(account: str) -> None:
            async with slots.hold(account):
                entered.set()
                await leave.wait()

        holder = asyncio.create_task(hold("a"))
        await entered.wait()
        waiter = asyncio.create_task(hold("b"))
        await asyncio.sleep(0)
        assert slots.queue.waiting("b") == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert slots.queue.waiting() == 0
        leave.set()
        await holder
        assert slots.queue.used == 0

    async def test_a_waiter_cancelled_just_after_its_grant_gives_the_slot_back(self) -> None:
        slots = FairSlots.of(1)
        first = slots.hold("a")
        await first.__aenter__()
        waiter = asyncio.create_task(slots.hold("b").__aenter__())
        await asyncio.sleep(0)
        await first.__aexit__(None, None, None)  # grants b's request...
        waiter.cancel()  # ...which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert slots.queue.used == 0
        assert slots.queue.held("b") == 0

    async def test_closing_fails_the_waiters_and_later_requests(self) -> None:
        slots = FairSlots.of(1)
        first = slots.hold("a")
        await first.__aenter__()
        waiter = asyncio.create_task(slots.hold("b").__aenter__())
        await asyncio.sleep(0)
        slots.close(RuntimeError("stopping"))
        with pytest.raises(RuntimeError, match="stopping"):
            await waiter
        with pytest.raises(RuntimeError, match="stopping"):
            await slots.hold("c").__aenter__()
        await first.__aexit__(None, None, None)
        assert slots.queue.used == 0
        assert slots.queue.waiting() == 0

    async def test_a_newcomer_starts_while_a_flooding_account_waits(self) -> None:
        slots = FairSlots.of(2)
        started: list[str] = []
        release = asyncio.Event()

        async def node(account: str) -> None:
            async with slots.hold(account):
                started.append(account)
                await release.wait()

        flood = [asyncio.create_task(node("attacker")) for _ in range(10)]
        await asyncio.sleep(0)
        victim = asyncio.create_task(node("victim"))
        await asyncio.sleep(0)
        assert started == ["attacker", "victim"]
        release.set()
        await asyncio.gather(victim, *flood)
        assert slots.queue.used == 0
