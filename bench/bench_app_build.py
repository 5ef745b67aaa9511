"""What one app costs to build, start, answer its first request and stop (issue #38, ADR 0047).

    .venv/bin/python -m bench.bench_app_build [--apps 30] [--write]

Builds ``--apps`` apps one after another in this process, each as tests/conftest.py does: the
test settings (a fresh data directory holding a copy of one migrated SQLite file), then
``create_app``, the lifespan started, one ``GET /healthz`` over httpx's ASGI transport (the
first request is where FastAPI builds the routes it has not built yet), the lifespan stopped.
Reports the median CPU time of the process (``time.process_time``, every thread: the database
threads too) and wall time of each step, after one app to warm up. ``--write`` updates the
``app-build`` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.common import table, write_section
from nodeloom.api.app import create_app
from nodeloom.db.migrate import upgrade
from nodeloom.settings import Settings

STEPS = ("create_app", "lifespan start", "first request", "lifespan stop")


class _Clock:
    """CPU and wall time of each step of one app."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self._cpu = time.process_time()
        self._wall = time.perf_counter()

    def lap(self, step: str) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        self.cpu[step], self.wall[step] = cpu - self._cpu, wall - self._wall
        self._cpu, self._wall = cpu, wall


async def _one(settings: Callable[[], Settings]) -> _Clock:
    chosen = settings()
    clock = _Clock()
    app = create_app(chosen)
    clock.lap("create_app")
    async with app.router.lifespan_context(app):
        clock.lap("lifespan start")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            assert (await c.get("/healthz")).status_code == 200
        clock.lap("first request")
    clock.lap("lifespan stop")
    return clock


async def _measure(apps: int, settings: Callable[[], Settings]) -> list[_Clock]:
    await _one(settings)  # imports, the process-wide caches
    return [await _one(settings) for _ in range(apps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apps", type=int, default=30)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template.db"
        upgrade(f"sqlite+aiosqlite:///{template}")

        def settings() -> Settings:
            data = Path(tempfile.mkdtemp(dir=tmp))
            shutil.copy(template, data / "nodeloom.db")
            return Settings(
                data_dir=data, secret_key="bench-" + "x" * 40, base_url="http://testserver"
            ).prepare()

        clocks = asyncio.run(_measure(args.apps, settings))
    rows = []
    for step in STEPS:
        cpu = statistics.median(c.cpu[step] for c in clocks) * 1000
        wall = statistics.median(c.wall[step] for c in clocks) * 1000
        rows.append((step, f"{cpu:.1f}", f"{wall:.1f}"))
    cpu_total = statistics.median(sum(c.cpu.values()) for c in clocks) * 1000
    wall_total = statistics.median(sum(c.wall.values()) for c in clocks) * 1000
    rows.append(("**one app, all steps**", f"**{cpu_total:.1f}**", f"**{wall_total:.1f}**"))
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    body = (
        f"### One app: build, start, first request, stop ({args.apps} apps, medians; "
        f"load average {load})\n\n" + table(rows, ("step", "CPU ms", "wall ms"))
    )
    print(body)
    if args.write:
        write_section(
            "app-build", f".venv/bin/python -m bench.bench_app_build --apps {args.apps}", body
        )


if __name__ == "__main__":
    main()
