"""Identifiers of the rows written on every run (runs, artifacts): UUIDs version 7.

A version 7 UUID starts with its creation time in milliseconds, then random bits (RFC 9562).
Rows keyed by it are inserted at the end of their indexes, so the rows a burst of runs
writes share a few index pages instead of each landing on a random one: with random
(version 4) ids a run touched seven random leaf pages, and every commit wrote and re-read
that many. They are still canonical UUID strings, unique without coordination, and no less
unguessable than it matters here: reaching a run or an artifact needs a credential either
way, and the time they reveal is their ``created_at``.
"""

from __future__ import annotations

import os
import time
import uuid

_VERSION = 0x7 << 76
_VARIANT = 0b10 << 62


def uuid7() -> str:
    """A new version 7 UUID in canonical form."""
    millis = time.time_ns() // 1_000_000
    random = int.from_bytes(os.urandom(10), "big")  # 80 bits, 74 of them used
    value = (
        (millis & 0xFFFF_FFFF_FFFF) << 80
        | _VERSION
        | (random >> 68) << 64  # 12 bits
        | _VARIANT
        | random & 0x3FFF_FFFF_FFFF_FFFF  # 62 bits
    )
    return str(uuid.UUID(int=value))
