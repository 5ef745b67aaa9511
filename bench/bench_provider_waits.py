"""Provider waits: N runs at once, each waiting S seconds on a (fake) hosted model, on the
embedded default (one ``nodeloom serve``, SQLite) and scaled out (``serve --no-worker`` and
``nodeloom worker`` processes on PostgreSQL, Redis for events and limits: bench_scaleout's
fleet).

Each run is TextInput -> ReplicateModelText against a small fake of Replicate's HTTP API
(uvicorn, in its own process, on 127.0.0.1) whose predictions take exactly S seconds. All N
runs are submitted at once (``--clients`` connections); the client then asks one cheap
question every 0.2 s (is any run of the workflow still running?) and reads the runs back
when none is, so that its polling costs the server nothing worth counting.

Embedded, a provider node holds no sandbox process and no execution slot while it waits
(nodes/adapters/policy.py): it is a coroutine of the run's driver. Scaled out, a node is a
Procrastinate job (engine/dispatch/queue.py) that lasts as long as the node, wait included;
a provider node's job is on the ``waits`` queue, which each worker serves with its own
NODELOOM_WORKER_WAIT_CONCURRENCY slots (500 by default, ADR 0019), apart from the
``--concurrency`` slots of nodes that compute. ``--worker-concurrency`` lists the
``--concurrency`` values to measure (a fleet each).

Reports per setup: over how long the N runs were accepted (server timestamps); how many
predictions the fake saw in flight at once (each lasts S from its creation); the delay from
a run's acceptance to its prediction's creation; the overhead of each run over S (its own
created -> finished time minus S), p50/p99/max; the wall time for all N; the RSS growth
per in-flight run of the processes that hold the waits; and CPU per run of each process.

    .venv/bin/python -m bench.bench_provider_waits --runs 500 --seconds 2 --topology both

``--prefer-wait`` makes the node ask for ``Prefer: wait`` (the fake then answers when the
prediction is done) instead of polling. Scaled out needs PostgreSQL and Redis on 127.0.0.1
(see bench_scaleout). Only ever talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing as mp
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import bench_scaleout as scaleout
from bench.common import (
    BENCH_MD,
    _children,
    free_port,
    grant_credits,
    make_account,
    percentile,
    server,
    table,
    write_section,
)

TOKEN = "r8_benchFakeToken0123456789abcdef"
WARM_UP = 5
EMBEDDED = "### Provider waits, embedded: one `nodeloom serve` on SQLite"
SCALED_OUT = (
    "### Provider waits, scaled out: `serve --no-worker` + `nodeloom worker` on PostgreSQL "
    "(Redis for events and limits)"
)
# The node polls 0.5, 1.25 and 2.375 s after creating the prediction (policy.poll_delays):
# the least a polled 2 s wait can take is 2.375 s.


def fake_replicate(port: int, seconds: float) -> None:
    """Replicate's create / get prediction, answering from the clock (no threads per job).
    ``/stats`` lists each prediction's creation (wall clock) and prompt."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    created: dict[str, tuple[float, str]] = {}

    def body(pid: str) -> dict[str, Any]:
        done = time.time() - created[pid][0] >= seconds
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
        sent = await request.json()
        pid = uuid.uuid4().hex
        created[pid] = (time.time(), str(sent.get("input", {}).get("prompt", "")))
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
    # Idle connections kept 75 s, as hosted APIs' load balancers do (uvicorn's default, 5 s,
    # closes them between the node's slower polls, and a poll that reuses one just as it is
    # closed fails the node: see docs/benchmarks.md).
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        backlog=4096,
        timeout_keep_alive=75,
    )


# ----------------------------------------------------------------------------- processes


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU time of each live process of ``pids`` so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {pid: f for pid in pids if (f := _stat_fields(pid)) is not None}
    return {pid: (int(f[11]) + int(f[12])) / ticks for pid, f in found.items()}


class CpuMeter:
    """CPU seconds of each part (a function listing its processes) between ``start`` and
    ``stop``. A process that appears meanwhile counts from zero; one that exits meanwhile
    is lost (the database pools keep their connections through the load)."""

    def __init__(self, parts: dict[str, Callable[[], list[int]]]) -> None:
        self.parts = parts
        self._before: dict[str, dict[int, float]] = {}

    def start(self) -> None:
        self._before = {part: cpu_seconds(pids()) for part, pids in self.parts.items()}

    def stop(self) -> dict[str, float]:
        spent = {}
        for part, pids in self.parts.items():
            before = self._before[part]
            now = cpu_seconds(sorted({*pids(), *before}))
            spent[part] = sum(cpu - before.get(pid, 0.0) for pid, cpu in now.items())
        return spent


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        total += int(match.group(1)) if match else 0
    return total / 1024


class Sampler:
    """Peak of ``measure()`` every 50 ms in a thread, between ``start`` and ``stop``."""

    def __init__(self, measure: Callable[[], float], every: float = 0.05) -> None:
        self.measure, self.every = measure, every
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.measure())
            time.sleep(self.every)

    def start(self) -> Sampler:
        self.peak = self.measure()
        self._thread.start()
        return self

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


# ----------------------------------------------------------------------------- the load


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


def setup_workflow(base_url: str, key: str, prefer_wait: bool) -> str:
    """A Replicate credential and the bench workflow; its id."""
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        r = http.post(
            "/api/v1/credentials",
            json={"name": "bench", "kind": "replicate", "fields": {"api_token": TOKEN}},
        )
        assert r.status_code == 201, r.text
        wf_body = {"name": "waits", "graph_json": graph(r.json()["id"], prefer_wait)}
        r = http.post("/api/v1/workflows", json=wf_body)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


@dataclass
class Driven:
    runs: dict[str, dict[str, Any]]  # prompt -> the run as the run list shows it


async def drive(
    base_url: str, key: str, wf: str, runs: int, clients: int, timeout: float, tag: str
) -> Driven:
    """Submit ``runs`` at once over ``clients`` connections, wait until none is running,
    read them back. Run ``i``'s input text (the prompt the fake sees) is ``<tag>-<i>``."""
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=120, limits=limits
    ) as http:
        started = time.monotonic()

        async def submit(i: int) -> tuple[str, str]:
            # A connection the server closed as idle just as it was reused is retried, with
            # the same Idempotency-Key: the run is accepted once whatever happens.
            key = {"Idempotency-Key": uuid.uuid4().hex}
            prompt = f"{tag}-{i}"
            body = {"input": {"text": prompt}, "cache": False}
            for attempt in range(3):
                try:
                    r = await http.post(f"/api/v1/workflows/{wf}/execute", json=body, headers=key)
                    break
                except (httpx.ReadError, httpx.RemoteProtocolError):
                    if attempt == 2:
                        raise
            assert r.status_code in (200, 202), r.text
            return str(r.json()["run_id"]), prompt

        submitted = dict(await asyncio.gather(*(submit(i) for i in range(runs))))
        # One question every 0.2 s, not one per run: the server's CPU is what is measured.
        while time.monotonic() - started < timeout:
            r = await http.get(
                f"/api/v1/workflows/{wf}/runs", params={"status": "running", "limit": 1}
            )
            if r.status_code == 200 and not r.json():
                break
            await asyncio.sleep(0.2)
        found: dict[str, dict[str, Any]] = {}
        url: str | None = f"/api/v1/workflows/{wf}/runs?limit=200"
        while url is not None and len(found) < len(submitted):
            r = await http.get(url)
            r.raise_for_status()
            for item in r.json():
                if item["id"] in submitted:
                    found[submitted[item["id"]]] = item
            url = r.links.get("next", {}).get("url")
        return Driven(found)


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass
class Outcome:
    setup: str
    accepted_over: float
    in_flight: int
    start_delays: list[float]
    overheads: list[float]
    wall: float
    failed: int
    rss_kb_per_run: float
    cpu_ms: dict[str, float]  # CPU per run, by process
    notes: list[str] = field(default_factory=list)


def load(
    base_url: str,
    key: str,
    wf: str,
    fake_url: str,
    args: argparse.Namespace,
    parts: dict[str, Callable[[], list[int]]],
    holders: list[int],
    extra: Sampler | None = None,
    counter: Callable[[], int] | None = None,
) -> tuple[Outcome, float, float]:
    """The measured load, after a warm-up; (outcome, idle MB, peak MB) of ``holders``, the
    processes where the waits live. ``setup`` and ``notes`` are the caller's to fill; a
    ``counter`` (database transactions so far) adds its growth per run to the notes."""
    asyncio.run(drive(base_url, key, wf, WARM_UP, WARM_UP, 60, "warm"))
    time.sleep(0.5)
    idle = rss_mb(holders)
    memory = Sampler(lambda: rss_mb(holders)).start()
    if extra is not None:
        extra.start()
    counted = counter() if counter is not None else 0
    meter = CpuMeter(parts)
    meter.start()
    driven = asyncio.run(
        drive(base_url, key, wf, args.runs, args.clients, args.timeout, uuid.uuid4().hex[:8])
    )
    cpu = {part: spent * 1000 / args.runs for part, spent in meter.stop().items()}
    peak = memory.stop()
    if extra is not None:
        extra.stop()
    predictions = {
        prompt: at
        for at, prompt in httpx.get(fake_url + "/stats", timeout=30).json()["created"]
        if prompt in driven.runs
    }
    runs = list(driven.runs.values())
    done = [b for b in runs if b["status"] == "completed"]
    created = [_ts(b["created_at"]) for b in runs]
    finished = [_ts(b["finished_at"]) for b in runs if b["finished_at"]]
    in_flight = max_overlap(sorted(predictions.values()), args.seconds)
    outcome = Outcome(
        setup="",
        accepted_over=max(created) - min(created),
        in_flight=in_flight,
        start_delays=[
            at - _ts(driven.runs[prompt]["created_at"]) for prompt, at in predictions.items()
        ],
        overheads=[b["duration_ms"] / 1000 - args.seconds for b in done],
        wall=max(finished, default=min(created)) - min(created),
        failed=args.runs - len(done),
        # What the waits cost: the growth at the peak shared by the waits at that time.
        rss_kb_per_run=(peak - idle) * 1024 / max(1, in_flight),
        cpu_ms=cpu,
    )
    if counter is not None:
        time.sleep(2)  # the backends report their counts within a second or so
        per_run = (counter() - counted) / args.runs
        outcome.notes.append(f"{per_run:.1f} database transactions per run")
    errors = collections.Counter(
        f"{b['error']['code']}: {b['error']['message'][:120]}" if b.get("error") else b["status"]
        for b in runs
        if b["status"] != "completed"
    )
    if len(runs) < args.runs:
        errors["not found in the run list"] = args.runs - len(runs)
    outcome.notes += [f"{n} failed with {why!r}" for why, n in errors.most_common(3)]
    return outcome, idle, peak


# ----------------------------------------------------------------------------- topologies


def provider_env(fake_url: str) -> dict[str, str]:
    return {
        "NODELOOM_HTTP_ALLOWLIST": json.dumps(["127.0.0.1/32"]),
        "NODELOOM_REPLICATE_API_URL": fake_url + "/v1",
    }


def embedded(args: argparse.Namespace, fake_url: str) -> Outcome:
    env = {
        **provider_env(fake_url),
        "NODELOOM_MAX_ACTIVE_RUNS": str(args.max_active_runs),
        "NODELOOM_PROCESSES": str(args.processes),
    }
    with server(env) as srv:
        _jwt, key = make_account(srv.base_url)
        grant_credits(srv.data_dir)
        wf = setup_workflow(srv.base_url, key, args.prefer_wait)
        # With --processes N the supervisor's children serve; the supervisor only watches.
        servers = [srv.proc.pid, *_children(srv.proc.pid)]
        outcome, idle, peak = load(
            srv.base_url, key, wf, fake_url, args, {"server": lambda: servers}, servers
        )
    outcome.setup = "1 process" if args.processes == 1 else f"{args.processes} processes"
    outcome.notes.append(f"server RSS {idle:.0f} MB idle, {peak:.0f} MB at the peak")
    return outcome


def scaled_out(args: argparse.Namespace, fake_url: str, concurrency: int) -> Outcome:
    import psycopg

    with scaleout.fleet(args.workers, concurrency, provider_env(fake_url)) as f:
        _jwt, key = make_account(f.base_url)
        scaleout._grant(f)
        wf = setup_workflow(f.base_url, key, args.prefer_wait)
        database = f.db_url.rsplit("/", 1)[1]
        with psycopg.connect(scaleout.PG_ADMIN, autocommit=True) as admin:
            lock = threading.Lock()

            def pg_backends() -> list[int]:
                with lock:  # the sampler's thread asks too
                    rows = admin.execute(
                        "select pid from pg_stat_activity where datname = %s", (database,)
                    ).fetchall()
                return [int(r[0]) for r in rows]

            workers = [w.pid for w in f.workers]
            parts: dict[str, Callable[[], list[int]]] = {"API": lambda: [f.api.pid]}
            for i, pid in enumerate(workers):
                parts[f"worker {i + 1}"] = lambda pid=pid: [pid]
            parts["PostgreSQL"] = pg_backends
            connected = Sampler(lambda: float(len(pg_backends())), every=0.2)

            def transactions() -> int:
                with lock:
                    row = admin.execute(
                        "select xact_commit + xact_rollback from pg_stat_database "
                        "where datname = %s",
                        (database,),
                    ).fetchone()
                return int(row[0]) if row else 0

            outcome, idle, peak = load(
                f.base_url, key, wf, fake_url, args, parts, workers, connected, transactions
            )
        logs = [Path(f.env["NODELOOM_DATA_DIR"]) / name for name in ("api.log",)]
        logs += [Path(f.env["NODELOOM_DATA_DIR"]) / f"worker{i}.log" for i in range(args.workers)]
        text = "".join(log.read_text(errors="replace") for log in logs)
        errors = text.count("Traceback")
        too_many = text.count("too many clients")
    outcome.setup = f"{args.workers} x {concurrency}"
    outcome.notes.append(
        f"worker RSS {idle:.0f} MB idle, {peak:.0f} MB at the peak (summed); PostgreSQL "
        f"connections of the fleet at the peak {connected.peak:.0f}"
        + (f"; {errors} tracebacks in the fleet's logs" if errors else "")
        + (f", {too_many} of them 'too many clients'" if too_many else "")
    )
    return outcome


# ----------------------------------------------------------------------------- report


def rows_of(outcomes: list[Outcome], args: argparse.Namespace) -> str:
    mode = "Prefer: wait" if args.prefer_wait else "polling"
    rows = [
        (
            args.runs,
            f"{args.seconds:g}",
            mode,
            o.setup,
            f"{o.accepted_over:.2f}",
            o.in_flight,
            f"{percentile(o.start_delays, 50):.2f} / {percentile(o.start_delays, 99):.2f}",
            f"{percentile(o.overheads, 50):.2f}",
            f"{percentile(o.overheads, 99):.2f}",
            f"{max(o.overheads, default=float('nan')):.2f}",
            f"{o.wall:.2f}",
            o.failed,
            f"{o.rss_kb_per_run:.0f}",
            ", ".join(f"{part} {ms:.1f}" for part, ms in o.cpu_ms.items()),
        )
        for o in outcomes
    ]
    return table(
        rows,
        (
            "runs",
            "wait (s)",
            "mode",
            "setup",
            "accepted over (s)",
            "in flight at once",
            "accepted -> prediction created p50 / p99 (s)",
            "overhead p50 (s)",
            "p99 (s)",
            "max (s)",
            "wall for all (s)",
            "failed",
            "RSS per in-flight run (KB)",
            "CPU per run (ms)",
        ),
    )


def block(heading: str, outcomes: list[Outcome], args: argparse.Namespace, text: str) -> str:
    load_avg = os.getloadavg()[0]
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    notes = "; ".join(f"{o.setup}: {'; '.join(o.notes)}" for o in outcomes)
    return (
        f"{heading}\n\nMeasured {stamp}, load average {load_avg:.1f} on {os.cpu_count()} cores "
        f"at the end.\n\n{rows_of(outcomes, args)}\n\n{notes}.\n\n{text}"
    )


EMBEDDED_TEXT = (
    "The client submits all runs at once over 64 connections, then only asks every 0.2 s "
    "whether any is still running (this bench used to poll every run's status every 0.25 s, "
    "load the server paid for). A provider node waits as a coroutine of its run's driver: no "
    "sandbox process, no execution slot, and NODELOOM_MAX_ACTIVE_RUNS is raised above the "
    "run count (its default, 64, drives 64 runs at once and queues the rest), so nothing "
    "caps the waits at once. What bounds them is how fast the one process accepts and starts "
    "runs: `accepted over` is the time from the first run accepted to the last, and runs "
    "accepted more than the wait apart cannot wait together. Accepting and starting a run, "
    "its steps and events, the create call and the polls cost the CPU per run shown: 500 "
    "runs all waiting within 2 s need about 500 times that within those 2 s, more than one "
    "process on a shared core gets. The fake keeps idle connections 75 s (with uvicorn's "
    "default of 5 s, a poll reusing a connection the fake was closing failed its node until "
    "nodes/adapters/policy.py learned to ask such a status read again)."
)
SCALED_OUT_TEXT = (
    "Setup: workers x job slots for computing nodes (`nodeloom worker --concurrency`; 16 is "
    "the default of NODELOOM_WORKER_CONCURRENCY). The API accepts a run, executes its "
    "TextInput in the accepting transaction and defers a Procrastinate job for the provider "
    "node on the `waits` queue; a worker's job claims the node and runs it on the event "
    "loop, wait included. Each worker serves that queue with its own "
    "NODELOOM_WORKER_WAIT_CONCURRENCY slots (500), so the computing slots do not bound the "
    "waits at once (before that queue, 2 x 16 held at most 32 predictions in flight). What "
    "bounds them is throughput: how fast the API accepts runs and the workers claim their "
    "nodes, on cores shared with PostgreSQL, Redis, the fake and the client (`accepted over`). "
    "RSS is that of the worker processes (where the waits are); CPU per run is per process, "
    "PostgreSQL being the fleet's backends (one opened during the load counts from zero)."
)


def kept_block(heading: str) -> str | None:
    """The block under ``heading`` in the current provider-waits section, if any."""
    text = BENCH_MD.read_text() if BENCH_MD.exists() else ""
    section = re.search(
        r"<!-- bench:provider-waits:start -->(.*?)<!-- bench:provider-waits:end -->", text, re.S
    )
    if section is None or heading not in section.group(1):
        return None
    rest = section.group(1).split(heading, 1)[1]
    return heading + rest.split("\n### ", 1)[0].rstrip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--topology", choices=("embedded", "scaled-out", "both"), default="both")
    parser.add_argument("--scaled-out", action="store_const", const="scaled-out", dest="topology")
    parser.add_argument("--clients", type=int, default=64, help="connections submitting runs")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--max-active-runs", type=int, default=600)
    parser.add_argument("--processes", type=int, default=1, help="embedded: serve --processes")
    parser.add_argument("--workers", type=int, default=2, help="scaled out: worker processes")
    parser.add_argument(
        "--worker-concurrency",
        default="16",
        help="scaled out: computing job slots per worker, comma-separated, a fleet each (16 "
        "is the default of NODELOOM_WORKER_CONCURRENCY; waits have their own slots)",
    )
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
    blocks: dict[str, str] = {}
    failures = 0
    try:
        if args.topology in ("embedded", "both"):
            outcome = embedded(args, fake_url)
            failures += outcome.failed
            blocks[EMBEDDED] = block(EMBEDDED, [outcome], args, EMBEDDED_TEXT)
            print(blocks[EMBEDDED], flush=True)
        if args.topology in ("scaled-out", "both"):
            outcomes = []
            for concurrency in (int(c) for c in args.worker_concurrency.split(",")):
                outcomes.append(scaled_out(args, fake_url, concurrency))
                failures += outcomes[-1].failed
                print(rows_of(outcomes[-1:], args), flush=True)
            blocks[SCALED_OUT] = block(SCALED_OUT, outcomes, args, SCALED_OUT_TEXT)
            print(blocks[SCALED_OUT], flush=True)
    finally:
        fake.terminate()
        fake.join(5)

    if not args.no_write:
        parts = [blocks.get(h) or kept_block(h) for h in (EMBEDDED, SCALED_OUT)]
        options = f"--runs {args.runs} --seconds {args.seconds:g}"
        if args.prefer_wait:
            options += " --prefer-wait"
        write_section(
            "provider-waits" + ("-prefer-wait" if args.prefer_wait else ""),
            f".venv/bin/python -m bench.bench_provider_waits {options} --topology both",
            "Each table says when it was measured: `--topology embedded` or `--topology "
            "scaled-out` measures one again and keeps the other.\n\n"
            + "\n\n".join(p for p in parts if p),
        )
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
