"""Servers drained with the Drain button, as every process that routes prompts sees them.

The drain is a row in ``comfyui_drains`` (store/comfyui_drains.py), written by whichever API
replica took the click; the prompts are routed by whichever process runs the node (scaled
out, a worker). So each process reads the table when it starts and again every
``comfyui_check_seconds`` (the fleets' health-check interval), and hands it to its fleets
(``comfyui_fleet.set_drained``). The replica that wrote the row reads it at once. A drain
thus holds across replicas, workers and restarts, and reaches every process within one
interval: a worker may hand a drained server one more prompt in that time, never after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nodeloom.db.engine import Database
from nodeloom.nodes.adapters import comfyui_fleet
from nodeloom.settings import Settings
from nodeloom.store import comfyui_drains

log = logging.getLogger("nodeloom.comfyui")


class DrainFeed:
    """Follows ``comfyui_drains`` for this process's fleets (on the loop it started on)."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            await self.poll()
        except Exception:  # the database may still be migrating: the next poll reads it
            log.warning("could not read the drained ComfyUI servers", exc_info=True)
        self._task = asyncio.create_task(self._follow(), name="comfyui-drains")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def poll(self) -> None:
        """Read the table now and tell this loop's fleets."""
        comfyui_fleet.set_drained(await self.db.read(comfyui_drains.drained))

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self.settings.comfyui_check_seconds)
            try:
                await self.poll()
            except Exception:
                log.warning("could not read the drained ComfyUI servers", exc_info=True)
