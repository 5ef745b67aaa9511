"""A real ``nodeloom serve`` process on 127.0.0.1 for tests that need one (crash recovery,
WebSockets over a real socket). Always stopped by its own PID."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.launcher import Launched, launch

# The processes tests start are the ones tests kill: their nodes should come back soon after.
QUICK_RECOVERY = {"NODELOOM_WORKER_STALLED_SECONDS": "5"}

# Ports handed to processes that bind them later. The suite runs in several pytest-xdist
# workers at once: a port the kernel picks for ``bind(0)`` and this process then lets go
# could be picked again by another worker before the child binds it, and a health check
# would then reach the other worker's server. So each worker takes its ports from a range
# of its own, below the kernel's ephemeral range (32768 and up), which client sockets use.
_PORTS_PER_WORKER = 1500
_FIRST_PORT = 18000


def _port_candidates() -> Iterator[int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    first = _FIRST_PORT + (index % 9) * _PORTS_PER_WORKER
    # From a random point of the range: a second suite on the machine (another checkout, a
    # benchmark's servers) would otherwise walk the same ports in the same order as this one
    # and pick a port this worker has checked and not yet bound.
    start = random.randrange(_PORTS_PER_WORKER)
    ring = [*range(first + start, first + _PORTS_PER_WORKER), *range(first, first + start)]
    while True:
        yield from ring


_candidates = _port_candidates()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, of this worker's own range."""
    for _ in range(_PORTS_PER_WORKER):
        port = next(_candidates)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in this test worker's range")


class ChildProcess:
    """A process the tests started, ended by its own PID."""

    proc: subprocess.Popen[bytes] | Launched | None

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers, exactly like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (a graceful shutdown), then SIGKILL if it is not over in 30 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class ServerProcess(ChildProcess):
    """A real ``nodeloom serve``. ``fresh``: in an interpreter of its own, not forked from
    the launcher (tests/launcher.py), for a test that must see packages installed after the
    launcher started or that checks what a start imports."""

    def __init__(
        self,
        data_dir: Path,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.args = args or []
        # The interpreter reads PYTHON* variables (PYTHONPATH) when it starts: only a fresh one
        # would see them.
        self.fresh = fresh or any(name.startswith("PYTHON") for name in self.extra_env)
        self.proc = None
        self.log_path = data_dir / f"server-{self.port}.log"

    # A loaded 2-core machine (a suite beside other work) took over 30 s to import and start.
    def start(self, timeout: float = 90.0) -> None:
        env = {
            **os.environ,
            "NODELOOM_DATA_DIR": str(self.data_dir),
            "NODELOOM_BASE_URL": self.base_url,
            **QUICK_RECOVERY,
            **self.extra_env,
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = ["serve", "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        self.proc = _start(args, env, self.log_path, fresh=self.fresh)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early: {self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not become healthy: {self.log_path.read_text()}")


def _start(
    args: list[str], env: dict[str, str], log_path: Path, *, fresh: bool
) -> subprocess.Popen[bytes] | Launched:
    """``nodeloom ARGS`` with ``env``, its output appended to ``log_path``."""
    with log_path.open("ab") as log:
        if not fresh:
            return launch(args, env, stdout=log)
        return subprocess.Popen(
            [sys.executable, "-m", "nodeloom.cli", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


class WorkerProcess(ChildProcess):
    """A real ``nodeloom worker`` (PostgreSQL queue), started and stopped by its own PID."""

    def __init__(self, data_dir: Path, env: dict[str, str], concurrency: int = 4) -> None:
        self.data_dir = data_dir
        self.env = env
        self.concurrency = concurrency
        self.proc = None
        self.log_path = data_dir / f"worker-{id(self)}.log"

    def start(self, timeout: float = 90.0) -> None:  # as ServerProcess.start
        env = {
            **os.environ,
            "NODELOOM_DATA_DIR": str(self.data_dir),
            **QUICK_RECOVERY,
            **self.env,
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = ["worker", "--concurrency", str(self.concurrency)]
        self.proc = _start(args, env, self.log_path, fresh=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early: {self.log_path.read_text()}")
            if "nodes at once" in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"worker did not start: {self.log_path.read_text()}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid
