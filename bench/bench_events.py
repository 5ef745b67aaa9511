"""Event delivery under load: one ``nodeloom serve``, N WebSocket subscribers spread over a few
client processes (each subscribed to one of W workflows), runs fired at a fixed rate.

Measures delivery latency (event ``ts``, recorded at commit, to client receipt; ``ts`` has
millisecond resolution, so figures carry up to 1 ms of truncation) and server memory per idle
connection (RSS delta after opening N sockets / N).

    .venv/bin/python bench/bench_events.py --subscribers 1000 --rate 50 --seconds 20

Only ever talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import random
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import grant_credits, make_account, percentile, server

GRAPH = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {"text": "hi"}},
        {
            "id": "tpl",
            "type": "TextTemplate",
            "position": {"x": 1, "y": 0},
            "data": {"template": "{{ text }}!"},
        },
    ],
    "edges": [{"id": "e", "source": "in", "target": "tpl"}],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def _client(
    ws_url: str,
    token: str,
    workflows: list[str],
    count: int,
    offset: int,
    compression: bool,
    ready: Any,
    stop: Any,
    results: Any,
) -> None:
    from websockets.asyncio.client import connect

    latencies: list[float] = []
    received = 0

    async def one(i: int) -> None:
        nonlocal received
        wf = workflows[(offset + i) % len(workflows)]
        async with connect(
            f"{ws_url}?token={token}",
            compression="deflate" if compression else None,
            open_timeout=60,
            close_timeout=1,
        ) as ws:
            await ws.send(orjson.dumps({"type": "subscribe", "workflow_id": wf}).decode())
            assert orjson.loads(await ws.recv())["type"] == "subscribed"
            opened.append(1)
            async for raw in ws:
                now = time.time()
                msg = orjson.loads(raw)
                if "seq" in msg:
                    received += 1
                    latencies.append(now - _ts(msg["ts"]))

    opened: list[int] = []
    tasks = []
    for i in range(count):
        tasks.append(asyncio.create_task(one(i)))
        if i % 50 == 49:
            await asyncio.sleep(0.05)  # don't SYN-flood the listen backlog
    while len(opened) < count:
        failed = [t for t in tasks if t.done()]
        if failed:
            failed[0].result()
        await asyncio.sleep(0.1)
    ready.put(count)
    while stop.empty():
        await asyncio.sleep(0.1)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    results.put((received, latencies))


def client_process(*args: Any) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_client(*args))


async def fire(base_url: str, key: str, workflows: list[str], rate: float, seconds: float) -> int:
    fired = 0
    async with httpx.AsyncClient(
        base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        start = time.monotonic()
        pending: set[asyncio.Task[httpx.Response]] = set()
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(elapsed * rate) + 1
            while fired < due:
                wf = random.choice(workflows)
                pending.add(
                    asyncio.create_task(
                        http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False})
                    )
                )
                fired += 1
            await asyncio.sleep(0.005)
        for response in await asyncio.gather(*pending):
            assert response.status_code == 202, response.text
    return fired


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--workflows", type=int, default=100)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--rate", type=float, default=50.0, help="runs per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--compression", action="store_true", help="permessage-deflate on")
    args = parser.parse_args()

    with server() as srv:
        jwt, key = make_account(srv.base_url)
        grant_credits(srv.data_dir)
        with httpx.Client(
            base_url=srv.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as http:
            workflows = [
                http.post("/api/v1/workflows", json={"name": f"w{i}", "graph_json": GRAPH}).json()[
                    "id"
                ]
                for i in range(args.workflows)
            ]
            # Warm up (imports, caches) before measuring memory.
            for wf in workflows[:5]:
                http.post(f"/api/v1/workflows/{wf}/execute", json={"cache": False})
        time.sleep(1)
        rss_before = srv.rss_mb()

        ctx = mp.get_context("spawn")
        ready, stop, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
        ws_url = srv.base_url.replace("http://", "ws://") + "/api/v1/ws"
        per = args.subscribers // args.processes
        procs = [
            ctx.Process(
                target=client_process,
                args=(ws_url, jwt, workflows, per, p * per, args.compression, ready, stop, results),
            )
            for p in range(args.processes)
        ]
        for proc in procs:
            proc.start()
        opened = sum(ready.get(timeout=120) for _ in procs)
        time.sleep(2)
        rss_idle = srv.rss_mb()
        per_conn_kb = (rss_idle - rss_before) * 1024 / opened

        started = time.monotonic()
        fired = asyncio.run(fire(srv.base_url, key, workflows, args.rate, args.seconds))
        fire_seconds = time.monotonic() - started
        time.sleep(3)
        peak = srv.peak_rss_mb()
        for _ in procs:
            stop.put(1)
        received = 0
        latencies: list[float] = []
        for _ in procs:
            got, lat = results.get(timeout=60)
            received += got
            latencies.extend(lat)
        for proc in procs:
            proc.join(10)

    subs_per_wf = opened / args.workflows
    expected = round(fired * 6 * subs_per_wf)
    ms = sorted(v * 1000 for v in latencies)
    print(f"subscribers {opened} over {args.workflows} workflows, {args.processes} client procs")
    print(f"compression {'deflate' if args.compression else 'off'}")
    print(f"runs fired {fired} in {fire_seconds:.1f}s ({fired / fire_seconds:.1f}/s)")
    print(f"events delivered {received} (expected ~{expected}), {received / fire_seconds:.0f}/s")
    if ms:
        print(
            f"latency ms p50 {percentile(ms, 50):.1f} p99 {percentile(ms, 99):.1f} max {ms[-1]:.1f}"
        )
    print(
        f"server RSS before {rss_before:.1f} MB, idle with sockets {rss_idle:.1f} MB, "
        f"peak {peak:.1f} MB -> {per_conn_kb:.1f} KB per idle connection"
    )


if __name__ == "__main__":
    main()
