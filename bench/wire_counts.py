"""Counting what a process sends to PostgreSQL and Redis: small TCP proxies on 127.0.0.1 that
forward every byte unchanged and count, as they pass, the messages the client sends.

- PostgreSQL (frontend protocol v3): a round trip ends with a ``Sync`` (extended protocol:
  prepare, bind/execute, an executemany's whole pipeline) or is one simple ``Query`` (BEGIN,
  COMMIT, ...); each waits for the server's ReadyForQuery. ``Parse`` messages are statements
  prepared (a cached prepared statement is bound without one).
- Redis (RESP): one command per top-level array the client sends (a pipeline's commands
  each count; pub/sub messages the server pushes are not counted).

Used by bench/bench_accept.py; the proxies run on a thread of the bench process, so their
CPU is not the measured server's.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections import Counter
from collections.abc import Callable

SSL_REQUEST = 80877103
GSS_REQUEST = 80877104


class _PgFrontend:
    """Parses the client's side of a PostgreSQL connection, counting message types."""

    def __init__(self, counts: Counter[str]) -> None:
        self.counts = counts
        self.buffer = bytearray()
        self.started = False

    def feed(self, data: bytes) -> None:
        buf = self.buffer
        buf.extend(data)
        while True:
            if not self.started:
                if len(buf) < 8:
                    return
                (length,) = struct.unpack_from("!i", buf, 0)
                if len(buf) < length:
                    return
                (code,) = struct.unpack_from("!i", buf, 4)
                del buf[:length]
                # An SSL or GSS request is followed by another untyped message (the startup).
                self.started = code not in (SSL_REQUEST, GSS_REQUEST)
                continue
            if len(buf) < 5:
                return
            kind = chr(buf[0])
            (length,) = struct.unpack_from("!i", buf, 1)
            if len(buf) < 1 + length:
                return
            del buf[: 1 + length]
            self.counts[kind] += 1


class _RespCommands:
    """Counts the top-level arrays (commands) in what a Redis client sends."""

    def __init__(self, counts: Counter[str]) -> None:
        self.counts = counts
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        buf = self.buffer
        buf.extend(data)
        while True:
            end = _command_end(buf)
            if end is None:
                return
            del buf[:end]
            self.counts["command"] += 1


def _command_end(buf: bytearray) -> int | None:
    """Where the first complete command of ``buf`` ends (an array of bulk strings)."""
    line = buf.find(b"\r\n")
    if line < 0:
        return None
    if buf[:1] != b"*":  # an inline command: one line
        return line + 2
    items = int(buf[1:line])
    at = line + 2
    for _ in range(items):
        line = buf.find(b"\r\n", at)
        if line < 0:
            return None
        size = int(buf[at + 1 : line])
        at = line + 2 + size + 2
        if at > len(buf):
            return None
    return at


class CountingProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; ``counts`` of what clients sent."""

    def __init__(self, target: tuple[str, int], parser: Callable[[Counter[str]], object]) -> None:
        self.target = target
        self.parser = parser
        self.counts: Counter[str] = Counter()
        self.port = 0
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CountingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await server.serve_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        local: Counter[str] = Counter()
        parser = self.parser(local)

        async def client_to_server() -> None:
            while data := await reader.read(65536):
                parser.feed(data)  # type: ignore[attr-defined]
                with self._lock:
                    self.counts.update(local)
                local.clear()
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def server_to_client() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        await asyncio.gather(client_to_server(), server_to_client(), return_exceptions=True)


def postgres_proxy(host: str, port: int) -> CountingProxy:
    return CountingProxy((host, port), _PgFrontend).start()


def redis_proxy(host: str, port: int) -> CountingProxy:
    return CountingProxy((host, port), _RespCommands).start()
