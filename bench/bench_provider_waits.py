"""Provider waits: N runs at once, each waiting S seconds on a (fake) hosted model, on the
embedded default (one ``nodeloom serve``, SQLite).

Each run is TextInput -> ReplicateModelText against a small fake of Replicate's HTTP API
(uvicorn, in its own process, on 127.0.0.1) whose predictions take exactly S seconds. All N
runs are submitted at once; a provider node holds no sandbox process and no execution slot
while it waits (nodes/adapters/policy.py), so all N predictions are in flight together.

Reports: how many predictions the fake saw in flight at once, the overhead of each run over
S (the run's own created -> finished time, minus S: acceptance, polling granularity, the
steps), p50/p99, the wall time for all N, and the server's RSS growth per in-flight run.

    .venv/bin/python bench/bench_provider_waits.py --runs 500 --seconds 2

``--prefer-wait`` makes the node ask for ``Prefer: wait`` (the fake then answers when the
prediction is done) instead of polling. Only ever talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    free_port,
    grant_credits,
    make_account,
    percentile,
    server,
    table,
    write_section,
)

TOKEN = "r8_benchFakeToken0123456789abcdef"


def fake_replicate(port: int, seconds: float) -> None:
    """Replicate's create / get prediction, answering from the clock (no threads per job)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    created: dict[str, float] = {}

    def body(pid: str) -> dict[str, Any]:
        done = time.monotonic() - created[pid] >= seconds
        return {
            "id": pid,
            "status": "succeeded" if done else "processing",
            "output": ["a ", "generated ", "answer"] if done else None,
            "logs": "",
            "error": None,
            "urls": {},
        }

    async def create(request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"detail": "Invalid token."}, 401)
        await request.json()
        pid = uuid.uuid4().hex
        created[pid] = time.monotonic()
        if request.headers.get("prefer", "").startswith("wait"):
            await asyncio.sleep(seconds)
        return JSONResponse(body(pid), 201)

    async def get(request: Request) -> JSONResponse:
        return JSONResponse(body(request.path_params["pid"]))

    async def stats(_request: Request) -> JSONResponse:
        return JSONResponse({"created": sorted(created.values())})

    app = Starlette(
        routes=[
            Route("/v1/models/{owner}/{name}/predictions", create, methods=["POST"]),
            Route("/v1/predictions/{pid}", get),
            Route("/stats", stats),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=4096)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def max_overlap(starts: list[float], seconds: float) -> int:
    """Most predictions running at one moment (each runs ``seconds`` from its start)."""
    best, left = 0, 0
    for right, start in enumerate(starts):
        while starts[left] <= start - seconds:
            left += 1
        best = max(best, right - left + 1)
    return best


def graph(credential: str, prefer_wait: bool) -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {"text": "x"}},
            {
                "id": "gen",
                "type": "ReplicateModelText",
                "position": {"x": 1, "y": 0},
                "data": {
                    "credential": credential,
                    "model": "bench/slow-model",
                    "bindings": {"prompt": "text"},
                    "wait_seconds": 10 if prefer_wait else 0,
                },
            },
        ],
        "edges": [{"id": "e", "source": "in", "target": "gen", "targetHandle": "text"}],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }


async def drive(
    base_url: str, key: str, wf: str, runs: int, timeout: float
) -> tuple[list[float], float, int]:
    """Submit ``runs`` at once; (each run's duration in s, wall time for all, failures)."""
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=60, limits=limits
    ) as http:
        started = time.monotonic()

        async def submit(i: int) -> str:
            # A connection the server closed as idle just as it was reused is retried, with
            # the same Idempotency-Key: the run is accepted once whatever happens.
            key = {"Idempotency-Key": uuid.uuid4().hex}
            for attempt in range(3):
                try:
                    r = await http.post(
                        f"/api/v1/workflows/{wf}/execute", json={"cache": False}, headers=key
                    )
                    break
                except (httpx.ReadError, httpx.RemoteProtocolError):
                    if attempt == 2:
                        raise
            assert r.status_code in (200, 202), r.text
            return str(r.json()["run_id"])

        run_ids = await asyncio.gather(*(submit(i) for i in range(runs)))
        await asyncio.sleep(1.5)
        pending = set(run_ids)
        finished: dict[str, dict[str, Any]] = {}
        while pending and time.monotonic() - started < timeout:

            async def check(run_id: str) -> None:
                r = await http.get(f"/api/v1/workflows/{wf}/runs/{run_id}")
                body = r.json()
                if body["status"] != "running":
                    finished[run_id] = body
                    pending.discard(run_id)

            await asyncio.gather(*(check(r) for r in list(pending)))
            if pending:
                await asyncio.sleep(0.25)
        wall = max(
            (_ts(b["finished_at"]) for b in finished.values() if b["finished_at"]), default=0
        ) - min(_ts(b["created_at"]) for b in finished.values())
        durations = [b["duration_ms"] / 1000 for b in finished.values()]
        failures = sum(b["status"] != "completed" for b in finished.values()) + len(pending)
        return durations, wall, failures


def _ts(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--max-active-runs", type=int, default=600)
    parser.add_argument("--prefer-wait", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    port = free_port()
    fake = mp.get_context("spawn").Process(
        target=fake_replicate, args=(port, args.seconds), daemon=True
    )
    fake.start()
    fake_url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(fake_url + "/stats", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    env = {
        "NODELOOM_HTTP_ALLOWLIST": json.dumps(["127.0.0.1/32"]),
        "NODELOOM_REPLICATE_API_URL": fake_url + "/v1",
        "NODELOOM_MAX_ACTIVE_RUNS": str(args.max_active_runs),
    }
    try:
        with server(env) as srv:
            _jwt, key = make_account(srv.base_url)
            grant_credits(srv.data_dir)
            with httpx.Client(
                base_url=srv.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
            ) as http:
                r = http.post(
                    "/api/v1/credentials",
                    json={"name": "bench", "kind": "replicate", "fields": {"api_token": TOKEN}},
                )
                assert r.status_code == 201, r.text
                wf_body = {"name": "waits", "graph_json": graph(r.json()["id"], args.prefer_wait)}
                wf = http.post("/api/v1/workflows", json=wf_body).json()["id"]
            # Warm-up: a few runs, so first-use costs are not counted.
            asyncio.run(drive(srv.base_url, key, wf, 5, 60))
            time.sleep(0.5)
            idle_mb = srv.rss_mb()
            peak = [idle_mb]
            stop = threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    peak[0] = max(peak[0], srv.rss_mb())
                    time.sleep(0.05)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            cpu_before = cpu_seconds(srv.proc.pid)
            durations, wall, failures = asyncio.run(drive(srv.base_url, key, wf, args.runs, 120))
            cpu_ms = (cpu_seconds(srv.proc.pid) - cpu_before) * 1000 / args.runs
            stop.set()
            sampler.join()
            starts = httpx.get(fake_url + "/stats").json()["created"][5:]
    finally:
        fake.terminate()
        fake.join(5)

    load = os.getloadavg()[0]
    overhead = [d - args.seconds for d in durations]
    in_flight = max_overlap(starts, args.seconds)
    per_run_kb = (peak[0] - idle_mb) * 1024 / args.runs
    rows = [
        (
            args.runs,
            f"{args.seconds:g}",
            "Prefer: wait" if args.prefer_wait else "polling",
            in_flight,
            f"{percentile(overhead, 50):.2f}",
            f"{percentile(overhead, 99):.2f}",
            f"{max(overhead):.2f}",
            f"{wall:.2f}",
            failures,
            f"{per_run_kb:.0f}",
            f"{cpu_ms:.0f}",
        )
    ]
    header = (
        "runs",
        "wait (s)",
        "mode",
        "in flight at once",
        "overhead p50 (s)",
        "p99 (s)",
        "max (s)",
        "wall for all (s)",
        "failed",
        "RSS per in-flight run (KB)",
        "server CPU per run (ms)",
    )
    body = table(rows, header)
    print(body)
    if not args.no_write:
        mode = " --prefer-wait" if args.prefer_wait else ""
        write_section(
            "provider-waits" + ("-prefer-wait" if args.prefer_wait else ""),
            f".venv/bin/python bench/bench_provider_waits.py --runs {args.runs} "
            f"--seconds {args.seconds:g}{mode}",
            "### Provider waits: runs waiting on a hosted model at once (embedded, SQLite)\n\n"
            + body
            + f"\n\nLoad average during the run: {load:.1f} on {os.cpu_count()} cores (other "
            "processes shared the machine). "
            f"Server RSS {idle_mb:.0f} MB idle, {peak[0]:.0f} MB at the peak. "
            "Server CPU per run covers accepting it, its steps and events, and the node's "
            "polls: how many runs a second the server can start is what bounds how many wait "
            "at once, not the waits themselves (which hold no sandbox process or slot); "
            f"NODELOOM_MAX_ACTIVE_RUNS={args.max_active_runs} (the default, 64, drives 64 "
            "runs at once and queues the rest).",
        )
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
