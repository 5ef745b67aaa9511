"""A lean Redis connection for the two commands every accepted request sends: the rate
limit's script (ratelimit_redis.py) and the PUBLISH of its events (events/links.py).

redis-py checks a connection out of its pool for each command, wraps it in its retry,
event and metrics machinery, then returns it: about a tenth of an API replica's CPU per
webhook trigger went there (docs/benchmarks.md, issue #20). Here one connection carries
every command of the process, pipelined: a command is packed (hiredis), queued, and the
commands queued within one turn of the event loop leave in one write; replies come back
in order and are matched to their callers by position (Redis answers a connection's
commands in the order it received them). Everything else (subscriptions, the readiness
ping) stays on redis-py.

Failures are redis-py's exception types, so callers handle them as before: a lost or
refused connection is ``ConnectionError`` after the same retries as our redis-py clients
(redis_options.py), a reply error ``ResponseError`` (``NoScriptError`` for NOSCRIPT). A
command whose connection drops before its reply is sent again on a new connection, as
redis-py does. A connection that stays silent ``REPLY_TIMEOUT_SECONDS`` with commands
waiting is dropped (redis-py would wait for ever).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from typing import Any, cast
from urllib.parse import urlsplit

import hiredis
from redis.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

CONNECT_TIMEOUT_SECONDS = 2.0
REPLY_TIMEOUT_SECONDS = 10.0
# Waits before each new attempt after a connection failure: as redis_options.py's backoff.
RETRY_DELAYS = (0.05, 0.1, 0.2)


class RedisWire:
    """One pipelined connection to the Redis of ``url`` (redis://, rediss:// or unix://,
    with user, password and db as redis-py reads them), made at the first command and
    again after a failure."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._options: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
        self._scheme = urlsplit(url).scheme
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task[_Protocol] | None = None
        self._closed = False

    async def call(self, *args: str | bytes | int | float) -> Any:
        """Send one command; its reply (a ``ResponseError`` reply is raised)."""
        packed = _pack(args)
        for delay in (*RETRY_DELAYS, None):
            try:
                protocol = await self._connected()
                return await protocol.send(packed)
            except (TimeoutError, OSError, _Lost) as exc:
                if delay is None or self._closed:
                    raise RedisConnectionError(f"Redis at {self._where()}: {exc}") from exc
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None and not self._connecting.done():
            self._connecting.cancel()
        if self._protocol is not None:
            self._protocol.close()
            self._protocol = None

    async def _connected(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None and protocol.usable(asyncio.get_running_loop()):
            return protocol
        if self._closed:
            raise _Lost("the connection was closed")
        # One connection attempt at a time, whoever asks meanwhile waits for it.
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
        protocol = await asyncio.shield(self._connecting)
        self._protocol = protocol
        return protocol

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        options = self._options
        if self._scheme == "unix":
            opening = loop.create_unix_connection(_Protocol, options["path"])
        else:
            context = _tls_context(options) if self._scheme == "rediss" else None
            opening = loop.create_connection(
                _Protocol, options.get("host", "localhost"), options.get("port", 6379), ssl=context
            )
        _, protocol = await asyncio.wait_for(opening, CONNECT_TIMEOUT_SECONDS)
        try:
            password, username = options.get("password"), options.get("username")
            if password:
                auth = (username, password) if username else (password,)
                await protocol.send(_pack(("AUTH", *auth)))
            if options.get("db"):
                await protocol.send(_pack(("SELECT", options["db"])))
        except BaseException:
            protocol.close()
            raise
        return protocol

    def _where(self) -> str:
        options = self._options
        if "path" in options:
            return str(options["path"])
        return f"{options.get('host', 'localhost')}:{options.get('port', 6379)}"


def _tls_context(options: dict[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if str(options.get("ssl_cert_reqs", "required")).lower() in ("none", "cert_none"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class _Lost(Exception):
    """The connection ended before the reply came."""


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._reader = hiredis.Reader()
        self._waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._outgoing: list[bytes] = []
        self._transport: asyncio.Transport | None = None
        self._lost: BaseException | None = None
        self._watch: asyncio.TimerHandle | None = None

    def usable(self, loop: asyncio.AbstractEventLoop) -> bool:
        # A connection of another event loop (one that ended) is never reused.
        return self._lost is None and self._transport is not None and self._loop is loop

    def send(self, packed: bytes) -> asyncio.Future[Any]:
        if self._lost is not None:
            raise _Lost(str(self._lost))
        reply: asyncio.Future[Any] = self._loop.create_future()
        self._waiting.append(reply)
        if not self._outgoing:
            self._loop.call_soon(self._write)
        self._outgoing.append(packed)
        if self._watch is None:
            self._watch = self._loop.call_later(REPLY_TIMEOUT_SECONDS, self._check, reply)
        return reply

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self._fail(_Lost("the connection was closed"))

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        try:
            while (reply := self._reader.gets()) is not False:
                waiting = self._waiting.popleft()
                if waiting.done():
                    continue  # its caller was cancelled
                if isinstance(reply, hiredis.ReplyError):
                    waiting.set_exception(_response_error(str(reply)))
                else:
                    waiting.set_result(reply)
        except (hiredis.ProtocolError, IndexError) as exc:
            self._abort(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(_Lost(str(exc) if exc else "Redis closed the connection"))

    # -- internals -------------------------------------------------------------------------

    def _write(self) -> None:
        outgoing, self._outgoing = self._outgoing, []
        if self._lost is None and self._transport is not None and outgoing:
            self._transport.writelines(outgoing)

    def _check(self, oldest: asyncio.Future[Any]) -> None:
        """No reply to ``oldest`` in REPLY_TIMEOUT_SECONDS: the connection is dropped."""
        self._watch = None
        if self._waiting and self._waiting[0] is oldest:
            self._abort(TimeoutError(f"no reply from Redis in {REPLY_TIMEOUT_SECONDS:.0f} s"))
        elif self._waiting:
            self._watch = self._loop.call_later(
                REPLY_TIMEOUT_SECONDS, self._check, self._waiting[0]
            )

    def _abort(self, exc: BaseException) -> None:
        if self._transport is not None:
            self._transport.abort()
        self._fail(_Lost(str(exc)))

    def _fail(self, exc: BaseException) -> None:
        if self._lost is None:
            self._lost = exc
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        while self._waiting:
            waiting = self._waiting.popleft()
            if not waiting.done():
                waiting.set_exception(_Lost(str(self._lost)))


def _pack(args: tuple[Any, ...]) -> bytes:
    packed: bytes = hiredis.pack_command(args)
    return packed


def _response_error(message: str) -> ResponseError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    return ResponseError(message)
