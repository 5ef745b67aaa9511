"""How every Redis client of ours connects.

A Redis restart leaves each pooled connection dead. redis-py only retries a command on a
fresh connection for the error types listed in ``retry_on_error``; with none listed, the
first request after a restart fails even though Redis is back. Listing the connection errors
makes a restart invisible to clients once Redis answers again.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


def client_options() -> dict[str, Any]:
    return {
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=3),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "socket_connect_timeout": 2,
        "health_check_interval": 30,
    }
