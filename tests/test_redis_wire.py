"""The lean pipelined Redis connection (redis_wire.py) against a real redis-server of the
test's own: replies reach their own callers under concurrency, a restart is invisible
once Redis is back, a Redis that is gone or silent is an error (never a hang), and the
URL's password and database are honoured."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from nodeloom import redis_wire
from nodeloom.ratelimit_redis import _DECIDE, RedisWindows
from nodeloom.redis_wire import RedisWire
from tests.services import RedisServer, redis_server_available


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    redis_server_available()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    yield redis
    redis.stop()


@pytest.fixture
async def wire(server: RedisServer) -> AsyncIterator[RedisWire]:
    connection = RedisWire(server.url)
    yield connection
    await connection.close()


async def test_concurrent_commands_each_get_their_own_reply(wire: RedisWire) -> None:
    values = [f"value-{i}".encode() * (1 + i % 7) for i in range(500)]
    replies = await asyncio.gather(*(wire.call("ECHO", v) for v in values))
    assert replies == values
    counts = await asyncio.gather(*(wire.call("INCR", "counter") for _ in range(300)))
    assert sorted(counts) == list(range(1, 301))


async def test_reply_errors_are_raised_and_the_connection_goes_on(wire: RedisWire) -> None:
    await wire.call("SET", "text", "x")
    with pytest.raises(ResponseError, match="wrong number of arguments"):
        await wire.call("INCR", "counter", "extra")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await wire.call("LPUSH", "text", "y")  # a string, not a list
    with pytest.raises(NoScriptError):
        await wire.call("EVALSHA", "0" * 40, 0)
    assert await wire.call("GET", "text") == b"x"


async def test_a_restart_is_invisible_once_redis_is_back(
    wire: RedisWire, server: RedisServer
) -> None:
    assert await wire.call("SET", "k", "before") == b"OK"
    server.stop()
    with pytest.raises(RedisConnectionError):
        await wire.call("GET", "k")  # gone: an error after the retries, not a hang
    server.start()  # same port, nothing kept
    assert await wire.call("GET", "k") is None
    assert await wire.call("SET", "k", "after") == b"OK"


async def test_the_rate_limit_script_is_cached_again_after_a_restart(server: RedisServer) -> None:
    windows = RedisWindows(server.url)
    try:
        decision, stamp = await windows.take("hook", 2, 60)
        assert decision.allowed and stamp is not None
        server.stop()
        server.start()  # the script cache is empty now: EVALSHA answers NOSCRIPT
        first, _ = await windows.take("hook", 2, 60)
        second, _ = await windows.take("hook", 2, 60)
        third, _ = await windows.take("hook", 2, 60)
        assert (first.allowed, second.allowed, third.allowed) == (True, True, False)
    finally:
        await windows.close()


async def test_password_and_database_of_the_url(server: RedisServer) -> None:
    admin = Redis(port=server.port)
    try:
        await admin.config_set("requirepass", "s3cret")
        wire = RedisWire(f"redis://:s3cret@127.0.0.1:{server.port}/3")
        try:
            assert await wire.call("SET", "where", "db3") == b"OK"
        finally:
            await wire.close()
        check = Redis(port=server.port, password="s3cret", db=3)
        assert await check.get("where") == b"db3"
        await check.aclose()
        wrong = RedisWire(f"redis://:wrong@127.0.0.1:{server.port}/0")
        with pytest.raises(ResponseError):
            await wrong.call("PING")
        await wrong.close()
    finally:
        await admin.aclose()


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """Accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


async def test_a_silent_redis_is_a_timeout_after_one_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Redis that accepts connections but never answers: each command fails once it has
    waited the reply timeout, without being sent again to wait as long once more."""
    monkeypatch.setattr(redis_wire, "REPLY_TIMEOUT_SECONDS", 0.3)
    with _silent_server() as port:
        wire = RedisWire(f"redis://127.0.0.1:{port}/0")
        try:
            started = time.monotonic()
            first = asyncio.ensure_future(wire.call("PING"))
            await asyncio.sleep(0.2)
            second = asyncio.ensure_future(wire.call("PING"))  # sent 0.2 s later
            with pytest.raises(RedisTimeoutError):
                await asyncio.wait_for(first, 10)
            assert time.monotonic() - started < 0.6
            with pytest.raises(RedisTimeoutError):
                await asyncio.wait_for(second, 10)
        finally:
            await wire.close()


async def test_callers_gone_while_connecting_leave_one_connection(server: RedisServer) -> None:
    admin = Redis(port=server.port)
    wire = RedisWire(server.url)
    try:
        calls = [asyncio.ensure_future(wire.call("PING")) for _ in range(20)]
        await asyncio.sleep(0)
        for call in calls:
            call.cancel()  # every caller gone while the connection is being made
        await asyncio.gather(*calls, return_exceptions=True)
        await asyncio.sleep(0.2)  # the connection is made meanwhile, nobody waiting for it
        assert await wire.call("PING") == b"PONG"
        assert await wire.call("PING") == b"PONG"
        clients = (await admin.info("clients"))["connected_clients"]
        assert clients == 2, clients  # the admin and one connection of the wire
    finally:
        await wire.close()
        await admin.aclose()
    with pytest.raises(RedisConnectionError):
        await wire.call("PING")  # closed


async def test_a_count_sent_again_is_not_counted_twice(wire: RedisWire) -> None:
    """The rate limit's script is sent again when its reply was lost: the same stamp is
    the same request, allowed once and counted once, even at the limit."""
    args = (1, "window", 1, 60_000_000, "stamp-1")
    first = await wire.call("EVAL", _DECIDE, *args)
    again = await wire.call("EVAL", _DECIDE, *args)
    assert (first[0], first[1]) == (1, 1)
    assert (again[0], again[1]) == (1, 1)
    other = await wire.call("EVAL", _DECIDE, 1, "window", 1, 60_000_000, "stamp-2")
    assert (other[0], other[1]) == (0, 1)


async def test_nothing_listening_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    wire = RedisWire(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(RedisConnectionError):
        await wire.call("PING")
    await wire.close()
