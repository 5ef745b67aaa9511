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

RECANCEL_SECONDS = 1.0


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
    """Cancel the tasks (``None``: none started) and wait until each has stopped.

    A task still running ``RECANCEL_SECONDS`` after its cancel is cancelled again: on Python
    3.11 a cancel can be lost (``asyncio.wait_for`` returns its inner result when that
    completes as the cancel lands, and a loop then goes on to its next pass), and a stop
    that waited on such a task once hung until the test's 300-s timeout."""
    started = [task for task in tasks if task is not None]
    pending = {task for task in started if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
    for task in started:
        with contextlib.suppress(asyncio.CancelledError):
            await task
