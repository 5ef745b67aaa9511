"""``nodeloom serve --processes N``: N server processes on one port, for both cores.

One Python process runs HTTP parsing, request handling and the executor's steps on one core;
the second core idles. Each child here is a whole ``nodeloom serve``: it accepts connections
on the one listening socket the supervisor bound, accepts runs, and drives the runs it
accepted, exactly as two plain ``serve``s sharing one database do (engine/dispatch/local.py:
a run has one live driver; the others adopt it if that driver dies). What the children must
share, they share through files next to the database: the events (each reads the others'
from the log, events/links.py ``PollingBus``) and the rate-limit windows
(ratelimit_shared.py), so a WebSocket on one child sees a run another drives, and a limit of
100 a minute stays 100.

One socket shared by all children rather than one ``SO_REUSEPORT`` socket each: with
``SO_REUSEPORT`` the connections waiting in a killed child's own accept queue are reset
(seen in tests/topology/test_processes.py), and its replacement starts with an empty queue;
with one shared queue a crash loses only the requests the dead child was serving. The first
child to wake takes every connection waiting, though, so the children keep their shares of
the keep-alive connections even by closing their surplus (api/balance.py).

This process is only the supervisor: it migrates the database once, sets up the shared
rate-limit file, binds the port, starts the children, starts a child again if it dies (its
runs are adopted by a sibling meanwhile), and on SIGTERM or Ctrl-C passes one SIGTERM to
each child (each drains as a single server does), a second signal stopping them at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import MutableSequence
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import cast

from nodeloom import logs, ratelimit_shared
from nodeloom.api.balance import ConnectionShare
from nodeloom.settings import Settings

log = logging.getLogger("nodeloom")

# A child that dies this soon after its start, this many times in a row, is not started
# again: something is wrong that restarting cannot fix (a taken port, a bad setting).
EARLY_DEATH_SECONDS = 10.0
EARLY_DEATHS_TOLERATED = 3
_PR_SET_PDEATHSIG = 1


def per_process(settings: Settings) -> Settings:
    """A child's settings: budgets that are the whole server's are divided among the
    children, so N processes use what one would."""
    n = settings.processes
    if n <= 1:
        return settings
    slots_share = settings.sandbox_slots_per_account
    memory_share = settings.sandbox_memory_mb_per_account
    return settings.model_copy(
        update={
            "max_concurrent_nodes": max(1, settings.max_concurrent_nodes // n),
            "sandbox_processes": max(1, settings.sandbox_processes // n),
            "sandbox_memory_mb": max(256, settings.sandbox_memory_mb // n),
            # An account's shares (when set; else derived from the divided totals).
            "sandbox_slots_per_account": slots_share and max(1, slots_share // n),
            "sandbox_memory_mb_per_account": memory_share and max(64, memory_share // n),
        }
    )


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _die_with_parent() -> None:
    """Linux: SIGTERM this child if the supervisor dies (even by SIGKILL), so no server is
    left listening on the port without anyone to stop it."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _child(
    sock: socket.socket,
    host: str,
    port: int,
    executes: bool,
    parent: int,
    counts: MutableSequence[int],
    index: int,
) -> None:
    # Its own process group: a Ctrl-C in the terminal reaches the supervisor only, which
    # passes exactly one SIGTERM on (two would mean "stop now" to a draining server).
    os.setpgrp()
    _die_with_parent()
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        return
    from nodeloom.api.serving import serve

    settings = per_process(Settings().prepare())
    logs.configure(settings.log_level)  # a spawned child starts with logging unconfigured
    serve(settings, host, port, executes=executes, sock=sock, share=ConnectionShare(counts, index))


class Supervisor:
    def __init__(self, settings: Settings, host: str, port: int, *, executes: bool) -> None:
        self.settings = settings
        self.host = host
        self.port = port
        self.executes = executes
        self.count = settings.processes
        self._context = multiprocessing.get_context("spawn")
        self._children: list[BaseProcess | None] = [None] * self.count
        self._started_at = [0.0] * self.count
        self._early_deaths = 0
        self._signals = 0
        self._socket: socket.socket | None = None
        # Connections held by each child (api/balance.py), in memory they all share.
        self._counts = cast(MutableSequence[int], self._context.Array("i", self.count, lock=False))

    def run(self) -> int:
        # Children read their settings from the environment, as the supervisor did.
        os.environ["NODELOOM_PROCESSES"] = str(self.count)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        if not self.settings.redis_url:  # else the children count in Redis
            # Before any child opens it: children setting a new file up at once can fail.
            ratelimit_shared.prepare(ratelimit_shared.windows_file(self.settings.data_dir))
        self._socket = listening_socket(self.host, self.port)
        for index in range(self.count):
            self._start(index)
        log.info(
            "Nodeloom serves http://%s:%d with %d processes (pids %s)",
            self.host,
            self.port,
            self.count,
            ", ".join(str(c.pid) for c in self._children if c is not None),
        )
        failed = False
        while self._signals == 0:
            time.sleep(0.2)
            for index, child in enumerate(self._children):
                if child is None or child.is_alive() or self._signals:
                    continue
                if time.monotonic() - self._started_at[index] < EARLY_DEATH_SECONDS:
                    self._early_deaths += 1
                else:
                    self._early_deaths = 0
                if self._early_deaths >= EARLY_DEATHS_TOLERATED:
                    log.error("server processes keep exiting at start; stopping")
                    failed = True
                    self._pass_on(signal.SIGTERM)
                    break
                log.warning(
                    "server process %s exited (code %s); starting another",
                    child.pid,
                    child.exitcode,
                )
                self._start(index)
            if failed:
                break
        self._wait_for_children()
        self._socket.close()
        return 1 if failed else 0

    def _start(self, index: int) -> None:
        child = self._context.Process(
            target=_child,
            args=(
                self._socket,
                self.host,
                self.port,
                self.executes,
                os.getpid(),
                self._counts,
                index,
            ),
            name=f"nodeloom-serve-{index}",
        )
        self._counts[index] = 0  # a dead child's connections died with it
        child.start()
        self._children[index] = child
        self._started_at[index] = time.monotonic()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        # First signal: each child drains as one server does. Second: each stops now.
        self._pass_on(signal.SIGTERM)

    def _pass_on(self, signum: int) -> None:
        for child in self._children:
            if child is not None and child.pid is not None and child.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)

    def _wait_for_children(self) -> None:
        deadline = time.monotonic() + self.settings.shutdown_grace_seconds + 30
        for child in self._children:
            if child is None:
                continue
            child.join(max(0.0, deadline - time.monotonic()))
            if child.is_alive():
                log.warning("server process %s did not stop; killing it", child.pid)
                child.kill()
                child.join(5)
