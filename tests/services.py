"""Optional local services (PostgreSQL, Redis): skipped with a reason when absent, a failure
when NODELOOM_REQUIRE_SERVICES=1 (as in CI)."""

from __future__ import annotations

import os
import socket

import pytest

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
