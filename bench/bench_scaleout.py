"""Scale-out on PostgreSQL: one API replica (``serve --no-worker``) and 1 or 2
``nodeloom worker`` processes on a scratch database, Redis for events and limits, all on
127.0.0.1. For each worker count:

- completed 2-node runs/s under webhook load (wrk, c=32, ``--seconds``), and the queue wait
  of their nodes: committed runnable (``queued_at``) -> started, p50 / p99;
- 20 narrated videos (TextToSpeech + RenderText -> ImageAudioToVideo) fired at once: wall
  time until the last completes;
- with 2 workers, a worker SIGKILLed while it holds Delay nodes: seconds until each of its
  nodes is started again on the other worker.

    .venv/bin/python -m bench.bench_scaleout [--seconds 10] [--write]

Needs PostgreSQL on 127.0.0.1:5432 (trust auth, an existing database ``test`` to connect to
while creating the scratch one; ``NODELOOM_BENCH_PG`` overrides) and Redis on
127.0.0.1:6379 (``NODELOOM_BENCH_REDIS``). The numbers sit next to the embedded default's
in docs/benchmarks.md (the ``runs`` and ``webhooks`` sections).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.bench_webhooks import lua_script
from bench.common import (
    RAISED_LIMITS,
    WEBHOOK_GRAPH,
    free_port,
    make_account,
    median,
    percentile,
    table,
    wait_healthy,
    write_section,
    wrk,
)

PG_ADMIN = os.environ.get("NODELOOM_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("NODELOOM_BENCH_REDIS", "redis://127.0.0.1:6379/7")
WORKER_CONCURRENCY = 8

NARRATED = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {"id": "voice", "type": "TextToSpeech", "position": {"x": 1, "y": 0}, "data": {}},
        {
            "id": "card",
            "type": "RenderText",
            "position": {"x": 1, "y": 1},
            "data": {"width": 1280, "height": 720},
        },
        {"id": "video", "type": "ImageAudioToVideo", "position": {"x": 2, "y": 0}, "data": {}},
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "voice"},
        {"id": "e2", "source": "in", "target": "card"},
        {"id": "e3", "source": "card", "target": "video", "targetHandle": "image"},
        {"id": "e4", "source": "voice", "target": "video", "targetHandle": "audio"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}
SLOW = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {"id": "wait", "type": "Delay", "position": {"x": 1, "y": 0}, "data": {"seconds": 8}},
    ],
    "edges": [{"id": "e1", "source": "in", "target": "wait"}],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}
WORDS = " ".join(["The quick brown fox jumps over the lazy dog by the river."] * 18)


@dataclass
class Fleet:
    base_url: str
    db_url: str
    env: dict[str, str]
    api: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]]


def _sql(url: str, query: str, *params: Any) -> list[Any]:
    with psycopg.connect(url.replace("+asyncpg", ""), autocommit=True) as conn:
        return list(conn.execute(query, params).fetchall())  # type: ignore[arg-type]


@contextlib.contextmanager
def scratch_database() -> Iterator[str]:
    name = f"nl_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def _cli(env: dict[str, str], *args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "nodeloom.cli", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@contextlib.contextmanager
def fleet(
    workers: int, concurrency: int = WORKER_CONCURRENCY, extra_env: dict[str, str] | None = None
) -> Iterator[Fleet]:
    """One ``serve --no-worker`` and ``workers`` ``nodeloom worker --concurrency
    concurrency`` on a scratch database; ``extra_env`` is added to every process's."""
    with scratch_database() as db_url, tempfile.TemporaryDirectory(prefix="nl-scale-") as tmp:
        data = Path(tmp)
        port = free_port()
        env = {
            **os.environ,
            **RAISED_LIMITS,
            "NODELOOM_DATA_DIR": str(data),
            "NODELOOM_DATABASE_URL": db_url,
            "NODELOOM_REDIS_URL": REDIS_URL,
            "NODELOOM_SECRET_KEY": "bench-secret-" + "x" * 40,
            "NODELOOM_BASE_URL": f"http://127.0.0.1:{port}",
            "NODELOOM_LOG_LEVEL": "INFO",  # a worker says it is ready at INFO
            **(extra_env or {}),
        }
        api = _cli(env, "serve", "--no-worker", "--port", str(port), log=data / "api.log")
        procs = [api]
        try:
            wait_healthy(f"http://127.0.0.1:{port}", api, data / "api.log", timeout=60)
            started = []
            for i in range(workers):
                log = data / f"worker{i}.log"
                proc = _cli(env, "worker", "--concurrency", str(concurrency), log=log)
                procs.append(proc)
                started.append(proc)
                _wait_log(log, "nodes at once", proc)
            yield Fleet(f"http://127.0.0.1:{port}", db_url, env, api, started)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def _wait_log(log: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(log.read_text())
        if log.exists() and text in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise RuntimeError(log.read_text())


def _grant(f: Fleet) -> None:
    subprocess.run(
        [sys.executable, "-m", "nodeloom.cli", "accounts", "set", "--email",
         "bench@example.com", "--credits", str(10**12)],
        env=f.env, check=True, capture_output=True,
    )  # fmt: skip


def _wait_idle(f: Fleet, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while _sql(f.db_url, "select count(*) from runs where status = 'running'")[0][0]:
        if time.monotonic() > deadline:
            raise RuntimeError("runs still running")
        time.sleep(0.3)


def _ms(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds() * 1000


def text_load(f: Fleet, http: httpx.Client, seconds: int) -> dict[str, str]:
    wf = http.post("/api/v1/workflows", json={"name": "t", "graph_json": WEBHOOK_GRAPH}).json()
    paths = [
        "/api/v1/webhooks/"
        + http.post(
            f"/api/v1/workflows/{wf['id']}/webhooks", json={"name": f"h{i}", "active": True}
        ).json()["token"]
        for i in range(32)
    ]
    lua = lua_script(paths)
    wrk(f.base_url + paths[0], connections=32, seconds=2, lua=lua)
    _wait_idle(f)
    (mark,) = _sql(f.db_url, "select now()")[0]
    result = wrk(f.base_url + paths[0], connections=32, seconds=seconds, lua=lua)
    _wait_idle(f)
    runs = _sql(
        f.db_url,
        "select created_at, finished_at, status from runs where created_at > %s",
        mark,
    )
    first = min(r[0] for r in runs)
    last = max(r[1] for r in runs)
    waits = [
        _ms(q, s)
        for q, s in _sql(
            f.db_url,
            "select n.queued_at, n.started_at from node_runs n join runs r on r.id = n.run_id "
            "where r.created_at > %s and n.queued_at is not null and n.started_at is not null",
            mark,
        )
    ]
    completed = sum(1 for r in runs if r[2] == "completed")
    return {
        "accepted triggers/s (c=32)": f"{(result.requests - result.non_2xx) / seconds:.0f}",
        "completed runs/s (first accepted to last finished)": (
            f"{completed / (last - first).total_seconds():.0f}"
        ),
        "runs completed / not completed": f"{completed} / {len(runs) - completed}",
        "queue wait, runnable -> started, p50 / p99 (ms)": (
            f"{median(waits):.1f} / {percentile(waits, 99):.1f}"
        ),
    }


def media_load(f: Fleet, http: httpx.Client) -> dict[str, str]:
    wf = http.post("/api/v1/workflows", json={"name": "m", "graph_json": NARRATED}).json()["id"]
    start = time.monotonic()
    for i in range(20):
        r = http.post(f"/api/v1/workflows/{wf}/execute", json={"input": {"text": f"{i}. {WORDS}"}})
        r.raise_for_status()
    _wait_idle(f)
    wall = time.monotonic() - start
    done = _sql(
        f.db_url, "select count(*) from runs where workflow_id = %s and status = 'completed'", wf
    )[0][0]
    return {"20 narrated videos fired at once: wall (s), completed": f"{wall:.1f}, {done}/20"}


def worker_death(f: Fleet, http: httpx.Client) -> dict[str, str]:
    wf = http.post("/api/v1/workflows", json={"name": "s", "graph_json": SLOW}).json()["id"]
    for i in range(6):
        http.post(f"/api/v1/workflows/{wf}/execute", json={"input": {"text": str(i)}})
    deadline = time.monotonic() + 30
    query = "select count(*) from node_runs where node_id = 'wait' and status = 'running'"
    while _sql(f.db_url, query)[0][0] < 6:
        if time.monotonic() > deadline:
            raise RuntimeError("the Delay nodes did not all start")
        time.sleep(0.1)
    victim = f.workers[0]
    killed = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    restarted: list[float] = []
    seen: set[str] = set()
    while time.monotonic() - killed < 90:
        rows = _sql(
            f.db_url,
            "select run_id from node_runs where node_id = 'wait' and attempts >= 2",
        )
        for (run_id,) in rows:
            if run_id not in seen:
                seen.add(run_id)
                restarted.append(time.monotonic() - killed)
        if _sql(f.db_url, "select count(*) from runs where status = 'running'")[0][0] == 0:
            break
        time.sleep(0.1)
    _wait_idle(f)
    if not restarted:
        return {"worker SIGKILLed: its nodes started again after (s)": "it held none of the 6"}
    return {
        "worker SIGKILLed: its nodes started again after (s)": (
            f"{min(restarted):.1f}-{max(restarted):.1f} ({len(restarted)} of 6 nodes were on it)"
        )
    }


def measure(workers: int, seconds: int) -> dict[str, str]:
    with fleet(workers) as f:
        _jwt, key = make_account(f.base_url)
        _grant(f)
        with httpx.Client(
            base_url=f.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as http:
            found = text_load(f, http, seconds)
            found.update(media_load(f, http))
            if workers > 1:
                found.update(worker_death(f, http))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    results = {n: measure(n, args.seconds) for n in (1, 2)}
    measures = list(dict.fromkeys(k for r in results.values() for k in r))
    rows = [(m, *(results[n].get(m, "-") for n in (1, 2))) for m in measures]
    text = (
        "### Scale-out: API replica + queue workers on PostgreSQL (Redis for events and limits)\n\n"
        + table(rows, ("measure", "1 worker", "2 workers"))
        + "\n\nOne `serve --no-worker` and N `nodeloom worker --concurrency "
        f"{WORKER_CONCURRENCY}` on one 2-core machine with PostgreSQL, Redis and wrk: the "
        "workers share the cores with everything else, so a second worker adds claims in "
        "parallel, not CPU. Text load: 32 webhooks round-robin, TextInput -> TextTemplate, "
        f"{args.seconds} s after a 2 s warm-up. Every node is a Procrastinate job.\n"
    )
    print(text)
    if args.write:
        write_section("scaleout", ".venv/bin/python -m bench.bench_scaleout --write", text)


if __name__ == "__main__":
    main()
