"""A real ``nodeloom serve`` process on 127.0.0.1 for tests that need one (crash recovery,
WebSockets over a real socket). Always stopped by its own PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ChildProcess:
    """A process the tests started, ended by its own PID."""

    proc: subprocess.Popen[bytes] | None

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
    def __init__(
        self, data_dir: Path, env: dict[str, str] | None = None, args: list[str] | None = None
    ) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.args = args or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / f"server-{self.port}.log"

    # A loaded 2-core machine (a suite beside other work) took over 30 s to import and start.
    def start(self, timeout: float = 90.0) -> None:
        env = {
            **os.environ,
            "NODELOOM_DATA_DIR": str(self.data_dir),
            "NODELOOM_BASE_URL": self.base_url,
            **self.extra_env,
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nodeloom.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *self.args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
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


class WorkerProcess(ChildProcess):
    """A real ``nodeloom worker`` (PostgreSQL queue), started and stopped by its own PID."""

    def __init__(self, data_dir: Path, env: dict[str, str], concurrency: int = 4) -> None:
        self.data_dir = data_dir
        self.env = env
        self.concurrency = concurrency
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / f"worker-{id(self)}.log"

    def start(self, timeout: float = 90.0) -> None:  # as ServerProcess.start
        env = {**os.environ, "NODELOOM_DATA_DIR": str(self.data_dir), **self.env}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "nodeloom.cli", "worker"),
                    *("--concurrency", str(self.concurrency)),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
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
