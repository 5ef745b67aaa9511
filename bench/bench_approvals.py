"""Runs waiting for a person: N runs at once, each stopped at an Approval node, on the
embedded default (one ``nodeloom serve``, SQLite).

Each run is TextInput -> Approval -> TextTemplate (on ``approved``). All N runs are
submitted (``--clients`` connections); the bench waits until the inbox counts N pending
approvals, then approves them all, oldest first, ``--clients`` at a time, and reads every
run back when none is running.

Reports: how long N runs took to reach their approval; the server's RSS idle and with N
runs waiting (the growth per waiting run); the server's CPU while the N waited for
``--idle`` seconds (a waiting node re-reads its approval every 10 s); and, from the server's
own timestamps, the delay from each decision (``decided_at``) to the next node's start
(``started_at`` of the TextTemplate), p50/p99/max. A waiting node holds no execution slot and
no sandbox process; embedded, its run keeps its driver slot, so ``NODELOOM_MAX_ACTIVE_RUNS``
is raised above N.

    .venv/bin/python -m bench.bench_approvals --runs 10000

Only ever talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    grant_credits,
    make_account,
    percentile,
    proc_stat,
    rss_mb,
    server,
    table,
    write_section,
)

GRAPH: dict[str, Any] = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {
            "id": "gate",
            "type": "Approval",
            "position": {"x": 200, "y": 0},
            "data": {"prompt": "Ship it?", "timeout_seconds": 86400},
        },
        {
            "id": "after",
            "type": "TextTemplate",
            "position": {"x": 400, "y": 0},
            "data": {"template": "approved: {{ text }}"},
        },
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "gate"},
        {"id": "e2", "source": "gate", "sourceHandle": "approved", "target": "after"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}


def _cpu_seconds(pids: list[int]) -> float:
    return sum(stat[1] for pid in pids if (stat := proc_stat(pid)) is not None)


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def _sent(http: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> httpx.Response:
    """``method url``, sent again (three tries in all) when the connection fails: every request
    of this bench is safe to repeat (an execute carries its Idempotency-Key, a second approval
    is 409), and at this load the server may close a kept-alive connection the starved client
    is about to use."""
    for _ in range(2):
        try:
            return await http.request(method, url, **kwargs)
        except httpx.TransportError:
            pass
    return await http.request(method, url, **kwargs)


async def _submit(http: httpx.AsyncClient, wf: str, runs: int, clients: int) -> list[str]:
    ids: list[str] = []
    todo = iter(range(runs))

    async def one_client() -> None:
        for i in todo:
            # A connection the server closed meanwhile is tried again, under the same
            # Idempotency-Key: the run is made once either way.
            r = await _sent(
                http,
                "POST",
                f"/api/v1/workflows/{wf}/execute",
                json={"input": {"text": f"run {i}"}},
                headers={"Idempotency-Key": f"bench-approvals-{i}"},
            )
            r.raise_for_status()
            ids.append(r.json()["run_id"])

    await asyncio.gather(*(one_client() for _ in range(clients)))
    return ids


async def _pending(http: httpx.AsyncClient) -> tuple[int, list[dict[str, Any]]]:
    r = await _sent(http, "GET", "/api/v1/approvals")
    r.raise_for_status()
    body = r.json()
    return int(body["count"]), list(body["data"])


async def _approve_all(http: httpx.AsyncClient, clients: int) -> None:
    while True:
        count, page = await _pending(http)
        if count == 0:
            return
        queue = iter(page)
        await asyncio.gather(*(_approve_some(http, queue) for _ in range(clients)))


async def _approve_some(http: httpx.AsyncClient, queue: Iterator[dict[str, Any]]) -> None:
    """Approve from ``queue`` (shared by the clients) until it is empty."""
    for item in queue:
        # Approving is safe to send again (a second answer is 409); a connection the server
        # closed while this starved client held it (its keep-alive ran out) is retried.
        r = await _sent(http, "POST", f"/api/v1/approvals/{item['id']}/approve", json={})
        if r.status_code not in (200, 409):
            r.raise_for_status()


# Autovacuum analyses a table once a tenth of its rows changed: every minute or less while
# thousands of runs arrive. Without it (as on this machine) Procrastinate's fetch and the
# reconciler's sweeps keep plans made when the tables were empty, and crawl (measured: a
# sweep of 2 min 47 s, 0.1 approvals reached a second, 4.4 a second after one ANALYZE).
ANALYZE_EVERY = 30.0


async def _every(seconds: float, fn: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(seconds)
        await asyncio.to_thread(fn)


async def _measure(
    base_url: str,
    key: str,
    holders: list[int],
    args: argparse.Namespace,
    analyze: Callable[[], None] | None = None,
) -> list[tuple[str, str]]:
    """The figures of one setup; ``holders``: the processes that hold the waiting nodes."""
    limits = httpx.Limits(max_connections=args.clients)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=120, limits=limits
    ) as http:
        r = await http.post("/api/v1/workflows", json={"name": "approvals", "graph_json": GRAPH})
        r.raise_for_status()
        wf = r.json()["id"]
        rss_idle = _rss_mb(holders)
        analyzing = None if analyze is None else asyncio.create_task(_every(ANALYZE_EVERY, analyze))
        started = time.monotonic()
        run_ids = await _submit(http, wf, args.runs, args.clients)
        accepted = time.monotonic() - started
        while (waiting := (await _pending(http))[0]) < args.runs:
            if time.monotonic() - started > args.timeout:
                r = await http.get(f"/api/v1/workflows/{wf}/runs", params={"status": "failed"})
                failed = len(r.json()) if r.status_code == 200 else "?"
                raise RuntimeError(
                    f"{waiting} of {args.runs} runs waited at their approval after "
                    f"{args.timeout:.0f} s (accepted in {accepted:.1f} s; "
                    f"failed runs on the first page: {failed})"
                )
            await asyncio.sleep(0.5)
        all_waiting = time.monotonic() - started
        if analyzing is not None:
            analyzing.cancel()
        rss_waiting = _rss_mb(holders)
        cpu_before = _cpu_seconds(holders)
        await asyncio.sleep(args.idle)
        idle_cpu = (_cpu_seconds(holders) - cpu_before) / args.idle
        started = time.monotonic()
        await _approve_all(http, args.clients)
        while True:
            r = await http.get(f"/api/v1/workflows/{wf}/runs", params={"status": "running"})
            if r.status_code == 200 and not r.json():
                break
            await asyncio.sleep(0.5)
        decided_all = time.monotonic() - started
        delays = await _delays(http, wf, run_ids)
    ms = [d * 1000 for d in delays]
    rows = [
        ("runs", args.runs),
        ("accepted in", f"{accepted:.1f} s"),
        ("all waiting for approval after", f"{all_waiting:.1f} s"),
        ("RSS idle / with all waiting", f"{rss_idle:.0f} MB / {rss_waiting:.0f} MB"),
        ("RSS per waiting run", f"{(rss_waiting - rss_idle) * 1024 / args.runs:.1f} KiB"),
        ("CPU while they wait", f"{idle_cpu * 100:.1f}% of a core"),
        ("all approved and completed in", f"{decided_all:.1f} s"),
        (
            "decision -> next node started, p50 / p99 / max",
            f"{percentile(ms, 50):.0f} / {percentile(ms, 99):.0f} / {max(ms):.0f} ms",
        ),
    ]
    return [(name, str(value)) for name, value in rows]


async def _delays(http: httpx.AsyncClient, wf: str, run_ids: list[str]) -> list[float]:
    delays: list[float] = []
    sem = asyncio.Semaphore(32)

    async def one(run_id: str) -> None:
        async with sem:
            run = (await http.get(f"/api/v1/workflows/{wf}/runs/{run_id}")).json()
        nodes = {n["node_id"]: n for n in run["node_runs"]}
        after, gate = nodes["after"], nodes["gate"]
        if after["started_at"] and gate["finished_at"]:
            delays.append((_at(after["started_at"]) - _at(gate["finished_at"])).total_seconds())

    await asyncio.gather(*(one(run_id) for run_id in run_ids))
    return delays


def _rss_mb(pids: list[int]) -> float:
    return sum(rss_mb(pid) for pid in pids)


def embedded(args: argparse.Namespace) -> list[tuple[str, str]]:
    # Embedded, a waiting run keeps its driver slot: room for all of them.
    with server({"NODELOOM_MAX_ACTIVE_RUNS": str(args.runs + 100)}) as srv:
        _jwt, key = make_account(srv.base_url)
        grant_credits(srv.data_dir)
        return asyncio.run(_measure(srv.base_url, key, [srv.proc.pid], args))


def scaled_out(args: argparse.Namespace) -> list[tuple[str, str]]:
    from bench import bench_scaleout as scaleout

    # Scaled out, a waiting node's job holds one of its worker's wait slots.
    slots = args.runs // args.workers + 100
    env = {"NODELOOM_WORKER_WAIT_CONCURRENCY": str(slots), "NODELOOM_LOG_LEVEL": "INFO"}
    with scaleout.fleet(args.workers, extra_env=env) as f:
        _jwt, key = make_account(f.base_url)
        scaleout._grant(f)

        # What autovacuum does while rows arrive (ANALYZE_EVERY); this machine's PostgreSQL
        # runs without it, and the job fetch then crawls (docs/operations.md).
        def analyze() -> None:
            import psycopg

            with psycopg.connect(f.db_url.replace("+asyncpg", ""), autocommit=True) as conn:
                conn.execute("ANALYZE")

        workers = [w.pid for w in f.workers]
        return asyncio.run(_measure(f.base_url, key, workers, args, analyze))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds measured waiting")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--topology", choices=("embedded", "scaled-out", "both"), default="both")
    parser.add_argument("--workers", type=int, default=2, help="scaled out: worker processes")
    args = parser.parse_args()
    columns: list[tuple[str, list[tuple[str, str]]]] = []
    if args.topology in ("embedded", "both"):
        columns.append(("embedded (1 process, SQLite; RSS and CPU of the server)", embedded(args)))
    if args.topology in ("scaled-out", "both"):
        heading = f"scaled out (1 API + {args.workers} workers, PostgreSQL + Redis; of the workers)"
        columns.append((heading, scaled_out(args)))
    names = [name for name, _ in columns[0][1]]
    rows = [(name, *(dict(col)[name] for _, col in columns)) for name in names]
    text = table(rows, ("", *(heading for heading, _ in columns)))
    print(text)
    if not args.no_write:
        command = (
            f".venv/bin/python -m bench.bench_approvals --runs {args.runs} "
            f"--topology {args.topology}"
        )
        write_section("approvals", command, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
