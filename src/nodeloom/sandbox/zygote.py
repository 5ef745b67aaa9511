"""The sandbox's fork server: one small process per server process that has imported every
node module once and forks a fresh sandbox process on request.

Why a fork server instead of starting ``python -m ...`` per sandbox process: a new interpreter
spends about a second importing Pillow, PyAV, NumPy and Jinja, and a process killed for
overrunning its budget must be replaced at once. A fork of an interpreter that has already
imported them takes a few milliseconds and shares those pages copy-on-write. Forking the
server itself is not an option: it runs threads and an event loop, and it holds the database
credentials and the server secret. The fork server is started with an environment stripped to
an allow-list (no ``NODELOOM_*`` variables, no secrets), stays single-threaded, and never holds
anything but code.

Control channel: a SOCK_SEQPACKET socket pair (message boundaries kept, file descriptors passed
with SCM_RIGHTS). The server sends ``{"t": "fork", "id": n}`` with one end of a fresh socket
pair; the fork server forks, hands that end to the child (``worker.serve``), and answers
``{"t": "forked", "id": n, "pid": p}``. When a child exits it reports
``{"t": "exit", "pid": p, "code": c}`` (c negative for a signal, as subprocess does), which is
how the server tells a CPU-limit kill (SIGXCPU) from a crash. When the server goes away its end
of the control socket closes; the fork server then kills its children and exits.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import itertools
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import orjson

from nodeloom.child_environment import sandbox_environment
from nodeloom.nodes import packages
from nodeloom.sandbox.wire import exit_code_of

log = logging.getLogger("nodeloom.sandbox")

FORK_TIMEOUT = 60.0  # the first fork waits for the imports
_EXITS_REMEMBERED = 4096


class SandboxUnavailable(Exception):
    """The fork server is not running and could not be started."""


class Zygote:
    """The server side of the fork server. Process-wide: every app in this process (tests
    build many) shares one, started on first use and restarted if it died."""

    _shared: ClassVar[Zygote | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def shared(cls) -> Zygote:
        with cls._shared_lock:
            # The node packages the sandbox must import are the ones the last registry built
            # in this process loaded; another set needs another fork server.
            wanted = packages.sandbox_packages()
            if cls._shared is not None and cls._shared.alive and cls._shared.packages != wanted:
                cls._shared.close()
            if cls._shared is None or not cls._shared.alive:
                cls._shared = cls(wanted)
            return cls._shared

    def __init__(self, node_packages: str = "[]") -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.packages = node_packages
        env = sandbox_environment()
        env[packages.SANDBOX_ENV] = node_packages
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "nodeloom.sandbox.zygote", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            # Ctrl-C at a terminal goes to the server, which then closes the control socket.
            start_new_session=True,
        )
        theirs.close()
        self._ctl = ours
        self.alive = True
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._ids = itertools.count(1)
        self._forks: dict[int, concurrent.futures.Future[int]] = {}
        self._exits: OrderedDict[int, int | None] = OrderedDict()
        self._watchers: dict[int, Callable[[int | None], None]] = {}
        self._reader = threading.Thread(target=self._read_loop, name="sandbox-zygote", daemon=True)
        self._reader.start()
        atexit.register(self.close)

    def fork(self) -> tuple[int, socket.socket]:
        """A new sandbox process: its pid and our end of its socket. Blocking."""
        if not self._ready.wait(FORK_TIMEOUT) or not self.alive:
            raise SandboxUnavailable("the sandbox fork server did not start")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._lock:
            fork_id = next(self._ids)
            self._forks[fork_id] = future
            try:
                socket.send_fds(
                    self._ctl, [orjson.dumps({"t": "fork", "id": fork_id})], [theirs.fileno()]
                )
            except OSError as exc:
                self._forks.pop(fork_id, None)
                ours.close()
                raise SandboxUnavailable(f"the sandbox fork server is gone: {exc}") from exc
            finally:
                theirs.close()
        try:
            pid = future.result(FORK_TIMEOUT)
        except Exception:
            ours.close()
            raise
        return pid, ours

    def on_exit(self, pid: int, callback: Callable[[int | None], None]) -> None:
        """Call ``callback(exit code)`` (from another thread) once ``pid`` has exited; the
        code is None when the fork server itself died and cannot tell."""
        with self._lock:
            if pid in self._exits:
                code = self._exits.pop(pid)
            elif not self.alive:
                code = None
            else:
                self._watchers[pid] = callback
                return
        callback(code)

    def close(self) -> None:
        self.alive = False
        with contextlib.suppress(OSError):
            self._ctl.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        if self.proc.poll() is None:
            self.proc.kill()

    def _read_loop(self) -> None:
        while True:
            try:
                data = self._ctl.recv(4096)
            except OSError:
                data = b""
            if not data:
                break
            try:
                self._handle(orjson.loads(data))
            except Exception:
                log.exception("bad message from the sandbox fork server")
        self.alive = False
        with self._lock:
            forks, self._forks = self._forks, {}
            watchers, self._watchers = self._watchers, {}
        for future in forks.values():
            future.set_exception(SandboxUnavailable("the sandbox fork server exited"))
        for callback in watchers.values():
            callback(None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(1)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("t")
        if kind == "ready":
            self._ready.set()
        elif kind == "forked":
            with self._lock:
                future = self._forks.pop(int(message["id"]), None)
            if future is not None:
                future.set_result(int(message["pid"]))
        elif kind == "exit":
            pid, code = int(message["pid"]), int(message["code"])
            with self._lock:
                callback = self._watchers.pop(pid, None)
                if callback is None:
                    self._exits[pid] = code
                    while len(self._exits) > _EXITS_REMEMBERED:
                        self._exits.popitem(last=False)
            if callback is not None:
                callback(code)


# -- the fork server process -------------------------------------------------------------------


def _send(ctl: socket.socket, message: dict[str, Any]) -> None:
    ctl.send(orjson.dumps(message))


def reaped() -> Iterator[tuple[int, int]]:
    """The children of this process that have exited, reaped without waiting: (pid, exit
    code as subprocess reports it). A fork server calls it when SIGCHLD wakes it."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, exit_code_of(status)


def _reap(ctl: socket.socket, children: set[int]) -> None:
    for pid, code in reaped():
        children.discard(pid)
        _send(ctl, {"t": "exit", "pid": pid, "code": code})


def main() -> None:  # pragma: no cover - runs in the fork server process
    ctl = socket.socket(fileno=int(sys.argv[1]))
    from nodeloom.sandbox import worker

    worker.preload()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    children: set[int] = set()
    try:
        _send(ctl, {"t": "ready", "pid": os.getpid()})
        while True:
            readable, _, _ = select.select([ctl.fileno(), wake_read], [], [])
            if wake_read in readable:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_read, 512):
                        pass
                _reap(ctl, children)
            if ctl.fileno() not in readable:
                continue
            try:
                data, fds, _flags, _addr = socket.recv_fds(ctl, 4096, 1)
            except ConnectionResetError:
                return  # the server is gone (it closed with data unread)
            if not data:
                return  # the server is gone
            request = orjson.loads(data)
            if request.get("t") != "fork" or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                continue
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    ctl.close()
                    signal.set_wakeup_fd(-1)
                    os.close(wake_read)
                    os.close(wake_write)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    signal.signal(signal.SIGINT, signal.SIG_DFL)
                    code = worker.serve(fds[0])
                finally:
                    os._exit(code)
            os.close(fds[0])
            children.add(pid)
            _send(ctl, {"t": "forked", "id": request["id"], "pid": pid})
    except (BrokenPipeError, ConnectionResetError):
        return  # the server is gone: it stopped before or while we answered
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":  # pragma: no cover
    main()
