"""A process of the scaled-out fleet stops as soon as it has nothing to wait for: its
Procrastinate workers are asked to stop, never left running until the shutdown grace is
over. Stopping right after starting is where that went wrong: a cancel that landed while a
worker was still starting could be swallowed, and one stop in about thirty took the whole
grace plus its margin (25 s) with nothing running."""

from __future__ import annotations

import time

import pytest

from nodeloom.settings import Settings
from tests.conftest import started_app


@pytest.fixture(params=["postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"shutdown_grace_seconds": 20}


async def test_a_process_with_nothing_running_stops_at_once_every_time(
    settings: Settings,
) -> None:
    slowest = 0.0
    for _ in range(40):
        async with started_app(settings):
            started = time.monotonic()
        slowest = max(slowest, time.monotonic() - started)
    # Nothing ran, so nothing is waited for: far below the 20 s grace on any machine.
    assert slowest < 8, f"a stop took {slowest:.1f} s"
