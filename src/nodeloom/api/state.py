"""Everything a request handler may need, built once by create_app and kept on app.state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodeloom.auth.usage import KeyUsage
from nodeloom.db.engine import Database
from nodeloom.nodes.registry import Registry
from nodeloom.ratelimit import RateLimiter
from nodeloom.settings import Settings


@dataclass
class AppContext:
    settings: Settings
    db: Database
    registry: Registry
    limiter: RateLimiter
    key_usage: KeyUsage
    extras: dict[str, Any] = field(default_factory=dict)
