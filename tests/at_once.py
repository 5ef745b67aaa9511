"""Processes that start together, as the children of ``serve --processes N`` do."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

OPENED = "opened"


def _child(open_: Callable[[], object], start: Any, answers: Any) -> None:
    start.wait()
    try:
        open_()
    except Exception as error:
        answers.put(repr(error))
    else:
        answers.put(OPENED)


def at_once(open_: Callable[[], object], processes: int = 2) -> list[str]:
    """``open_`` called by ``processes`` forked processes at the same moment: what each
    answered, ``OPENED`` or the error it raised."""
    context = multiprocessing.get_context("fork")
    start, answers = context.Barrier(processes), context.Queue()
    children = [
        context.Process(target=_child, args=(open_, start, answers)) for _ in range(processes)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
    return [answers.get(timeout=5) for _ in children]
