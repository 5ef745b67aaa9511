"""The server side of the sandbox: a pool of processes that run node work under a budget.

The event loop of the server only waits on sockets; everything a node computes happens in
one of these processes (forked by ``zygote.py``, run by ``worker.py``). For each job:

1. it waits for a slot (one of ``sandbox_processes``) and books its memory budget against
   ``sandbox_memory_mb``, so the memory that nodes may use at once in this server is bounded
   whatever tenants ask for. Slots and memory are shared fairly between accounts
   (``fair.py``): an account holds at most its share of either, and a freed slot goes to
   the waiting account that holds the fewest;
2. an idle process is taken (or forked);
3. the job is sent; the process lowers its own OS limits to the job's budget and runs it;
4. a wall-clock timer here kills the process when the budget's wall time is over, and so
   does cancelling the job (a cancelled run, a shutdown): killing is the one way to stop
   work that never yields, and it returns all of its memory at once.

A process that overran, crashed or grew too large is replaced; the others are reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from nodeloom.budget import Budget
from nodeloom.sandbox import wire
from nodeloom.sandbox.fair import FairQueue, FairSlots
from nodeloom.sandbox.zygote import SandboxUnavailable, Zygote
from nodeloom.sdk._node import NodeFailure, Produced
from nodeloom.settings import Settings

log = logging.getLogger("nodeloom.sandbox")

ProgressCallback = Callable[[float], Awaitable[None]]
READY_TIMEOUT = 30.0
EXIT_REPORT_TIMEOUT = 2.0
REAP_INTERVAL = 5.0
_CODE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# Settings that never reach a sandbox process: anything secret, and URLs that may embed
# credentials. A node that needs the provider key gets it with its job, and only then.
_SERVER_ONLY = frozenset({"database_url", "redis_url"})


def sandbox_settings(settings: Settings) -> dict[str, Any]:
    secret = {
        name
        for name, info in Settings.model_fields.items()
        if SecretStr in getattr(info.annotation, "__args__", (info.annotation,))
    }
    return settings.model_dump(mode="json", exclude=secret | _SERVER_ONLY)


@dataclass(frozen=True)
class NodeJob:
    """One node execution, as data: ids, never code (the sandbox has the catalog)."""

    type: str
    params: dict[str, Any]
    inputs: dict[str, Any]
    run_input: dict[str, Any] | None
    run_id: str
    node_id: str
    account_id: str
    scratch: Path
    provider_key: str | None = field(default=None, repr=False)
    # An account's credential the node names: its base_url and secret fields.
    credential: dict[str, str] | None = field(default=None, repr=False)
    # A node package's node: its job carries only its own inputs and params, not the run's
    # input data nor the account (docs/node-packages.md). ``account_id`` stays for booking.
    package: bool = False

    def message(self, budget: Budget) -> dict[str, Any]:
        return {
            "t": "node",
            "type": self.type,
            "params": self.params,
            "inputs": self.inputs,
            "input": None if self.package else self.run_input,
            "run_id": self.run_id,
            "node_id": self.node_id,
            "account_id": "" if self.package else self.account_id,
            "scratch": str(self.scratch),
            "provider_key": self.provider_key,
            "credential": self.credential,
            "budget": budget.as_dict(),
        }


class _Worker:
    def __init__(
        self,
        pid: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        exited: asyncio.Future[int | None],
    ) -> None:
        self.pid = pid
        self.reader = reader
        self.writer = writer
        self.exited = exited
        self.idle_since = time.monotonic()

    @property
    def alive(self) -> bool:
        return not self.exited.done()

    async def call(
        self, message: dict[str, Any], on_progress: ProgressCallback | None, max_blob: int
    ) -> tuple[dict[str, Any], bytes]:
        self.writer.write(wire.encode(message))
        await self.writer.drain()
        while True:
            reply, blob = await wire.read(self.reader, max_blob)
            if reply.get("t") != "progress":
                return reply, blob
            if on_progress is not None:
                fraction = reply.get("f")
                if isinstance(fraction, int | float):
                    await on_progress(min(1.0, max(0.0, float(fraction))))

    async def exit_code(self) -> int | None:
        try:
            async with asyncio.timeout(EXIT_REPORT_TIMEOUT):
                return await asyncio.shield(self.exited)
        except TimeoutError:
            return None

    def kill(self) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.writer.close()


class _Fork:
    """One fork, done in a thread. If whoever waits for it leaves first (cancelled: the
    server stops), the new process and its socket are disposed of by whichever side comes
    last, so neither leaks."""

    def __init__(self, zygote: Zygote) -> None:
        self._zygote = zygote
        self._lock = threading.Lock()
        self._result: tuple[int, socket.socket] | None = None
        self._abandoned = False

    def run(self) -> None:
        result = self._zygote.fork()
        with self._lock:
            if self._abandoned:
                self._discard(result)
            else:
                self._result = result

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            if self._result is not None:
                self._discard(self._result)
                self._result = None

    def take(self) -> tuple[int, socket.socket]:
        with self._lock:
            result, self._result = self._result, None
        if result is None:
            raise SandboxUnavailable("the fork was abandoned")
        return result

    @staticmethod
    def _discard(result: tuple[int, socket.socket]) -> None:
        pid, sock = result
        sock.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class SandboxPool:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.max_processes = settings.sandbox_processes
        self.gate = FairSlots(
            FairQueue(
                settings.sandbox_processes,
                settings.sandbox_slots_per_account,
                memory_mb=settings.sandbox_memory_mb,
                memory_per_account=settings.sandbox_memory_mb_per_account,
            )
        )
        self._init = wire.encode({"t": "init", "settings": sandbox_settings(settings)})
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._count = 0  # idle + busy + being forked
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._reaper: asyncio.Task[None] | None = None
        self.spawned = 0
        self.killed = 0

    @property
    def processes(self) -> int:
        return self._count

    @property
    def memory_booked_mb(self) -> int:
        return self.gate.queue.used_mb

    @property
    def jobs_waiting(self) -> int:
        return self.gate.queue.waiting()

    async def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_forever(), name="sandbox-reaper")

    async def _prewarm(self) -> None:
        """Keep ``sandbox_warm`` processes ready, so a first node does not wait for a fork
        (or, right after start, for the fork server's imports)."""
        while not self._closed and self._count < min(
            self.settings.sandbox_warm, self.max_processes
        ):
            self._count += 1
            try:
                worker = await self._spawn()
            except Exception:
                self._count -= 1
                log.warning("could not start a sandbox process", exc_info=True)
                return
            self._idle.append(worker)
            self._wake_one()

    async def stop(self) -> None:
        self._closed = True
        self.gate.close(SandboxUnavailable("the server is stopping"))
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        workers = [*self._idle, *self._busy]
        for worker in workers:
            worker.kill()
        self._idle.clear()
        for worker in workers:
            with contextlib.suppress(Exception):
                await worker.writer.wait_closed()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(SandboxUnavailable("the server is stopping"))

    # -- jobs ------------------------------------------------------------------------------

    async def run_node(
        self, job: NodeJob, budget: Budget, on_progress: ProgressCallback | None = None
    ) -> Produced:
        reply, blob = await self._job(job.message(budget), budget, job.account_id, on_progress)
        return self._produced(reply, blob, job.scratch)

    async def convert(
        self, src: Path, kind: str, scratch: Path, budget: Budget, account_id: str
    ) -> Produced:
        """A file a provider handed back (``src``, in ``scratch``) made into an artifact of
        ``kind`` (nodes/adapters/media.py), its result written in ``scratch``."""
        message = {
            "t": "media",
            "src": str(src),
            "kind": kind,
            "scratch": str(scratch),
            "budget": budget.as_dict(),
        }
        reply, blob = await self._job(message, budget, account_id)
        return self._produced(reply, blob, scratch)

    async def ingest(
        self,
        src: Path,
        sniffed: tuple[str, str],
        scratch: Path,
        limits: dict[str, float],
        budget: Budget,
        account_id: str,
    ) -> dict[str, Any]:
        """An uploaded file (``src``, sniffed as (kind, format)) decoded and made into one
        of our types under the account's ``limits`` (nodes/ingest.py); what it became."""
        message = {
            "t": "ingest",
            "src": str(src),
            "kind": sniffed[0],
            "format": sniffed[1],
            "scratch": str(scratch),
            "limits": limits,
            "budget": budget.as_dict(),
        }
        reply, _ = await self._job(message, budget, account_id)
        return reply

    async def check(
        self, items: list[dict[str, Any]], budget: Budget, account_id: str
    ) -> list[list[str]]:
        """The expensive parameter checks of each item ``{type, params}``, for an account
        (whose share of the slots the check counts against)."""
        reply, _ = await self._job(
            {"t": "check", "items": items, "budget": budget.as_dict()}, budget, account_id
        )
        problems = reply.get("problems")
        if not isinstance(problems, list) or len(problems) != len(items):
            raise NodeFailure("the parameter check answered nonsense", "internal_error")
        return [[str(p) for p in item] if isinstance(item, list) else [] for item in problems]

    async def _job(
        self,
        message: dict[str, Any],
        budget: Budget,
        account_id: str,
        on_progress: ProgressCallback | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        async with self.gate.hold(account_id, budget.memory_mb):
            worker = await self._checkout()
            reusable = False
            try:
                try:
                    async with asyncio.timeout(budget.wall_seconds):
                        reply, blob = await worker.call(
                            message, on_progress, self.settings.max_artifact_bytes
                        )
                except TimeoutError:
                    raise NodeFailure(
                        f"the node took longer than its budget of {budget.wall_seconds:g} s",
                        "node_timeout",
                    ) from None
                except (asyncio.IncompleteReadError, ConnectionError, wire.ProtocolError):
                    worker.kill()
                    raise self._death(await worker.exit_code(), budget) from None
                reusable = reply.get("recycle") is False
                if not reply.get("ok"):
                    raise self._failure(reply)
                return reply, blob
            finally:
                self._checkin(worker, reusable)

    @staticmethod
    def _failure(reply: dict[str, Any]) -> NodeFailure:
        code = reply.get("code")
        message = reply.get("message")
        return NodeFailure(
            str(message)[:2000] if message else "the node failed",
            code if isinstance(code, str) and _CODE.match(code) else "node_failed",
        )

    @staticmethod
    def _death(code: int | None, budget: Budget) -> NodeFailure:
        if code == -signal.SIGXCPU:
            return NodeFailure(
                f"the node used more than its budget of {budget.cpu_seconds:g} s of CPU time",
                "node_timeout",
            )
        if code == -signal.SIGKILL:
            return NodeFailure(
                "the node's process was killed by the system, most likely for lack of memory",
                "node_crashed",
            )
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else -code
            return NodeFailure(f"the node's process crashed ({name})", "node_crashed")
        return NodeFailure("the node's process ended unexpectedly", "node_crashed")

    @staticmethod
    def _produced(reply: dict[str, Any], blob: bytes, scratch: Path) -> Produced:
        def number(name: str) -> int | None:
            value = reply.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        ports = reply.get("ports")
        produced = Produced(
            width=number("width"),
            height=number("height"),
            duration_ms=number("duration_ms"),
            ports=tuple(str(p) for p in ports) if isinstance(ports, list) else None,
        )
        path = reply.get("path")
        if path is None:
            produced.data = blob
            return produced
        # Only a file of this job's own scratch directory may become an artifact.
        resolved = Path(str(path)).resolve()
        if not resolved.is_relative_to(scratch.resolve()) or not resolved.is_file():
            raise NodeFailure("the node named an output outside its directory", "internal_error")
        produced.path = resolved
        return produced

    # -- processes -------------------------------------------------------------------------

    async def _checkout(self) -> _Worker:
        while True:
            if self._closed:
                raise SandboxUnavailable("the server is stopping")
            while self._idle:
                worker = self._idle.pop()
                if worker.alive:
                    self._busy.add(worker)
                    return worker
                worker.kill()
                self._count -= 1
            if self._count < self.max_processes:
                self._count += 1
                try:
                    worker = await self._spawn()
                except BaseException:
                    self._count -= 1
                    self._wake_one()
                    raise
                self._busy.add(worker)
                return worker
            # Every process is busy or being forked (the gate admits no more jobs than
            # there are processes, so this is a moment's wait for a fork in progress).
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def _checkin(self, worker: _Worker, reusable: bool) -> None:
        self._busy.discard(worker)
        if reusable and worker.alive and not self._closed:
            worker.idle_since = time.monotonic()
            self._idle.append(worker)
        else:
            worker.kill()
            self.killed += 1
            self._count -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _spawn(self) -> _Worker:
        zygote = await asyncio.to_thread(Zygote.shared)
        fork = _Fork(zygote)
        try:
            await asyncio.to_thread(fork.run)
        except BaseException:
            fork.abandon()
            raise
        pid, sock = fork.take()
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[int | None] = loop.create_future()

        def settle(code: int | None) -> None:
            if not exited.done():
                exited.set_result(code)

        def report(code: int | None) -> None:  # called from the zygote's reader thread
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(settle, code)

        zygote.on_exit(pid, report)
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
        except BaseException:
            sock.close()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise
        worker = _Worker(pid, reader, writer, exited)
        try:
            writer.write(self._init)
            async with asyncio.timeout(READY_TIMEOUT):
                await writer.drain()
                ready, _ = await wire.read(reader, 0)
            if ready.get("t") != "ready":
                raise SandboxUnavailable(f"a sandbox process answered {ready!r}")
        except BaseException:
            worker.kill()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            raise
        self.spawned += 1
        return worker

    async def _reap_forever(self) -> None:
        """Idle processes beyond ``sandbox_warm`` go away after ``sandbox_idle_seconds``."""
        await self._prewarm()
        while True:
            await asyncio.sleep(REAP_INTERVAL)
            cutoff = time.monotonic() - self.settings.sandbox_idle_seconds
            keep = self.settings.sandbox_warm
            self._idle.sort(key=lambda w: w.idle_since)
            while len(self._idle) > keep and self._idle[0].idle_since < cutoff:
                worker = self._idle.pop(0)
                worker.kill()
                self._count -= 1
            dead = [w for w in self._idle if not w.alive]
            for worker in dead:
                self._idle.remove(worker)
                worker.kill()
                self._count -= 1
