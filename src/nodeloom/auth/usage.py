"""``last_used_at`` for API keys without a write on every request.

Writing the timestamp on each request would turn every read into a write transaction (and
SQLite has one writer). Uses are remembered in memory and written in one batch at most every
``interval`` seconds, so ``last_used_at`` is exact to about a minute.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from nodeloom import background
from nodeloom.db.engine import Database
from nodeloom.db.models import utcnow
from nodeloom.store import api_keys

log = logging.getLogger("nodeloom.auth")


class KeyUsage:
    def __init__(self, db: Database, interval: float = 30.0) -> None:
        self._db = db
        self._interval = interval
        self._pending: dict[str, datetime] = {}
        self._task: asyncio.Task[None] | None = None

    def record(self, key_id: str) -> None:
        first = not self._pending
        self._pending[key_id] = utcnow()
        if first and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        try:
            await asyncio.sleep(self._interval)
            await self.flush()
        finally:
            self._task = None

    async def flush(self) -> None:
        pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            await self._db.write(lambda c: api_keys.touch(c, pending))
        except Exception:  # a lost timestamp must never fail a request or shutdown
            log.warning("could not record API key use", exc_info=True)

    async def close(self) -> None:
        await background.cancel_and_wait(self._task)
        await self.flush()
