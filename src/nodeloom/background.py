"""Background loops of a server process: a pass repeated every few seconds, and stopping it.

A pass that raises is logged and the loop goes on: a database that is away for a moment, or
one bad row, must not end the loop for the life of the process. Each caller gives its own
logger, so a failure is reported under the module whose pass failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import NoReturn


async def every(
    seconds: float,
    one_pass: Callable[[], Awaitable[object]],
    log: logging.Logger,
    failed: str,
    *,
    first_wait: float = 0.0,
) -> NoReturn:
    """Run ``one_pass`` after ``first_wait`` seconds, then ``seconds`` after each pass ends;
    a pass that fails is logged as ``failed`` (with its traceback)."""
    if first_wait:
        await asyncio.sleep(first_wait)
    while True:
        try:
            await one_pass()
        except Exception:
            log.warning(failed, exc_info=True)
        await asyncio.sleep(seconds)


async def cancel_and_wait(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel the tasks (``None``: none started) and wait until each has stopped."""
    started = [task for task in tasks if task is not None]
    for task in started:
        task.cancel()
    for task in started:
        with contextlib.suppress(asyncio.CancelledError):
            await task
