"""Run callbacks: when a run that was given a ``callback_url`` ends, its record is POSTed
there, signed as the Standard Webhooks specification says, and retried with back-off.

Durability. The delivery row is written in the transaction that accepts the run
(engine/transitions.py), ``pending`` with its first attempt due at once; it becomes
deliverable when its run is no longer running, whichever way the run ended (its driver,
a cancel, recovery after a crash). So no run end can slip past unnoticed, and a restart
loses nothing: the row is still there.

One sender per attempt. Every process (``serve``, ``serve --no-worker``, ``worker``) runs a
``CallbackSender``; each looks for due deliveries and claims one with a conditional UPDATE
(``claimed_until`` is empty or past). Only the process whose UPDATE changed the row sends
it. A process that dies mid-attempt leaves the claim to expire; the attempt is then made
again (a receiver must treat ``webhook-id`` as an idempotency key, as the specification
says).

Signing. ``webhook-id`` (the run id: the same on every attempt), ``webhook-timestamp``
(Unix seconds of the attempt) and ``webhook-signature``: ``v1,`` + base64 of
HMAC-SHA256 over ``{id}.{timestamp}.{body}`` keyed by the base64-decoded part of the
account's ``whsec_`` secret.

Back-off. After a failed attempt (no 2xx, a refused address, a timeout) the next waits
``settings.callback_retry_delays[n]``; after the last delay is used up the delivery is
``failed``. Every attempt is logged with its status code and the start of the answer.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import logging
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
from sqlalchemy.engine import Connection

from nodeloom import background
from nodeloom.auth.tokens import decrypt
from nodeloom.db.engine import Database
from nodeloom.db.models import utcnow
from nodeloom.errors import FieldError, InvalidRequest
from nodeloom.nodes import http
from nodeloom.schemas.records import run_record
from nodeloom.sdk._node import NodeFailure
from nodeloom.settings import Settings
from nodeloom.states import RunStatus
from nodeloom.store import callbacks as store
from nodeloom.store import runs as run_store

log = logging.getLogger("nodeloom.callbacks")

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
SECRET_BYTES = 32
RESPONSE_KEPT = 1000  # characters of an answer kept in the delivery log
CLAIM = timedelta(minutes=2)
BATCH = 20
MAX_URL = 2048


def new_secret() -> str:
    """A signing secret in the Standard Webhooks format: ``whsec_`` + base64 of 32 bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value for one message."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(
    secret: str, msg_id: str, body: bytes, now: float | None = None
) -> dict[str, str]:
    timestamp = int(time.time() if now is None else now)
    return {
        "content-type": "application/json",
        "user-agent": "Nodeloom-Callbacks",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, msg_id, timestamp, body),
    }


async def check_url(settings: Settings, url: str | None, pointer: str) -> None:
    """400 with ``pointer`` unless ``url`` is an http(s) URL whose host resolves to public
    addresses only (or ones NODELOOM_HTTP_ALLOWLIST names). Checked again on every attempt:
    a name may resolve elsewhere later."""
    if url is None:
        return
    try:
        parsed = httpx.URL(url)
        if len(url) > MAX_URL:
            raise ValueError(f"longer than {MAX_URL} characters")
        async with asyncio.timeout(settings.callback_timeout_seconds):  # a slow resolver
            await http.checked_addresses(parsed, http.Allowlist.from_settings(settings))
    except TimeoutError as exc:
        message = "callback_url cannot be used: its host name did not resolve in time"
        raise InvalidRequest(message, errors=[FieldError(pointer, message)]) from exc
    except (httpx.InvalidURL, ValueError, NodeFailure) as exc:
        message = f"callback_url cannot be used: {exc}"
        raise InvalidRequest(message, errors=[FieldError(pointer, message)]) from exc


def require_secret(conn: Connection, account_id: str, pointer: str) -> None:
    """400 unless the account has a signing secret: callbacks are always signed, and a
    secret made behind the user's back could never be shown to them."""
    if not store.has_secret(conn, account_id):
        message = (
            "create the account's callback signing secret first "
            "(POST /api/v1/callbacks/secret): callbacks are always signed"
        )
        raise InvalidRequest(message, errors=[FieldError(pointer, message)])


def envelope(run: dict[str, Any]) -> bytes:
    """The body: the Standard Webhooks envelope around the run record."""
    return orjson.dumps(
        {
            "type": f"run.{run['status']}",
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "data": run,
        }
    )


class CallbackSender:
    """The background loop of one process: claim due deliveries, send them, record."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="callbacks")

    async def stop(self) -> None:
        await background.cancel_and_wait(self._task, *self._sending)

    async def _forever(self) -> None:
        seconds = self.settings.callback_poll_seconds
        await background.every(seconds, self.tick, log, "callback pass failed; trying again")

    async def tick(self) -> int:
        """Claim what is due now and start sending it; how many were claimed."""
        now = utcnow()
        due = await self.db.read(lambda c: store.due(c, now, BATCH))
        claimed = 0
        for delivery_id in due:
            if delivery_id in {t.get_name() for t in self._sending}:
                continue
            claim = functools.partial(
                store.claim, delivery_id=delivery_id, now=now, until=now + CLAIM
            )
            won = await self.db.write(claim)
            if not won:
                continue  # another process took it
            claimed += 1
            task = asyncio.create_task(self._send(delivery_id), name=delivery_id)
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        return claimed

    async def _send(self, delivery_id: str) -> None:
        try:
            await self.send(delivery_id)
        except Exception:
            log.warning("callback %s: sending failed", delivery_id, exc_info=True)

    async def send(self, delivery_id: str) -> None:
        """One attempt of a claimed delivery, recorded with what came of it."""
        found = await self.db.read(lambda c: store.for_sending(c, delivery_id))
        if found is None:  # the run is gone (retention) or the account: nothing to report
            await self.db.write(lambda c: store.give_up(c, delivery_id, utcnow()))
            return
        delivery, run_row, node_rows, secret_encrypted = found
        retries: list[str] = []
        if run_row.status in (RunStatus.FAILED, RunStatus.CANCELLED):  # only those are retried
            retries = await self.db.read(lambda c: run_store.retries(c, run_row.id))
        run = run_record(run_row, node_rows, retries)
        secret = decrypt(self.settings.secret, secret_encrypted or "")
        started = time.monotonic()
        status_code: int | None = None
        response: str | None = None
        error: str | None = None
        if secret is None:
            error = "the account has no callback signing secret"
        else:
            body = envelope(run)
            headers = signed_headers(secret, delivery.id, body)
            try:
                async with asyncio.timeout(self.settings.callback_timeout_seconds):
                    fetched = await http.fetch(
                        self.settings, "POST", delivery.url, headers, body.decode()
                    )
                status_code, response = fetched.status, fetched.body[:RESPONSE_KEPT]
            except TimeoutError:
                error = f"no answer within {self.settings.callback_timeout_seconds:g} s"
            except NodeFailure as exc:
                error = str(exc)
        ok = status_code is not None and 200 <= status_code < 300
        attempt = delivery.attempts + 1
        delays = self.settings.callback_retry_delays
        now = utcnow()
        next_at = (
            None if ok or attempt > len(delays) else now + timedelta(seconds=delays[attempt - 1])
        )
        elapsed = int((time.monotonic() - started) * 1000)
        await self.db.write(
            lambda c: store.record_attempt(
                c,
                delivery_id,
                attempt=attempt,
                at=now,
                duration_ms=elapsed,
                status_code=status_code,
                response=response,
                error=error,
                delivered=ok,
                next_attempt_at=next_at,
            )
        )
        if not ok:
            log.info(
                "callback %s attempt %d failed (%s)%s",
                delivery_id,
                attempt,
                status_code or error,
                "" if next_at else "; giving up",
            )
