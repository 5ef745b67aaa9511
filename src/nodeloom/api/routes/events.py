"""Real-time run events: WebSocket ``/ws`` and Server-Sent Events per run.

Both endpoints use ``events.stream`` for replay-then-live (subscribe to the bus, then read the
log, then deliver live events past what was replayed), so a client sees seq 1..N of a run in
order with no gaps and no duplicates, however its subscription races the run.

Why a WebSocket with bad credentials is *accepted* and then closed with 4401: closing before
``accept()`` makes the server answer the HTTP upgrade with 403, and a browser's WebSocket API
reports every failed handshake the same way (an ``error`` event and close code 1006), so a
client could not tell "bad token, stop retrying" from "network down, retry". After accept, the
close code 4401 reaches ``CloseEvent.code``. Nothing is sent on the socket before the close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Header, Query, Request, WebSocket
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials
from sqlalchemy.engine import Connection as SyncConnection
from starlette.websockets import WebSocketDisconnect

from nodeloom.api.deps import CtxDep, bearer, count_request, get_principal
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.auth.authenticate import authenticate
from nodeloom.auth.principal import Principal
from nodeloom.errors import InvalidRequest, NotFound, Unauthorized
from nodeloom.events import protocol
from nodeloom.events.bus import Subscription
from nodeloom.events.model import Event
from nodeloom.events.stream import RunCursors
from nodeloom.states import RunStatus
from nodeloom.store import runs as run_store
from nodeloom.store import workflows as workflow_store

router = APIRouter(route_class=GuardedRoute, tags=["events"])
log = logging.getLogger("nodeloom.events")

HEARTBEAT_SECONDS = 20.0  # a {"type": "ping"} after this long without sending anything
SSE_KEEPALIVE_SECONDS = 15.0  # a ": keep-alive" comment line after this long
CLOSE_TIMEOUT_SECONDS = 5.0  # a consumer too slow to take even the close frame is cut off
REVALIDATE_SECONDS = 60.0  # an open WebSocket's credential is checked again this often
MAX_SUBSCRIPTIONS = 1000  # runs plus workflows per connection

MAX_SEQ = 2**31 - 1  # event seqs are 32-bit INTEGER columns; a larger resume point is refused

CLOSE_UNAUTHORIZED = 4401
CLOSE_TOO_SLOW = 4408
CLOSE_RATE_LIMITED = 4429


# -- WebSocket -------------------------------------------------------------------------------


def _ws_credential(websocket: WebSocket) -> str | None:
    scheme, _, value = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return websocket.query_params.get("token") or None


@router.websocket("/ws", name="events_websocket")
async def events_websocket(websocket: WebSocket) -> None:
    """Run events over a WebSocket; see docs/events.md for the protocol."""
    ctx: AppContext = websocket.app.state.ctx
    credential = _ws_credential(websocket)
    try:
        principal: Principal | None = await authenticate(
            ctx.db, ctx.settings.secret, ctx.key_usage, credential
        )
    except Unauthorized:
        principal = None
    await websocket.accept()
    if principal is None:
        await websocket.close(CLOSE_UNAUTHORIZED, "unauthorized: send a valid API key or JWT")
        return
    if not (await count_request(ctx, principal))[0].allowed:
        await websocket.close(CLOSE_RATE_LIMITED, "rate_limited: retry later")
        return
    with (
        ctx.bus.subscribe(principal.account_id) as sub,
        ctx.revocations.watch(principal) as revoked,
    ):
        await _Connection(websocket, ctx, principal, sub).serve(revoked, credential)


class _Connection:
    """One WebSocket: a reader task (client messages) and a pump task (bus -> socket).

    Both send under one lock, so a replay (in the reader) and live events of the same run (in
    the pump) cannot interleave: the pump waits, and afterwards ``admit`` drops what the replay
    already delivered. The pump may block on a slow socket; the bus never waits for it.
    """

    def __init__(
        self, websocket: WebSocket, ctx: AppContext, principal: Principal, sub: Subscription
    ) -> None:
        self.ws = websocket
        self.ctx = ctx
        self.account_id = principal.account_id
        self.sub = sub
        self.cursors = RunCursors(ctx.db)
        self.lock = asyncio.Lock()

    async def serve(self, revoked: asyncio.Event, credential: str | None) -> None:
        reader = asyncio.create_task(self._read())
        pump = asyncio.create_task(self._pump())
        dropped = asyncio.create_task(self.sub.dropped.wait())
        ended = asyncio.create_task(self._credential_ends(revoked, credential))
        tasks = {reader, pump, dropped, ended}
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if ended in done and reader not in done:
            self.sub.clear()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                    await self.ws.close(
                        CLOSE_UNAUTHORIZED, "unauthorized: the credential was revoked or expired"
                    )
            return
        if dropped in done and reader not in done:
            self.sub.clear()  # nothing more is routed to it while the close frame waits
            log.info("closing a WebSocket whose client does not keep up")
            # The close frame queues behind unread data; don't wait forever for a stuck peer.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT_SECONDS):
                    await self.ws.close(
                        CLOSE_TOO_SLOW, "too slow: events were dropped; reconnect and resubscribe"
                    )
        for task in (reader, pump):
            if task.done() and not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                if not isinstance(exc, WebSocketDisconnect | OSError):
                    log.error("WebSocket connection failed", exc_info=exc)

    async def _credential_ends(self, revoked: asyncio.Event, credential: str | None) -> None:
        """Returns when the credential stops being valid: revoked (at once, see
        auth/revocation.py), or found invalid by a periodic check (an expired token)."""
        while True:
            try:
                async with asyncio.timeout(REVALIDATE_SECONDS):
                    await revoked.wait()
                return
            except TimeoutError:
                pass
            try:
                await authenticate(
                    self.ctx.db, self.ctx.settings.secret, self.ctx.key_usage, credential
                )
            except Unauthorized:
                return

    async def _send(self, text: str) -> None:
        await self.ws.send_text(text)

    async def _send_json(self, message: dict[str, Any]) -> None:
        await self._send(orjson.dumps(message).decode())

    async def _read(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            try:
                parsed = protocol.parse(message.get("text"))
            except protocol.BadMessage as exc:
                async with self.lock:
                    await self._send_json(protocol.error("invalid_request", str(exc)))
                continue
            if isinstance(parsed, protocol.Ping):
                async with self.lock:
                    await self._send_json({"type": "pong"})
            elif isinstance(parsed, protocol.Subscribe):
                await self._subscribe(parsed)
            else:
                await self._unsubscribe(parsed)

    def _workflow_of(self, conn: SyncConnection, msg: protocol.Subscribe) -> str | None:
        """The workflow a subscription is about, when the account owns the run/workflow."""
        if msg.kind == "run":
            run = run_store.owned(conn, self.account_id, msg.id)
            return run.workflow_id if run is not None else None
        return msg.id if workflow_store.exists(conn, self.account_id, msg.id) else None

    async def _subscribe(self, msg: protocol.Subscribe) -> None:
        key = f"{msg.kind}_id"
        watched = self.sub.run_ids if msg.kind == "run" else self.sub.workflow_ids
        if msg.id not in watched and (
            len(self.sub.run_ids) + len(self.sub.workflow_ids) >= MAX_SUBSCRIPTIONS
        ):
            async with self.lock:
                await self._send_json(
                    protocol.error(
                        "invalid_request",
                        f"At most {MAX_SUBSCRIPTIONS} subscriptions per connection.",
                        **{key: msg.id},
                    )
                )
            return
        workflow_id = await self.ctx.db.read(lambda c: self._workflow_of(c, msg))
        async with self.lock:
            if workflow_id is None:
                await self._send_json(
                    protocol.error("not_found", f"No such {msg.kind}.", **{key: msg.id})
                )
                return
            if msg.kind == "workflow":
                self.sub.watch_workflow(msg.id)
                await self._send_json({"type": "subscribed", key: msg.id})
                return
            # Bus first, then the log: an event committed meanwhile is in one or the other.
            self.sub.watch_run(msg.id)
            await self._send_json({"type": "subscribed", key: msg.id})
            replayed = await self.cursors.replay(
                msg.id, workflow_id, self.account_id, msg.after_seq
            )
            for event in replayed:
                await self._send(event.message_json)

    async def _unsubscribe(self, msg: protocol.Unsubscribe) -> None:
        async with self.lock:
            if msg.kind == "run":
                self.sub.unwatch_run(msg.id)
                if not self.sub.workflow_ids:
                    self.cursors.forget(msg.id)
            else:
                self.sub.unwatch_workflow(msg.id)
            await self._send_json({"type": "unsubscribed", f"{msg.kind}_id": msg.id})

    async def _pump(self) -> None:
        queue = self.sub.queue
        while True:
            try:
                async with asyncio.timeout(HEARTBEAT_SECONDS):
                    event = await queue.get()
            except TimeoutError:
                async with self.lock:
                    await self._send_json({"type": "ping"})
                continue
            async with self.lock:
                if not self.sub.wants(event):
                    continue  # queued before an unsubscribe
                for ready in await self.cursors.admit(event):
                    await self._send(ready.message_json)


# -- Server-Sent Events ----------------------------------------------------------------------


async def get_stream_principal(
    request: Request,
    ctx: CtxDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    token: Annotated[
        str | None,
        Query(
            description="The credential, for clients that cannot set headers (EventSource). "
            "Prefer a JWT; the Authorization header wins when both are sent."
        ),
    ] = None,
) -> Principal:
    if credentials is None and token:
        credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
    return await get_principal(request, ctx, credentials)


StreamPrincipalDep = Annotated[Principal, Depends(get_stream_principal)]


SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The event's seq."},
        "event": {"$ref": "#/components/schemas/EventType"},
        "data": {
            "type": "string",
            "description": "The event message, as JSON: a RunEventMessage.",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/RunEventMessage"},
        },
    },
}


def _sse_frame(event: Event) -> bytes:
    return f"id: {event.seq}\nevent: {event.type}\ndata: {event.message_json}\n\n".encode()


@router.get(
    "/workflows/{workflow_id}/runs/{run_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The run's events as Server-Sent Events (id = seq, event = type, "
            "data = the event message); ends after run.completed, run.failed or run.cancelled.",
            # Before OpenAPI 3.2 (itemSchema), `schema` of an event stream describes one event.
            "content": {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}},
        },
        404: {"description": "No such run of this workflow in the caller's account."},
    },
)
async def run_events(
    workflow_id: str,
    run_id: str,
    ctx: CtxDep,
    principal: StreamPrincipalDep,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", description="Resume after this seq.")
    ] = None,
    after_seq: Annotated[
        int | None,
        Query(
            ge=0,
            le=MAX_SEQ,
            description="Resume after this seq (Last-Event-ID wins when both are set).",
        ),
    ] = None,
) -> StreamingResponse:
    """The run's events, replayed from the start (or after ``Last-Event-ID``), then live."""
    after = after_seq or 0
    if last_event_id is not None and last_event_id.strip():
        try:
            after = int(last_event_id.strip())
        except ValueError:
            after = -1
        if not 0 <= after <= MAX_SEQ:
            raise InvalidRequest(
                f"Last-Event-ID must be the seq of an event (an integer from 0 to {MAX_SEQ})."
            )
    run = await ctx.db.read(lambda c: run_store.owned(c, principal.account_id, run_id, workflow_id))
    if run is None:
        raise NotFound("No such run of this workflow.")
    finished = run.status != RunStatus.RUNNING
    frames = _sse_frames(ctx, principal, run_id, workflow_id, after, finished)
    return StreamingResponse(
        frames,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _sse_frames(
    ctx: AppContext,
    principal: Principal,
    run_id: str,
    workflow_id: str,
    after: int,
    finished: bool,
) -> AsyncIterator[bytes]:
    account_id = principal.account_id
    with ctx.bus.subscribe(account_id) as sub, ctx.revocations.watch(principal) as revoked:
        sub.watch_run(run_id)  # bus first, then the log
        cursors = RunCursors(ctx.db)
        pending = await cursors.replay(run_id, workflow_id, account_id, after)
        if finished:  # everything is in the log (also when resuming past the final event)
            for event in pending:
                yield _sse_frame(event)
            return
        revoked_wait = asyncio.ensure_future(revoked.wait())
        next_event: asyncio.Future[Event] | None = None
        try:
            while True:
                for event in pending:
                    yield _sse_frame(event)
                    if event.is_final:
                        return
                if sub.overflowed:
                    # One run per stream: rather than drop the client, catch up from the log.
                    while not sub.queue.empty():
                        sub.queue.get_nowait()
                    sub.overflowed = False
                    sub.dropped.clear()
                    pending = await cursors.replay(
                        run_id, workflow_id, account_id, cursors.position(run_id)
                    )
                    continue
                if next_event is None:
                    next_event = asyncio.ensure_future(sub.queue.get())
                waiting: set[asyncio.Future[Any]] = {next_event, revoked_wait}
                done, _ = await asyncio.wait(
                    waiting,
                    timeout=SSE_KEEPALIVE_SECONDS,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if revoked_wait in done:
                    return  # the credential was revoked: the stream ends
                if next_event not in done:
                    pending = []
                    yield b": keep-alive\n\n"
                    continue
                pending = await cursors.admit(next_event.result())
                next_event = None
        finally:
            revoked_wait.cancel()
            if next_event is not None:
                next_event.cancel()
