"""Every process's view of its ComfyUI fleets, shared through Redis.

A prompt is routed by the process that runs its node: scaled out, a worker, which serves no
HTTP. So each process with fleets writes what it sees (``comfyui_fleet.snapshot``: per
server, in flight, queue, up, draining, failures, last seen) every ``REPORT_SECONDS`` into
one Redis hash, a field per process; ``/metrics`` and the operator page of any API replica
read the other processes' fields no older than ``STALE_AFTER`` (a worker that stopped
without a word is dropped then). Without Redis (one process, or processes linked only by
the database) a process shows only its own fleets.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

import orjson

from nodeloom import background
from nodeloom.nodes.adapters import comfyui_fleet
from nodeloom.settings import ComfyUIServer

if TYPE_CHECKING:
    from redis.asyncio import Redis

KEY = "nodeloom:comfyui:fleet-reports"
REPORT_SECONDS = 5.0
STALE_AFTER = 3 * REPORT_SECONDS

Report = list[dict[str, Any]]


class FleetReports:
    """This process's report (written while it has fleets) and the others' (read)."""

    def __init__(self, redis_url: str | None, process: str) -> None:
        self.process = process
        self.redis: Redis | None = None
        self._failures: tuple[type[Exception], ...] = (OSError,)
        if redis_url:
            # redis-py is imported only where Redis is configured: an embedded server never
            # loads it.
            from redis.asyncio import Redis
            from redis.exceptions import RedisError

            from nodeloom.redis_options import client_options

            self.redis = Redis.from_url(redis_url, **client_options())
            self._failures = (RedisError, OSError)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.redis is not None:
            self._task = asyncio.create_task(self._report_forever(), name="comfyui-reports")

    async def stop(self) -> None:
        await background.cancel_and_wait(self._task)
        if self.redis is not None:
            with contextlib.suppress(*self._failures):
                await self.redis.hdel(KEY, self.process)
            await self.redis.aclose()

    async def report(self) -> None:
        """Write this process's servers now (nothing while it has no fleet)."""
        rows = comfyui_fleet.snapshot()
        if self.redis is None or not rows:
            return
        body = orjson.dumps({"at": time.time(), "servers": rows})
        with contextlib.suppress(*self._failures):
            await self.redis.hset(KEY, self.process, body)

    async def _report_forever(self) -> None:
        while True:
            await self.report()
            await asyncio.sleep(REPORT_SECONDS)

    async def others(self) -> dict[str, Report]:
        """The other processes' latest reports, by process (stale ones removed)."""
        if self.redis is None:
            return {}
        try:
            fields = await self.redis.hgetall(KEY)
        except self._failures:
            return {}
        found: dict[str, Report] = {}
        stale: list[bytes | str] = []
        now = time.time()
        for process, body in fields.items():
            name = process.decode() if isinstance(process, bytes) else process
            if name == self.process:
                continue
            try:
                data = orjson.loads(body)
                at, servers = float(data["at"]), list(data["servers"])
            except (ValueError, KeyError, TypeError):
                stale.append(process)
                continue
            if now - at > STALE_AFTER:
                stale.append(process)
            else:
                found[name] = servers
        if stale:
            with contextlib.suppress(*self._failures):
                await self.redis.hdel(KEY, *stale)
        return found


def fleet_servers(
    fleet: str,
    specs: list[ComfyUIServer],
    reports: list[Report],
    drained: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
) -> list[dict[str, Any]]:
    """The servers of ``fleet`` (``pool`` or ``credential:<id>``) as configured (``specs``),
    with what the processes' ``reports`` (this one's included) say of them together: prompts
    in flight and failures summed over the processes, the longest queue, the latest answer,
    answering if a process found it so at its last check (None: no process has used the
    fleet yet). ``drained``: the servers drained with the Drain button, as (fleet, URL)."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        for row in report:
            if row.get("fleet") == fleet:
                seen.setdefault(str(row.get("url")), []).append(row)
    servers = []
    for spec in specs:
        rows = seen.get(spec.base_url, [])
        times = [float(r["last_seen"]) for r in rows if isinstance(r.get("last_seen"), int | float)]
        servers.append(
            {
                "id": comfyui_fleet.server_id(fleet, spec.base_url),
                "name": spec.label,
                "base_url": spec.base_url,
                "max_in_flight": spec.max_in_flight,
                "draining": spec.draining or (fleet, spec.base_url) in drained,
                "drain_configured": spec.draining,
                "answering": any(bool(r.get("up")) for r in rows) if rows else None,
                "in_flight": sum(int(r.get("in_flight") or 0) for r in rows),
                "queue": max((int(r.get("queue") or 0) for r in rows), default=0),
                "failures": sum(int(r.get("failures") or 0) for r in rows),
                "last_seen": max(times) if times else None,
                "processes": len(rows),
            }
        )
    return servers
