"""Progress reports become events at most once a second per node, and the last one (1.0)
always: one rule for both executors (``stepper.Throttle``), checked on a clock the test
moves."""

from __future__ import annotations

from nodeloom.engine.stepper import PROGRESS_INTERVAL, Throttle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TestThrottle:
    def test_one_report_per_interval_per_node_and_always_the_last(self) -> None:
        clock = Clock()
        throttle = Throttle(clock=clock)
        assert throttle.due("a", 0.1)  # the first report of a node
        assert not throttle.due("a", 0.2)
        assert throttle.due("b", 0.1)  # another node has its own interval
        clock.now += PROGRESS_INTERVAL / 2
        assert not throttle.due("a", 0.5)
        assert throttle.due("a", 1.0)  # done: always shown
        assert throttle.due("a", 1.0)
        clock.now += PROGRESS_INTERVAL
        assert throttle.due("a", 0.3)

    def test_a_forgotten_node_starts_afresh(self) -> None:
        throttle = Throttle(clock=Clock())
        assert throttle.due(("run", "a"), 0.1)
        assert not throttle.due(("run", "a"), 0.2)
        throttle.forget(("run", "a"))
        assert throttle.due(("run", "a"), 0.2)
