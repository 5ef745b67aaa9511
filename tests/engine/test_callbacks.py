"""Run callbacks at the engine (engine/callbacks.py, store/callbacks.py), on SQLite and
PostgreSQL, with no app around: a run given a ``callback_url`` is written and ended by the
queue's step functions, then ``CallbackSender``s of the test's own deliver it to a real
HTTP receiver on 127.0.0.1. Pinned: a delivery is claimed by exactly one of any number of
claimants, a claim left to expire is taken again, failed attempts back off by the
configured delays and then give up, and the signature is the Standard Webhooks one."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

import orjson
import pytest
import sqlalchemy as sa

from nodeloom.auth.tokens import encrypt
from nodeloom.db.engine import Database
from nodeloom.db.models import CallbackAttempt, CallbackDelivery, utcnow
from nodeloom.engine import steps
from nodeloom.engine.callbacks import CallbackSender, new_secret, signature
from nodeloom.engine.graph_checks import validate_graph
from nodeloom.engine.new_run import new_run, write_run
from nodeloom.engine.run_request import RunRequest, WorkflowVersion
from nodeloom.engine.stepper import RunGraphs
from nodeloom.nodes.registry import build_registry
from nodeloom.settings import Settings
from nodeloom.store import Record, accounts, workflows
from nodeloom.store import callbacks as store
from tests.engine.test_steps import done, job
from tests.fakes import FakeServer, serve
from tests.runs_helpers import g, n

DELIVERIES = cast(sa.Table, CallbackDelivery.__table__)
ATTEMPTS = cast(sa.Table, CallbackAttempt.__table__)
GRAPH = g([n("a", "TextInput", text="go")], [])
DELAYS = [0.3, 0.6]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {
        "http_allowlist": ["127.0.0.1"],
        "callback_poll_seconds": 0.02,
        "callback_retry_delays": DELAYS,
    }


@dataclass
class Receiver:
    """Answers each POST with the next scripted status (then 200), recording it."""

    script: list[int] = field(default_factory=list)
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: FakeServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url + "/hook"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            with state.lock:
                state.requests.append((dict(self.headers.items()), body))
                status = state.script.pop(0) if state.script else 200
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    state.server = serve(Handler)
    try:
        yield state
    finally:
        state.server.stop()


@dataclass
class Callbacks:
    db: Database
    settings: Settings
    account_id: str
    secret: str

    async def ended_run(self, url: str) -> str:
        """A run with ``url`` as its callback, accepted for queue workers and ended by a
        job's claim and finish steps: the delivery its acceptance wrote is now due."""
        registry = build_registry()
        graph = validate_graph(GRAPH, registry, self.settings)
        assert not isinstance(graph, list), graph
        row = await self.db.write(
            lambda c: workflows.create(c, account_id=self.account_id, name="wf", graph_json=GRAPH)
        )
        request = RunRequest(self.account_id, row.id, None, False, "business", callback_url=url)
        state, batch = new_run(request, WorkflowVersion(row.id, row.updated_at, graph))
        answer = {"run_id": state.run_id}
        await self.db.write(lambda c: write_run(c, request, state, batch, answer))
        graphs = RunGraphs(registry, self.settings)
        run_id = state.run_id
        await self.db.write(lambda c: steps.claim(c, run_id, "a", job(1), graphs))
        await self.db.write(lambda c: steps.finish(c, run_id, "a", job(1), done("a", 0), graphs))
        return run_id

    async def delivery(self, run_id: str) -> Record:
        query = sa.select(DELIVERIES).where(DELIVERIES.c.run_id == run_id)
        return await self.db.read(lambda c: c.execute(query).one())

    async def attempts(self, delivery_id: str) -> list[Record]:
        query = (
            sa.select(ATTEMPTS)
            .where(ATTEMPTS.c.delivery_id == delivery_id)
            .order_by(ATTEMPTS.c.attempt)
        )
        return list(await self.db.read(lambda c: c.execute(query).all()))

    async def sent(self, run_id: str) -> Record:
        """The delivery once a running sender of the test's own settled it."""
        sender = CallbackSender(self.settings, self.db)
        await sender.start()
        try:
            return await self.settled(run_id)
        finally:
            await sender.stop()

    async def settled(self, run_id: str, timeout: float = 20.0) -> Record:
        """The delivery once it is no longer pending."""
        deadline = time.monotonic() + timeout
        while True:
            delivery = await self.delivery(run_id)
            if delivery.state != store.PENDING:
                return delivery
            assert time.monotonic() < deadline, f"still pending: {delivery}"
            await asyncio.sleep(0.02)


@pytest.fixture
async def callbacks(settings: Settings) -> AsyncIterator[Callbacks]:
    db = Database(settings)
    secret = new_secret()
    try:
        account = await db.write(
            lambda c: accounts.create(
                c, email="cb@example.com", password_hash="-", plan="business", credits=100
            )
        )
        sealed = encrypt(settings.secret, secret)
        await db.write(lambda c: store.set_secret(c, account.id, sealed, utcnow()))
        yield Callbacks(db, settings, account.id, secret)
    finally:
        await db.dispose()


class TestClaim:
    async def test_a_delivery_is_claimed_by_exactly_one_of_many_claimants(
        self, callbacks: Callbacks, settings: Settings
    ) -> None:
        run_id = await callbacks.ended_run("http://127.0.0.1:9/never-sent")
        delivery = await callbacks.delivery(run_id)
        now = utcnow()
        assert await callbacks.db.read(lambda c: store.due(c, now, 10)) == [delivery.id]
        other = Database(settings)  # another process's connections
        try:

            def claim(c: Any) -> bool:
                return store.claim(c, delivery.id, now, now + timedelta(minutes=2))

            won = await asyncio.gather(*(db.write(claim) for db in [callbacks.db, other] * 4))
        finally:
            await other.dispose()
        assert sorted(won) == [False] * 7 + [True]
        # Claimed, it is due for nobody else ...
        assert await callbacks.db.read(lambda c: store.due(c, now, 10)) == []
        # ... until the claim expires (its process died mid-attempt): then it is taken again.
        later = now + timedelta(minutes=3)
        assert await callbacks.db.read(lambda c: store.due(c, later, 10)) == [delivery.id]
        retaken = await callbacks.db.write(
            lambda c: store.claim(c, delivery.id, later, later + timedelta(minutes=2))
        )
        assert retaken

    async def test_two_senders_polling_at_once_send_it_once(
        self, callbacks: Callbacks, receiver: Receiver, settings: Settings
    ) -> None:
        run_id = await callbacks.ended_run(receiver.url)
        first, second = (
            CallbackSender(settings, callbacks.db),
            CallbackSender(settings, callbacks.db),
        )
        try:
            claimed = await asyncio.gather(first.tick(), second.tick())
            assert sorted(claimed) == [0, 1]
            delivery = await callbacks.settled(run_id)
            assert delivery.state == store.DELIVERED and delivery.attempts == 1
            assert len(receiver.requests) == 1
            # Delivered: neither sender finds anything to claim any more.
            assert list(await asyncio.gather(first.tick(), second.tick())) == [0, 0]
        finally:
            await first.stop()
            await second.stop()
        assert len(await callbacks.attempts(delivery.id)) == 1


class TestBackOff:
    async def test_failed_attempts_wait_the_delays_then_give_up(
        self, callbacks: Callbacks, receiver: Receiver, settings: Settings
    ) -> None:
        receiver.script = [500] * (len(DELAYS) + 1)
        run_id = await callbacks.ended_run(receiver.url)
        delivery = await callbacks.sent(run_id)
        assert delivery.state == store.FAILED
        attempts = await callbacks.attempts(delivery.id)
        assert [a.status_code for a in attempts] == [500, 500, 500]
        assert delivery.attempts == 3 and len(receiver.requests) == 3
        for delay, (before, after) in zip(DELAYS, itertools.pairwise(attempts), strict=True):
            waited = (after.at - before.at).total_seconds()
            assert waited >= delay, (delay, waited)

    async def test_a_failed_attempt_is_due_again_after_the_first_delay(
        self, callbacks: Callbacks, receiver: Receiver, settings: Settings
    ) -> None:
        receiver.script = [503]
        run_id = await callbacks.ended_run(receiver.url)
        sender = CallbackSender(settings, callbacks.db)
        try:
            await self.first_attempt(callbacks, sender, run_id)
        finally:
            await sender.stop()

    async def first_attempt(
        self, callbacks: Callbacks, sender: CallbackSender, run_id: str
    ) -> None:
        assert await sender.tick() == 1

        def retried(delivery: Record) -> bool:
            return bool(delivery.attempts == 1)

        deadline = time.monotonic() + 20
        while not retried(delivery := await callbacks.delivery(run_id)):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        [attempt] = await callbacks.attempts(delivery.id)
        assert delivery.state == store.PENDING and delivery.claimed_until is None
        assert delivery.next_attempt_at - attempt.at == timedelta(seconds=DELAYS[0])
        # Not due before then; due after.
        before = attempt.at + timedelta(seconds=DELAYS[0] / 2)
        after = attempt.at + timedelta(seconds=DELAYS[0])
        assert await callbacks.db.read(lambda c: store.due(c, before, 10)) == []
        assert await callbacks.db.read(lambda c: store.due(c, after, 10)) == [delivery.id]


class TestSignature:
    def test_the_standard_webhooks_example_signs_as_published(self) -> None:
        # The worked example of the Standard Webhooks specification's reference libraries.
        secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        body = b'{"test": 2432232314}'
        expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        assert signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == expected

    async def test_every_attempt_is_signed_with_the_accounts_secret_and_one_id(
        self, callbacks: Callbacks, receiver: Receiver, settings: Settings
    ) -> None:
        receiver.script = [500]
        run_id = await callbacks.ended_run(receiver.url)
        delivery = await callbacks.sent(run_id)
        assert delivery.state == store.DELIVERED
        key = base64.b64decode(callbacks.secret.removeprefix("whsec_"))
        ids = set()
        for headers, body in receiver.requests:
            lower = {k.lower(): v for k, v in headers.items()}
            msg_id, stamp = lower["webhook-id"], lower["webhook-timestamp"]
            signed = f"{msg_id}.{stamp}.".encode() + body
            mac = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
            assert lower["webhook-signature"] == "v1," + mac
            assert abs(time.time() - int(stamp)) < 300
            payload = orjson.loads(body)
            assert payload["type"] == "run.completed" and payload["data"]["id"] == run_id
            ids.add(msg_id)
        assert len(receiver.requests) == 2 and ids == {delivery.id}
