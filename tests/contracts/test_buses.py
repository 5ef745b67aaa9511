"""The event-bus contract: every ``EventBus`` (MemoryBus in one process, RedisBus and
PollingBus linking processes) carries committed events to the subscribers that asked for
them, by run or by workflow, within the account, in order per run, and stops when they
unsubscribe. Across processes nothing committed is lost: a subscriber of another process
sees every event of the log, in order once duplicates are dropped (a link may deliver an
event twice; the streams drop what they have seen).

Process A is a real app whose runtime chose the bus from settings (Redis URL; two
processes on one SQLite file; PostgreSQL without Redis; one plain process). Process B is a
second bus of the same kind on its own connection to the same database (and Redis); for
MemoryBus, which links nothing, B is A's own bus. Runs are executed over HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from redis.asyncio import Redis

from nodeloom.db.engine import Database
from nodeloom.events.bus import EventBus, MemoryBus, Subscription
from nodeloom.events.links import CHANNEL, LogReader, PollingBus, encode
from nodeloom.events.model import Event
from nodeloom.events.redis_bus import RedisBus
from nodeloom.ratelimit import RateLimiter
from nodeloom.settings import Settings
from tests.conftest import User, text_graph
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run
from tests.services import RedisServer, redis_server_available

KINDS = [
    "memory",
    pytest.param("redis", marks=pytest.mark.redis),
    "polling-sqlite",
    pytest.param("polling-postgres", marks=pytest.mark.postgres),
]
SLOW = g(
    [
        n("in", "TextInput"),
        n("wait", "Delay", seconds=1),
        n("out", "TextTemplate", template="done {{ text }}"),
    ],
    [e("in", "wait"), e("wait", "out")],
)
DELIVERY_SECONDS = 15  # generous: a loaded machine, a poll interval, a reconnection


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(kind: str) -> str:
    return "postgres" if kind == "polling-postgres" else "sqlite"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """Redis of this test's own: it is stopped and started again by the catch-up test, and
    no other test's events cross this one's channel."""
    redis_server_available()
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def settings_overrides(kind: str, request: pytest.FixtureRequest) -> dict[str, object]:
    overrides: dict[str, object] = {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}
    if kind == "redis":
        overrides["redis_url"] = request.getfixturevalue("redis_server").url
    elif kind == "polling-sqlite":
        overrides["processes"] = 2  # what `serve --processes 2` gives each of its processes
    return overrides


@pytest.fixture
async def app(settings: Settings, kind: str) -> AsyncIterator[FastAPI]:
    application = create_app_for(settings, kind)
    async with application.router.lifespan_context(application):
        yield application


def create_app_for(settings: Settings, kind: str) -> FastAPI:
    from nodeloom.api.app import create_app

    application = create_app(settings)
    expected = {
        "memory": MemoryBus,
        "redis": RedisBus,
        "polling-sqlite": PollingBus,
        "polling-postgres": PollingBus,
    }[kind]
    assert type(application.state.ctx.bus) is expected  # the runtime chose it from settings
    # Limits stay in memory: the catch-up test stops Redis, and this suite is about buses.
    application.state.ctx.limiter = RateLimiter()
    return application


@dataclass
class Processes:
    a: EventBus
    b: EventBus
    db: Database  # process B's own connection to the shared database


@pytest.fixture
async def processes(app: FastAPI, settings: Settings, kind: str) -> AsyncIterator[Processes]:
    a: EventBus = app.state.ctx.bus
    if kind == "memory":
        yield Processes(a, a, app.state.ctx.db)
        return
    db = Database(settings)
    b: EventBus
    if kind == "redis":
        assert settings.redis_url is not None
        b = RedisBus(settings.redis_url, "process-b", LogReader(db))
    else:
        b = PollingBus(LogReader(db))
    await b.start()
    try:
        if isinstance(b, RedisBus):
            assert isinstance(a, RedisBus)
            await asyncio.wait_for(b.connected.wait(), 5)
            await asyncio.wait_for(a.connected.wait(), 5)
        yield Processes(a, b, db)
    finally:
        await b.stop()
        await db.dispose()


def event(seq: int, run: str = "r1", workflow: str = "w1", account: str = "a1") -> Event:
    return Event("node.started", seq, datetime.now(UTC), run, workflow, account, "n")


def drain(sub: Subscription) -> list[tuple[str, int]]:
    out = []
    while not sub.queue.empty():
        ev = sub.queue.get_nowait()
        out.append((ev.run_id, ev.seq))
    return out


async def receive(sub: Subscription, wanted: set[tuple[str, int]]) -> list[tuple[str, int]]:
    """What ``sub`` receives until it has seen every (run, seq) in ``wanted``: first
    deliveries only, in the order they came."""
    seen: list[tuple[str, int]] = []
    deadline = time.monotonic() + DELIVERY_SECONDS
    while not wanted <= set(seen):
        left = deadline - time.monotonic()
        assert left > 0, f"never delivered: {sorted(wanted - set(seen))}"
        try:
            ev = await asyncio.wait_for(sub.queue.get(), left)
        except TimeoutError:
            continue
        if (ev.run_id, ev.seq) not in seen:
            seen.append((ev.run_id, ev.seq))
    return seen


async def run_workflow(
    client: httpx.AsyncClient, owner: User, workflow: str, count: int
) -> list[str]:
    runs = []
    for _ in range(count):
        r = await execute(client, owner, workflow)
        assert r.status_code in (200, 201, 202), r.text
        runs.append(str(r.json()["run_id"]))
    for run_id in runs:
        assert (await wait_for_run(client, owner, workflow, run_id))["status"] == "completed"
    return runs


async def logged(db: Database, runs: list[str]) -> list[tuple[str, int]]:
    events = await LogReader(db).since(datetime(2000, 1, 1, tzinfo=UTC), runs, [])
    return [(e.run_id, e.seq) for e in events]


def assert_in_order_per_run(seen: list[tuple[str, int]], log: list[tuple[str, int]]) -> None:
    for run_id in {r for r, _ in log}:
        expected = [seq for r, seq in log if r == run_id]
        assert expected == list(range(1, len(expected) + 1))
        assert [seq for r, seq in seen if r == run_id] == expected, run_id


class TestSubscribing:
    async def test_by_run_and_by_workflow_within_the_account(self, processes: Processes) -> None:
        bus = processes.a
        with (
            bus.subscribe("a1") as by_run,
            bus.subscribe("a1") as by_workflow,
            bus.subscribe("a2") as stranger,
        ):
            by_run.watch_run("r1")
            by_workflow.watch_workflow("w1")
            stranger.watch_workflow("w1")  # same workflow id, other account: sees nothing
            await bus.publish([event(1), event(2, run="r2"), event(1, run="r3", workflow="w2")])
            # Delivered to this process's subscribers before publish returns.
            assert drain(by_run) == [("r1", 1)]
            assert drain(by_workflow) == [("r1", 1), ("r2", 2)]
            assert drain(stranger) == []

    async def test_events_of_a_run_arrive_in_order(self, processes: Processes) -> None:
        bus = processes.a
        with bus.subscribe("a1") as sub:
            sub.watch_run("r1")
            await bus.publish([event(1), event(2)])
            await bus.publish([event(3)])
            await bus.publish([event(4), event(5)])
            assert [seq for _, seq in drain(sub)] == [1, 2, 3, 4, 5]

    async def test_unsubscribed_keys_and_closed_subscriptions_get_nothing(
        self, processes: Processes
    ) -> None:
        bus = processes.a
        with bus.subscribe("a1") as sub:
            sub.watch_run("r1")
            sub.watch_workflow("w9")
            await bus.publish([event(1)])
            assert drain(sub) == [("r1", 1)]
            sub.unwatch_run("r1")
            await bus.publish([event(2)])
            assert drain(sub) == []
            await bus.publish([event(1, run="r9", workflow="w9")])
            assert drain(sub) == [("r9", 1)]
            sub.unwatch_workflow("w9")
        await bus.publish([event(2, run="r9", workflow="w9"), event(3)])
        assert drain(sub) == []


class TestAcrossProcesses:
    async def test_no_committed_event_is_lost(
        self, processes: Processes, client: httpx.AsyncClient, owner: User
    ) -> None:
        """Runs executed by process A: subscribers in A and in B, by workflow, each see
        every event of the log, in order per run."""
        workflow = await create_workflow(client, owner, text_graph())
        with processes.a.subscribe(owner.id) as in_a, processes.b.subscribe(owner.id) as in_b:
            in_a.watch_workflow(workflow)
            in_b.watch_workflow(workflow)
            runs = await run_workflow(client, owner, workflow, 3)
            log = await logged(processes.db, runs)
            assert len(log) >= 3 * 4
            assert_in_order_per_run(await receive(in_a, set(log)), log)
            assert_in_order_per_run(await receive(in_b, set(log)), log)

    async def test_each_event_reaches_a_subscriber_once(
        self, processes: Processes, client: httpx.AsyncClient, owner: User
    ) -> None:
        """A bus that reads the log to catch up (every poll; after Redis came back) reads
        further back than its last look: what it delivered already is not queued again.
        Repeats filled subscribers' bounded queues, and an overflowing WebSocket is closed
        however fast its client reads."""
        workflow = await create_workflow(client, owner, text_graph())
        with processes.b.subscribe(owner.id) as in_b:
            in_b.watch_workflow(workflow)
            runs = await run_workflow(client, owner, workflow, 4)
            log = await logged(processes.db, runs)
            await receive(in_b, set(log))
            if isinstance(processes.b, RedisBus):
                await processes.b.catch_up(datetime.now(UTC))  # as after a reconnection
            await asyncio.sleep(1.0)  # several polls, each reading 2 s back
            rest = drain(in_b)
            assert rest == [], f"{len(rest)} events delivered again"

    async def test_a_subscriber_by_run_gets_the_rest_of_that_run_only(
        self, processes: Processes, client: httpx.AsyncClient, owner: User
    ) -> None:
        """B follows one of two runs A is driving: from the moment it subscribes it gets
        that run's events to the end (the earlier ones are the stream's replay, not the
        bus's), in order, and nothing of the other run."""
        workflow = await create_workflow(client, owner, SLOW)
        with processes.b.subscribe(owner.id) as in_b:
            followed, other = [
                str((await execute(client, owner, workflow)).json()["run_id"]) for _ in range(2)
            ]
            in_b.watch_run(followed)
            for run_id in (followed, other):
                assert (await wait_for_run(client, owner, workflow, run_id))["status"] == (
                    "completed"
                )
            log = [key for key in await logged(processes.db, [followed]) if key[0] == followed]
            final = log[-1]
            seen = await receive(in_b, {final})
            await asyncio.sleep(0.6)  # more than a poll: nothing of the other run comes
            seen += [key for key in drain(in_b) if key not in seen]
            assert seen and all(r == followed for r, _ in seen)
            assert seen == log[len(log) - len(seen) :]  # a suffix of the log, in order


@pytest.mark.parametrize("kind", [pytest.param("redis", marks=pytest.mark.redis)])
async def test_redis_bus_catches_up_from_the_log_after_losing_redis(
    processes: Processes,
    redis_server: RedisServer,
    client: httpx.AsyncClient,
    owner: User,
) -> None:
    """Redis keeps nothing: events committed while B's link was down reach B from the log
    once Redis is back."""
    b = processes.b
    assert isinstance(b, RedisBus)
    workflow = await create_workflow(client, owner, text_graph())
    with b.subscribe(owner.id) as in_b:
        in_b.watch_workflow(workflow)
        redis_server.stop()
        deadline = time.monotonic() + 5
        while b.connected.is_set():
            assert time.monotonic() < deadline, "the bus never noticed Redis was gone"
            await asyncio.sleep(0.02)
        runs = await run_workflow(client, owner, workflow, 2)  # A cannot announce them
        log = await logged(processes.db, runs)
        await asyncio.sleep(0.3)
        assert drain(in_b) == []
        redis_server.start()  # same port
        assert_in_order_per_run(await receive(in_b, set(log)), log)


class _LogDownOnce:
    """A log reader whose first read fails as an unreachable database does."""

    def __init__(self) -> None:
        self.reads = 0

    async def since(self, when: datetime, runs: list[str], workflows: list[str]) -> list[Event]:
        self.reads += 1
        if self.reads == 1:
            raise sa.exc.OperationalError("SELECT", {}, Exception("the database is down"))
        return []


@pytest.mark.redis
async def test_a_catch_up_that_cannot_read_the_log_is_retried(redis_server: RedisServer) -> None:
    """Redis and the database lost together: the catch-up after Redis came back fails, and
    the bus still follows the channel (it used to stop listening for good)."""
    reader = _LogDownOnce()
    bus = RedisBus(redis_server.url, "process-b", cast(LogReader, reader))
    await bus.start()
    try:
        await asyncio.wait_for(bus.connected.wait(), 5)
        with bus.subscribe("a1") as sub:
            sub.watch_run("r1")
            redis_server.stop()
            deadline = time.monotonic() + 10
            while bus.connected.is_set():
                assert time.monotonic() < deadline, "the bus never noticed Redis was gone"
                await asyncio.sleep(0.02)
            redis_server.start()
            while reader.reads < 2 or not bus.connected.is_set():
                assert time.monotonic() < deadline + 10, f"caught up {reader.reads} time(s)"
                await asyncio.sleep(0.02)
            publisher = Redis(port=redis_server.port)
            try:
                await publisher.publish(CHANNEL, encode("process-a", [event(1)]))
            finally:
                await publisher.aclose()
            got = await asyncio.wait_for(sub.queue.get(), 5)
            assert (got.run_id, got.seq) == ("r1", 1)
    finally:
        await bus.stop()
