"""Webhook triggers against a real ``nodeloom serve``: accepted triggers per second and
latency at concurrency 50 (wrk, one thread, so the load generator is not the bottleneck),
the latency of a run-status poll meanwhile,
then the time from a trigger being accepted (runs.created_at) to its first node starting
(min node_runs.started_at), read from the database once every run has finished.

    .venv/bin/python -m bench.bench_webhooks [--seconds 10] [--webhooks 32] [--write]

Limits are raised through NODELOOM_RATE_LIMIT_* (bench/common.py RAISED_LIMITS); every
response that is not a 202 is counted and reported.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import httpx

from bench.common import (
    WEBHOOK_GRAPH,
    grant_credits,
    make_account,
    median,
    percentile,
    poll_latency,
    server,
    table,
    write_section,
    wrk,
)

CONNECTIONS = 50
BODY = {"text": "A sunset over the sea", "category": "travel"}
GRAPH = WEBHOOK_GRAPH


def lua_script(paths: list[str]) -> str:
    listed = ", ".join(f'"{p}"' for p in paths)
    body = json.dumps(BODY).replace('"', '\\"')
    return f"""
paths = {{{listed}}}
counter = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = "{body}"
request = function()
  counter = counter + 1
  return wrk.format(nil, paths[(counter % #paths) + 1])
end
"""


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


def wait_idle(db_file: Path, timeout: float = 300.0) -> float:
    """Seconds until no run is running (the executor drained the backlog)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        with sqlite3.connect(db_file) as conn:
            (running,) = conn.execute("select count(*) from runs where status='running'").fetchone()
        if running == 0:
            return time.monotonic() - start
        time.sleep(0.5)
    raise RuntimeError("runs still running after the timeout")


def start_delays_ms(db_file: Path, since: str | None = None) -> tuple[list[float], int, int]:
    """Accepted -> first node started, per run; and the counts of completed / failed runs."""
    query = (
        "select r.created_at, min(n.started_at), r.status from runs r "
        "join node_runs n on n.run_id = r.id where n.started_at is not null "
        + ("and r.created_at > ? " if since else "")
        + "group by r.id"
    )
    with sqlite3.connect(db_file) as conn:
        rows = conn.execute(query, (since,) if since else ()).fetchall()
    delays = [(_ts(first) - _ts(created)).total_seconds() * 1000 for created, first, _ in rows]
    completed = sum(1 for *_, status in rows if status == "completed")
    failed = sum(1 for *_, status in rows if status == "failed")
    return delays, completed, failed


@contextmanager
def profiled(pid: int, svg: str | None, seconds: int) -> Iterator[None]:
    """py-spy (pip install py-spy) over the measured phase, when asked for: collapsed stacks
    (``--format raw``), one line per stack with its sample count."""
    if not svg:
        yield
        return
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    spy = subprocess.Popen(
        [
            exe,
            "record",
            "-p",
            str(pid),
            "-o",
            svg,
            "-d",
            str(seconds),
            "-r",
            "100",
            "--nonblocking",
            "--format",
            "raw",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        spy.wait(seconds + 30)


def setup(base_url: str, data_dir: Path, webhooks: int) -> list[str]:
    """An account with credits, one workflow, ``webhooks`` webhooks; their trigger paths."""
    _jwt, key = make_account(base_url)
    grant_credits(data_dir)
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10
    ) as http:
        workflow = http.post("/api/v1/workflows", json={"name": "b", "graph_json": GRAPH}).json()
        return [
            "/api/v1/webhooks/"
            + http.post(
                f"/api/v1/workflows/{workflow['id']}/webhooks", json={"name": f"h{i}"}
            ).json()["token"]
            for i in range(webhooks)
        ]


def accept_only(args: argparse.Namespace) -> None:
    with server({"NODELOOM_RUN_EXECUTOR": "false"}) as srv:
        paths = setup(srv.base_url, srv.data_dir, args.webhooks)
        lua = lua_script(paths)
        wrk(srv.base_url + paths[0], connections=args.connections, seconds=2, lua=lua)
        with profiled(srv.proc.pid, args.profile, args.seconds):
            result = wrk(
                srv.base_url + paths[0], connections=args.connections, seconds=args.seconds, lua=lua
            )
    accepted = (result.requests - result.non_2xx) / args.seconds
    print(
        table(
            [
                (f"accepted triggers/s, executor off (c={args.connections})", f"{accepted:.0f}"),
                ("non-202 responses", result.non_2xx),
                ("latency p50 / p99 (ms)", f"{result.p50_ms:.1f} / {result.p99_ms:.1f}"),
            ],
            ("measure", "value"),
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--webhooks", type=int, default=32)
    parser.add_argument("--connections", type=int, default=CONNECTIONS)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--processes", type=int, default=1, help="serve --processes N (default 1)")
    parser.add_argument(
        "--no-executor",
        action="store_true",
        help="NODELOOM_RUN_EXECUTOR=false: measure accepting triggers alone (runs stay queued)",
    )
    parser.add_argument(
        "--profile", metavar="OUT", help="py-spy the server; collapsed stacks into OUT"
    )
    args = parser.parse_args()
    if args.no_executor:
        accept_only(args)
        return

    with server({"NODELOOM_PROCESSES": str(args.processes)}) as srv:
        _jwt, key = make_account(srv.base_url)
        grant_credits(srv.data_dir)
        db_file = srv.data_dir / "nodeloom.db"
        with httpx.Client(
            base_url=srv.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10
        ) as http:
            wf = http.post("/api/v1/workflows", json={"name": "bench", "graph_json": GRAPH})
            workflow = wf.json()["id"]
            tokens = [
                http.post(
                    f"/api/v1/workflows/{workflow}/webhooks", json={"name": f"h{i}", "active": True}
                ).json()["token"]
                for i in range(args.webhooks)
            ]
            # Light load: one trigger at a time, well spaced, for the idle-server start delay.
            idle_latency = []
            for i in range(50):
                t0 = time.perf_counter()
                r = http.post(f"/api/v1/webhooks/{tokens[i % len(tokens)]}", json=BODY)
                idle_latency.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 202, r.text
                time.sleep(0.02)
        wait_idle(db_file)
        idle_delays, _, _ = start_delays_ms(db_file)

        paths = [f"/api/v1/webhooks/{t}" for t in tokens]
        probe = r.json()["run_id"]  # the last idle trigger's run, polled during the load
        # Warm-up, then the measured run.
        wrk(srv.base_url + paths[0], connections=args.connections, seconds=2, lua=lua_script(paths))
        wait_idle(db_file)
        with sqlite3.connect(db_file) as conn:
            (mark,) = conn.execute("select max(created_at) from runs").fetchone()
        polls: list[float] = []
        stop = threading.Event()
        poller = threading.Thread(
            target=poll_latency,
            args=(srv.base_url, key, f"/api/v1/workflows/{workflow}/runs/{probe}", stop, polls),
        )
        poller.start()
        with profiled(srv.proc.pid, args.profile, args.seconds):
            result = wrk(
                srv.base_url + paths[0],
                connections=args.connections,
                seconds=args.seconds,
                lua=lua_script(paths),
            )
        stop.set()
        poller.join()
        drain = wait_idle(db_file)
        load_delays, completed, failed = start_delays_ms(db_file, since=mark)
        rss = srv.peak_rss_mb()

    accepted_per_s = (result.requests - result.non_2xx) / args.seconds
    rows = [
        (f"accepted triggers/s (c={args.connections})", f"{accepted_per_s:.0f}"),
        ("wrk requests/s", f"{result.rps:.0f}"),
        ("non-202 responses", result.non_2xx),
        ("trigger latency p50 / p99 (ms)", f"{result.p50_ms:.1f} / {result.p99_ms:.1f}"),
        (
            "GET run status during the load, p50 / p99 (ms)",
            f"{median(polls):.1f} / {percentile(polls, 99):.1f}",
        ),
        ("runs completed / failed (load phase)", f"{completed} / {failed}"),
        ("backlog drained after the load (s)", f"{drain:.1f}"),
        (
            "accepted -> first node started, under load p50 / p99 (ms)",
            f"{median(load_delays):.1f} / {percentile(load_delays, 99):.1f}",
        ),
        (
            "accepted -> first node started, idle p50 / p99 (ms)",
            f"{median(idle_delays):.1f} / {percentile(idle_delays, 99):.1f}",
        ),
        (
            "single trigger round trip, idle p50 / p99 (ms)",
            f"{median(idle_latency):.1f} / {percentile(idle_latency, 99):.1f}",
        ),
        ("server peak RSS (MB)", f"{rss:.0f}"),
    ]
    text = (
        f"POST /api/v1/webhooks/{{token}} with the documented body, {args.webhooks} webhooks "
        f"round-robin, {args.connections} connections, {args.seconds} s, workflow "
        "TextInput -> TextTemplate (embedded SQLite, executor in the same process"
        + (f"; `serve --processes {args.processes}`" if args.processes > 1 else "")
        + ").\n\n"
        + table(rows, ("measure", "value"))
    )
    print(text)
    if args.write:
        command = ".venv/bin/python -m bench.bench_webhooks"
        if args.processes > 1:
            write_section(
                f"webhooks-p{args.processes}", f"{command} --processes {args.processes}", text
            )
        else:
            write_section("webhooks", command, text)


if __name__ == "__main__":
    main()
