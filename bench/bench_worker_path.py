"""The path of a run whose nodes go through ``nodeloom worker`` processes (PostgreSQL,
Procrastinate), measured without a backlog: issue #20's claim latency, and 1 -> 2 workers.

    .venv/bin/python -m bench.bench_peers --queue-mode --no-n8n --no-write --claim-hops 200
    .venv/bin/python -m bench.bench_peers --queue-mode --no-n8n --no-write --scaling 160

``--claim-hops N``: N runs of TextInput -> Delay (0 s) -> TextTemplate, *one at a time*: the
next is triggered once the previous one's final event arrived on Redis (the bench waits on
the event channel, so it adds no database transaction and no backend of its own). For each
node a worker's job started, the hops from "committed runnable" to "started":

- queued: ``node_runs.queued_at`` (the step that made it runnable, before its commit);
- deferred: the job's insert (Procrastinate's ``deferred`` event);
- fetched: the worker's fetch (its ``started`` event);
- started: ``node_runs.started_at`` (the claim step, under the run's lock).

and, in that second pass, "committed": the moment the transaction that queued the node
commits (a deferred constraint trigger on ``node_runs``, which PostgreSQL fires at COMMIT,
just before the commit record is flushed): committed -> started is the claim latency in
the strict sense, without the accepting request's own work before its commit.

The job events are copied by a trigger the bench installs on its scratch database (the
library deletes a succeeded job with its events), with ``clock_timestamp()``; it is only
installed for a second pass, after transactions and CPU per run were measured without it.

``--scaling N``: N runs at c=50 of the same workflow with the Delay waiting
``--scaling-delay`` seconds (and 0 s), with 1 and then 2 workers of ``--scaling-concurrency``
jobs each: completed runs/s. With a delay, one worker's capacity is its job slots over the
delay (bounded by waiting, not by CPU); with 0 s it is bounded by CPU, and that pass runs
``CPU_BOUND_RUNS_FACTOR`` times N so that it lasts longer than wrk's ramp.

Every figure comes with the load average: the machine is shared.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from typing import Any

import httpx
import orjson
import psycopg
import redis

from bench import bench_scaleout as scaleout
from bench import peers_kit as kit
from bench.common import make_account, median, percentile, table

EVENTS_CHANNEL = "nodeloom:events"  # events/links.py
FINAL = {"run.completed", "run.failed", "run.cancelled"}
# pg_stat_database counters of a backend reach the view within 10 s of it going idle
# (PostgreSQL 15's PGSTAT_IDLE_INTERVAL): read them that long after a load.
STATS_SETTLE_SECONDS = 11.0
CPU_BOUND_RUNS_FACTOR = 5  # --scaling: the Delay 0 s pass runs this many times the runs

COPY_JOB_EVENTS = """
CREATE TABLE bench_job_events (job_id bigint, run_id text, node_id text, type text,
                               at timestamptz);
CREATE FUNCTION bench_copy_job_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO bench_job_events
    SELECT NEW.job_id, j.args->>'run_id', j.args->>'node_id', NEW.type::text,
           clock_timestamp()
    FROM procrastinate_jobs j WHERE j.id = NEW.job_id;
  RETURN NEW;
END $$;
CREATE TRIGGER bench_copy_job_event AFTER INSERT ON procrastinate_events
  FOR EACH ROW EXECUTE FUNCTION bench_copy_job_event();
CREATE TABLE bench_commits (run_id text, node_id text, at timestamptz);
CREATE FUNCTION bench_note_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO bench_commits VALUES (NEW.run_id, NEW.node_id, clock_timestamp());
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER bench_note_commit AFTER INSERT OR UPDATE OF status ON node_runs
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.status = 'queued')
  EXECUTE FUNCTION bench_note_commit();
"""

HOPS = """
SELECT
  1000 * (extract(epoch FROM d.at) - extract(epoch FROM n.queued_at)),
  1000 * (extract(epoch FROM f.at) - extract(epoch FROM d.at)),
  1000 * (extract(epoch FROM n.started_at) - extract(epoch FROM f.at)),
  1000 * (extract(epoch FROM n.started_at) - extract(epoch FROM n.queued_at)),
  1000 * (extract(epoch FROM k.at) - extract(epoch FROM d.at)),
  1000 * (extract(epoch FROM n.started_at) - extract(epoch FROM k.at))
FROM node_runs n
JOIN runs r ON r.id = n.run_id
JOIN LATERAL (SELECT max(at) AS at FROM bench_commits c
              WHERE c.run_id = n.run_id AND c.node_id = n.node_id) k
  ON true
JOIN LATERAL (SELECT max(at) AS at FROM bench_job_events e
              WHERE e.run_id = n.run_id AND e.node_id = n.node_id AND e.type = 'deferred') d
  ON true
JOIN LATERAL (SELECT max(at) AS at FROM bench_job_events e
              WHERE e.run_id = n.run_id AND e.node_id = n.node_id AND e.type = 'started') f
  ON true
WHERE r.created_at > %s AND n.claimed_by LIKE 'job:%%' AND n.queued_at IS NOT NULL
  AND d.at IS NOT NULL AND f.at IS NOT NULL AND k.at IS NOT NULL
"""

CLAIMS = """
SELECT 1000 * (extract(epoch FROM n.started_at) - extract(epoch FROM n.queued_at))
FROM node_runs n JOIN runs r ON r.id = n.run_id
WHERE r.created_at > %s AND n.claimed_by LIKE 'job:%%' AND n.queued_at IS NOT NULL
  AND n.started_at IS NOT NULL
"""


def delay_graph(seconds: float) -> dict[str, Any]:
    graph = copy.deepcopy(kit.QUEUED_GRAPH)
    for node in graph["nodes"]:
        if node["type"] == "Delay":
            node["data"]["seconds"] = seconds
    return graph


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} (5-min {five:.1f})"


def _db(f: scaleout.Fleet) -> tuple[str, str]:
    return f.db_url.replace("+asyncpg", ""), f.db_url.rsplit("/", 1)[1]


class Poller:
    """The bench's own look-ups in the fleet's database, on one connection, counted: each
    is one transaction the fleet did not make (subtracted from pg_stat_database's count),
    and its backend is left out of the CPU measured."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.pid = int(self.conn.info.backend_pid)
        self.queries = 0

    def one(self, query: str, *params: Any) -> Any:
        self.queries += 1
        return self.conn.execute(query, params).fetchone()  # type: ignore[arg-type]

    def finished(self) -> int:
        row = self.one("select count(*) from runs where status in ('completed', 'failed')")
        return int(row[0])

    def wait_finished(self, target: int, every: float = 0.05, timeout: float = 900) -> float:
        deadline = time.monotonic() + timeout
        while self.finished() < target:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {self.finished()} of {target} runs finished")
            time.sleep(every)
        return time.monotonic()

    def close(self) -> None:
        self.conn.close()


def _setup(f: scaleout.Fleet, graph: dict[str, Any]) -> str:
    _jwt, key = make_account(f.base_url)
    scaleout._grant(f)
    with httpx.Client(
        base_url=f.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        wf = http.post("/api/v1/workflows", json={"name": "w", "graph_json": graph}).json()["id"]
        token = http.post(
            f"/api/v1/workflows/{wf}/webhooks", json={"name": "h", "active": True}
        ).json()["token"]
    return f"/api/v1/webhooks/{token}"


def one_at_a_time(f: scaleout.Fleet, path: str, runs: int) -> list[float]:
    """``runs`` runs, each triggered once the one before ended (its final event on Redis).
    Each run's wall time, trigger sent -> final event received (ms)."""
    client = redis.Redis.from_url(scaleout.REDIS_URL)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(EVENTS_CHANNEL)
    while pubsub.get_message(timeout=1.0) is None and not pubsub.subscribed:
        pass
    walls: list[float] = []
    try:
        with httpx.Client(base_url=f.base_url, timeout=30) as http:
            for i in range(runs):
                sent = time.perf_counter()
                answer = http.post(path, json={"text": f"run {i}", "category": "bench"})
                answer.raise_for_status()
                run_id = answer.json()["run_id"]
                deadline = time.monotonic() + 60
                while True:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"run {run_id} did not end within 60 s")
                    message = pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    body = orjson.loads(message["data"])
                    if any(e["run_id"] == run_id and e["type"] in FINAL for e in body["events"]):
                        break
                walls.append(1000 * (time.perf_counter() - sent))
    finally:
        pubsub.close()
        client.close()
    return walls


def _pct(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{median(values):.1f} / {percentile(values, 99):.1f}"


def _transactions(admin: str, database: str) -> int:
    with psycopg.connect(admin, autocommit=True) as conn:
        row = conn.execute(
            "select xact_commit + xact_rollback from pg_stat_database where datname = %s",
            (database,),
        ).fetchone()
    return int(row[0]) if row else 0


def _meter(f: scaleout.Fleet, database: str, exclude: set[int]) -> Any:
    return kit.CpuMeter(
        {"API replica": [f.api.pid], "workers": [w.pid for w in f.workers]},
        scaleout.PG_ADMIN,
        database,
        exclude=exclude,
    )


def _background(
    f: scaleout.Fleet, database: str, poller: Poller, seconds: float
) -> tuple[float, float]:
    """Transactions and CPU seconds per second of the idle fleet (heartbeats, the
    reconciler, the event links): what a paced load pays whatever it runs."""
    meter = _meter(f, database, {poller.pid})
    time.sleep(STATS_SETTLE_SECONDS)
    x0 = _transactions(scaleout.PG_ADMIN, database)
    meter.start()
    started = time.monotonic()
    time.sleep(seconds)
    cpu = sum(meter.stop().values())
    time.sleep(STATS_SETTLE_SECONDS)
    x1 = _transactions(scaleout.PG_ADMIN, database)
    elapsed = time.monotonic() - started
    # The settle sleep after the window counts as idle too (its heartbeats are in x1).
    return (x1 - x0) / elapsed, cpu / seconds


def claim_hops(args: argparse.Namespace) -> str:
    runs = args.claim_hops
    graph = delay_graph(0)
    with scaleout.fleet(args.workers) as f:
        path = _setup(f, graph)
        url, database = _db(f)
        poller = Poller(url)
        try:
            kit.log("worker path: warm-up, 20 runs one at a time")
            one_at_a_time(f, path, 20)
            kit.log("worker path: idle background (10 s)")
            bg_tx, bg_cpu = _background(f, database, poller, 10.0)
            kit.log(f"  {bg_tx:.1f} transactions/s, {1000 * bg_cpu:.1f} ms CPU/s")
            load0 = load_average()
            (mark,) = poller.one("select now()")
            time.sleep(STATS_SETTLE_SECONDS)
            x0 = _transactions(scaleout.PG_ADMIN, database)
            meter = _meter(f, database, {poller.pid})
            meter.start()
            started = time.monotonic()
            kit.log(f"worker path: {runs} runs one at a time")
            walls = one_at_a_time(f, path, runs)
            loaded = time.monotonic() - started
            cpu = meter.stop()
            time.sleep(STATS_SETTLE_SECONDS)
            x1 = _transactions(scaleout.PG_ADMIN, database)
            elapsed = time.monotonic() - started
            load1 = load_average()
            claims = [float(r[0]) for r in poller.conn.execute(CLAIMS, (mark,)).fetchall()]
            nodes, jobs, created = poller.one(
                "select count(*) filter (where n.claimed_by like 'job:%%'),"
                " count(distinct n.claimed_by) filter (where n.claimed_by like 'job:%%'),"
                " count(distinct r.id)"
                " from node_runs n join runs r on r.id = n.run_id where r.created_at > %s",
                mark,
            )
            raw_tx = (x1 - x0) / runs
            net_tx = (x1 - x0 - bg_tx * elapsed) / runs
            total_cpu = sum(cpu.values())
            net_cpu = total_cpu - bg_cpu * loaded
            # Second pass: the hops, with the job events copied by a trigger.
            poller.conn.execute(COPY_JOB_EVENTS)  # type: ignore[arg-type]
            (mark2,) = poller.one("select now()")
            kit.log(f"worker path: {runs} more runs one at a time, job events copied")
            one_at_a_time(f, path, runs)
            hops = poller.conn.execute(HOPS, (mark2,)).fetchall()  # type: ignore[arg-type]
            load2 = load_average()
        finally:
            poller.close()
    rows = [
        ("runs, one at a time", f"{runs} (+{runs} for the hops)"),
        ("load average before / after / after the hops pass", f"{load0}; {load1}; {load2}"),
        ("run wall, trigger sent -> final event received, p50 / p99 (ms)", _pct(walls)),
        (
            "node claim latency, queued (before the commit) -> started, p50 / p99 (ms)",
            _pct(claims) + f" ({len(claims)} nodes)",
        ),
        (
            "nodes started by a worker's job (queue jobs), per run",
            f"{int(nodes) / max(1, int(created)):.2f} ({int(jobs) / max(1, int(created)):.2f})",
        ),
        ("hop queued -> deferred, p50 / p99 (ms)", _pct([float(h[0]) for h in hops])),
        ("hop deferred -> fetched by a worker, p50 / p99 (ms)", _pct([float(h[1]) for h in hops])),
        ("hop fetched -> started (claim step), p50 / p99 (ms)", _pct([float(h[2]) for h in hops])),
        ("queued -> started in the hops pass, p50 / p99 (ms)", _pct([float(h[3]) for h in hops])),
        ("hop deferred -> committed, p50 / p99 (ms)", _pct([float(h[4]) for h in hops])),
        (
            "node claim latency, committed -> started (hops pass), p50 / p99 (ms)",
            _pct([float(h[5]) for h in hops]),
        ),
        (
            "database transactions per run: measured / net of the idle background",
            f"{raw_tx:.1f} / {net_tx:.1f} (idle fleet: {bg_tx:.1f}/s)",
        ),
        (
            "machine CPU ms per run: measured / net of the idle background",
            f"{1000 * total_cpu / runs:.1f} / {1000 * net_cpu / runs:.1f} ("
            + ", ".join(f"{k} {1000 * v / runs:.1f}" for k, v in cpu.items())
            + f"; idle fleet: {1000 * bg_cpu:.1f} ms/s)",
        ),
    ]
    return table(rows, ("measure (TextInput -> Delay 0 s -> TextTemplate)", "value"))


def _scaling_once(
    workers: int, concurrency: int, seconds: float, runs: int
) -> tuple[float, float, str]:
    """Completed runs/s and machine CPU ms per run of ``runs`` runs at c=50."""
    with scaleout.fleet(workers, concurrency) as f:
        path = _setup(f, delay_graph(seconds))
        url, database = _db(f)
        poller = Poller(url)
        try:
            one_at_a_time(f, path, 5)
            done = poller.finished()
            meter = _meter(f, database, {poller.pid})
            meter.start()
            started = time.monotonic()
            kit.run_wrk(
                f.base_url, [path], connections=50, seconds=600, server_pid=f.api.pid,
                stop_after=runs,
            )  # fmt: skip
            ended = poller.wait_finished(done + runs)
            cpu = sum(meter.stop().values())
            load = load_average()
        finally:
            poller.close()
    return runs / (ended - started), 1000 * cpu / runs, load


def scaling(args: argparse.Namespace, runs: int) -> tuple[str, dict[float, float]]:
    """The table, and 2 workers' completed runs/s over 1 worker's by the Delay's seconds."""
    concurrency = args.scaling_concurrency
    rows = []
    ratios: dict[float, float] = {}
    for seconds in (args.scaling_delay, 0.0):
        rates = []
        # Without a wait a run takes a few ms of CPU: at ~10x the slot-bound rate, 160 runs
        # are over within a second, and the ramp of wrk's first connections weighs on them.
        n = runs if seconds else runs * CPU_BOUND_RUNS_FACTOR
        for workers in (1, 2):
            kit.log(f"scaling: Delay {seconds:g} s, {workers} worker(s), {n} runs at c=50")
            rate, cpu, load = _scaling_once(workers, concurrency, seconds, n)
            kit.log(f"  {rate:.1f} runs/s, {cpu:.1f} ms CPU/run, load {load}")
            rates.append(rate)
            bound = f"{workers * concurrency / seconds:.0f}" if seconds else "CPU"
            rows.append(
                (f"{seconds:g} s", str(workers), str(n), f"{rate:.1f}", bound, f"{cpu:.1f}", load)
            )
        ratios[seconds] = rates[1] / rates[0]
        rows.append((f"{seconds:g} s", "2 / 1", "", f"{ratios[seconds]:.2f}x", "", "", ""))
    text = table(
        rows,
        (
            "Delay",
            "workers",
            "runs",
            "completed runs/s",
            f"slot bound (runs/s, {concurrency} jobs per worker)",
            "machine CPU ms/run",
            "load average after",
        ),
    )
    return text, ratios


def main(args: argparse.Namespace) -> None:
    if args.claim_hops:
        print(claim_hops(args))
    if args.scaling:
        print(scaling(args, args.scaling)[0])
