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
redis-py does, and so is one refused with LOADING (a Redis still reading its data). A
command left without a reply for ``REPLY_TIMEOUT_SECONDS`` fails with ``TimeoutError``, not
retried, and its connection is dropped (redis-py would wait for ever): a Redis that accepts
connections but does not answer must not hold requests for several timeouts.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from typing import Any, cast
from urllib.parse import urlsplit

import hiredis
from redis.connection import parse_url
from redis.exceptions import BusyLoadingError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

CONNECT_TIMEOUT_SECONDS = 2.0
REPLY_TIMEOUT_SECONDS = 10.0
# Waits before each new attempt after a connection failure: as redis_options.py's backoff.
RETRY_DELAYS = (0.05, 0.1, 0.2)


class RedisWire:
    """One pipelined connection to the Redis of ``url`` (redis://, rediss:// or unix://,
    with user, password and db as redis-py reads them), made at the first command and
    again after a failure."""

    def __init__(self, url: str) -> None:
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
            except _Silent as exc:
                raise RedisTimeoutError(f"Redis at {self._where()}: {exc}") from exc
            except (TimeoutError, OSError, _Lost, BusyLoadingError) as exc:
                if delay is None or self._closed:
                    if isinstance(exc, BusyLoadingError):
                        raise
                    raise RedisConnectionError(f"Redis at {self._where()}: {exc}") from exc
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close the connection; a connection being made is closed once made (within
        ``CONNECT_TIMEOUT_SECONDS``). Commands sent afterwards fail."""
        self._closed = True
        if self._protocol is not None:
            self._protocol.close()
            self._protocol = None

    async def _connected(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        protocol = self._protocol
        if protocol is not None and protocol.usable(loop):
            return protocol
        if self._closed:
            raise _Lost("the connection was closed")
        # One connection attempt at a time, whoever asks meanwhile waits for it (an attempt
        # of an event loop that ended is not waited for).
        connecting = self._connecting
        if connecting is None or connecting.done() or connecting.get_loop() is not loop:
            connecting = self._connecting = asyncio.ensure_future(self._connect())
        return await asyncio.shield(connecting)

    async def _connect(self) -> _Protocol:
        """A new connection, ready for commands, kept as this client's (whoever waits)."""
        protocol = await self._open()
        if self._closed:  # closed while it was being made
            protocol.close()
            raise _Lost("the connection was closed")
        if self._protocol is not None:
            self._protocol.close()
        self._protocol = protocol
        return protocol

    async def _open(self) -> _Protocol:
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
    """TLS as the URL's ssl_* options ask, as redis-py reads them: the CA (file or folder),
    a client certificate and key, whether to verify the server and its host name."""
    context = ssl.create_default_context(
        cafile=options.get("ssl_ca_certs"), capath=options.get("ssl_ca_path")
    )
    if options.get("ssl_certfile"):
        context.load_cert_chain(options["ssl_certfile"], options.get("ssl_keyfile"))
    if not _true(options.get("ssl_check_hostname", True)):
        context.check_hostname = False
    if str(options.get("ssl_cert_reqs", "required")).lower() in ("none", "cert_none"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _true(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("0", "false", "no", "off", "")
    return bool(value)


class _Lost(Exception):
    """The connection ended before the reply came."""


class _Silent(Exception):
    """No reply in REPLY_TIMEOUT_SECONDS: the connection was dropped."""


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._reader = hiredis.Reader()
        # Each command's future and when it was queued, in the order Redis answers them.
        self._waiting: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
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
        loop = self._loop
        reply: asyncio.Future[Any] = loop.create_future()
        self._waiting.append((reply, loop.time()))
        if not self._outgoing:
            loop.call_soon(self._write)
        self._outgoing.append(packed)
        if self._watch is None:
            self._watch = loop.call_later(REPLY_TIMEOUT_SECONDS, self._check)
        return reply

    def close(self) -> None:
        if self._transport is not None:
            with contextlib.suppress(RuntimeError):  # its event loop already closed
                self._transport.close()
        self._fail(_Lost("the connection was closed"))

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        try:
            while (reply := self._reader.gets()) is not False:
                waiting = self._waiting.popleft()[0]
                if waiting.done():
                    continue  # its caller was cancelled
                if isinstance(reply, hiredis.ReplyError):
                    waiting.set_exception(_response_error(str(reply)))
                else:
                    waiting.set_result(reply)
        except (hiredis.ProtocolError, IndexError) as exc:
            self._abort(_Lost(f"unreadable reply from Redis: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(_Lost(str(exc) if exc else "Redis closed the connection"))

    # -- internals -------------------------------------------------------------------------

    def _write(self) -> None:
        outgoing, self._outgoing = self._outgoing, []
        if self._lost is None and self._transport is not None and outgoing:
            self._transport.writelines(outgoing)

    def _check(self) -> None:
        """The oldest command waiting has waited REPLY_TIMEOUT_SECONDS: every command of
        the connection fails (``_Silent``) and the connection is dropped; else look again
        when it will have."""
        self._watch = None
        if not self._waiting:
            return
        waited = self._loop.time() - self._waiting[0][1]
        if waited >= REPLY_TIMEOUT_SECONDS:
            self._abort(_Silent(f"no reply from Redis in {REPLY_TIMEOUT_SECONDS:g} s"))
        else:
            self._watch = self._loop.call_later(REPLY_TIMEOUT_SECONDS - waited, self._check)

    def _abort(self, exc: Exception) -> None:
        if self._transport is not None:
            self._transport.abort()
        self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        """Every command waiting fails with ``exc`` (its type says whether to retry)."""
        if self._lost is None:
            self._lost = exc
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        while self._waiting:
            waiting = self._waiting.popleft()[0]
            if not waiting.done():
                waiting.set_exception(type(exc)(str(exc)))


def _pack(args: tuple[Any, ...]) -> bytes:
    packed: bytes = hiredis.pack_command(args)
    return packed


def _response_error(message: str) -> ResponseError | BusyLoadingError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    if message.startswith("LOADING"):
        return BusyLoadingError(message)
    return ResponseError(message)
