"""Optional local services (PostgreSQL, Redis): skipped with a reason when absent, a failure
when NODELOOM_REQUIRE_SERVICES=1 (as in CI)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.server import free_port

POSTGRES_HOST, POSTGRES_PORT = "127.0.0.1", 5432
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
POSTGRES_ADMIN_URL = os.environ.get(
    "NODELOOM_TEST_POSTGRES_URL",
    f"postgresql+asyncpg://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/test",
)
REDIS_URL = os.environ.get("NODELOOM_TEST_REDIS_URL", f"redis://{REDIS_HOST}:{REDIS_PORT}/0")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require(name: str, host: str, port: int) -> None:
    if _reachable(host, port):
        return
    reason = f"{name} is not reachable on {host}:{port}"
    if os.environ.get("NODELOOM_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} and NODELOOM_REQUIRE_SERVICES=1", pytrace=False)
    pytest.skip(f"{reason} (set NODELOOM_REQUIRE_SERVICES=1 to make this a failure)")


def require_postgres() -> None:
    require("PostgreSQL", POSTGRES_HOST, POSTGRES_PORT)


def require_redis() -> None:
    require("Redis", REDIS_HOST, REDIS_PORT)


class RedisServer:
    """A redis-server of this test's own on a free port, so it can be restarted mid-load
    without touching anyone else's Redis."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                *("redis-server", "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(self.directory)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError):
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


def redis_server_available() -> None:
    if shutil.which("redis-server") is None:
        if os.environ.get("NODELOOM_REQUIRE_SERVICES") == "1":
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
