"""Stopping a background loop (``background.cancel_and_wait``) ends it even when the loop
lost its first cancel, as a pass inside ``asyncio.wait_for`` can on Python 3.11."""

from __future__ import annotations

import asyncio

from nodeloom import background


async def test_a_loop_that_lost_its_cancel_is_cancelled_again() -> None:
    passes = 0

    async def loop_losing_one_cancel() -> None:
        nonlocal passes
        lost = False
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost = True  # what a swallowed cancel looks like to the loop: it goes on
            passes += 1

    task = asyncio.create_task(loop_losing_one_cancel())
    while passes == 0:
        await asyncio.sleep(0.01)
    stopping = asyncio.create_task(background.cancel_and_wait(task, None))
    # Waited on from outside: cancelling the stop itself would cancel the loop a second time.
    await asyncio.wait({stopping}, timeout=10)
    stopped = stopping.done()
    if not stopped:
        task.cancel()
        await asyncio.wait({stopping})
    assert stopped, "the loop that lost its cancel was never cancelled again"
    assert task.cancelled()


async def test_an_error_of_the_task_still_reaches_the_caller() -> None:
    async def fails_when_cancelled() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(fails_when_cancelled())
    await asyncio.sleep(0)
    try:
        await background.cancel_and_wait(task)
    except RuntimeError as exc:
        assert str(exc) == "cleanup failed"
    else:
        raise AssertionError("the task's error was lost")
