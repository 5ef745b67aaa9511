"""What one accepted webhook trigger costs an API replica on PostgreSQL (issue #20).

    .venv/bin/python -m bench.bench_accept [--runs 2000] [--concurrency 50] [--repeat]
        [--processes 1]

One ``nodeloom serve --no-worker`` on a scratch PostgreSQL database with Redis (no worker:
the 2-node TextInput -> TextTemplate runs are executed while the replica accepts them), its
database and Redis connections going through counting proxies (bench/wire_counts.py).
``--runs`` triggers at c=``--concurrency`` (after a warm-up), each body unique so the node
cache never answers (``--repeat``: one body, so after the first every node is a cache hit).
Per accepted trigger it reports:

- CPU ms of the replica and of its database's PostgreSQL backends (/proc);
- database transactions (pg_stat_database), round trips (a Sync or a simple Query, each
  waiting for the server) and statements prepared (Parse) as the proxy saw them;
- Redis commands the replica sent;
- the rate and p50/p99 (with the proxies' hop in the way: compare rates with bench_queue_mode's)
  and the load average, since other work on the machine inflates all of these.

``--no-proxy`` connects directly (rates and CPU without the proxies' hops; no counts);
``--profile OUT`` records the replica with py-spy during the measured load (raw stacks into
OUT) and prints its top frames. Prints a table; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from bench import bench_peers as peers
from bench import bench_scaleout as scaleout
from bench import peers_kit as kit
from bench.bench_queue_mode import _transactions
from bench.common import (
    RAISED_LIMITS,
    WEBHOOK_GRAPH,
    free_port,
    make_account,
    proc_stat,
    wait_healthy,
)
from bench.peers_kit import backends
from bench.wire_counts import CountingProxy, postgres_proxy, redis_proxy


def _via(url: str, proxy: CountingProxy | None) -> str:
    if proxy is None:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def _backend_cpu(database: str) -> dict[int, float]:
    return {
        pid: stat[1]
        for pid in backends(scaleout.PG_ADMIN, database)
        if (stat := proc_stat(pid)) is not None
    }


def main(args: argparse.Namespace) -> None:
    peers.ensure_wrk()
    pg = urlsplit(scaleout.PG_ADMIN)
    redis = urlsplit(scaleout.REDIS_URL)
    pg_proxy = redis_counter = None
    if not args.no_proxy:
        pg_proxy = postgres_proxy(pg.hostname or "127.0.0.1", pg.port or 5432)
        redis_counter = redis_proxy(redis.hostname or "127.0.0.1", redis.port or 6379)
    with scaleout.scratch_database() as db_url, tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        port = free_port()
        env = {
            **os.environ,
            **RAISED_LIMITS,
            "NODELOOM_DATA_DIR": str(data),
            "NODELOOM_DATABASE_URL": _via(db_url, pg_proxy),
            "NODELOOM_REDIS_URL": _via(scaleout.REDIS_URL, redis_counter),
            "NODELOOM_SECRET_KEY": "bench-secret-" + "x" * 40,
            "NODELOOM_BASE_URL": f"http://127.0.0.1:{port}",
        }
        serve = ["serve", "--no-worker", "--port", str(port), "--processes", str(args.processes)]
        api = scaleout._cli(env, *serve, log=data / "api.log")
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base_url, api, data / "api.log", timeout=60)
            _jwt, key = make_account(base_url)
            scaleout._grant(scaleout.Fleet(base_url, db_url, env, api, []))
            with httpx.Client(
                base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
            ) as http:
                wf = http.post(
                    "/api/v1/workflows", json={"name": "accept", "graph_json": WEBHOOK_GRAPH}
                ).json()["id"]
                token = http.post(
                    f"/api/v1/workflows/{wf}/webhooks", json={"name": "h", "active": True}
                ).json()["token"]
            paths = [f"/api/v1/webhooks/{token}"]
            kit.log("warm-up")
            kit.run_wrk(base_url, paths, connections=10, seconds=3, server_pid=api.pid)
            if args.repeat:
                # Every body of the measured load was seen in the warm-up: all cache hits.
                kit.run_wrk(
                    base_url,
                    paths,
                    connections=10,
                    seconds=600,
                    server_pid=api.pid,
                    stop_after=args.runs,
                    nonce="",
                )
            time.sleep(2)
            database = db_url.rsplit("/", 1)[1]
            xacts0 = _transactions(scaleout.PG_ADMIN, database)
            pg0 = pg_proxy.snapshot() if pg_proxy else Counter()
            redis0 = redis_counter.snapshot() if redis_counter else Counter()
            backend0 = _backend_cpu(database)
            replica0 = kit.tree_cpu_seconds(api.pid)
            spy = None
            if args.profile:
                spy = subprocess.Popen(
                    [str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(api.pid),
                     "-d", "600", "-f", "raw", "-o", args.profile, "--nonblocking"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                time.sleep(1)
            kit.log(f"{args.runs} triggers at c={args.concurrency}")
            load = kit.run_wrk(
                base_url,
                paths,
                connections=args.concurrency,
                seconds=600,
                server_pid=api.pid,
                stop_after=args.runs,
                nonce="" if args.repeat else None,
            )
            replica = kit.tree_cpu_seconds(api.pid) - replica0
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes what it recorded
                spy.wait(60)
            backend1 = _backend_cpu(database)
            backend = sum(cpu - backend0.get(pid, 0.0) for pid, cpu in backend1.items())
            time.sleep(2)  # pg_stat_database's counters arrive within a second or so
            xacts = _transactions(scaleout.PG_ADMIN, database) - xacts0
            pg1 = pg_proxy.snapshot() if pg_proxy else Counter()
            redis1 = redis_counter.snapshot() if redis_counter else Counter()
        finally:
            kit.stop_pid(api.pid)
    n = load.ok
    rows = [
        ("accepted triggers", f"{n} ({load.non_2xx} refused)"),
        ("accepted/s, p50 / p99 ms", f"{load.rps_ok:,.0f}, {load.p50_ms:.1f} / {load.p99_ms:.1f}"),
        ("replica CPU ms per trigger", f"{1000 * replica / n:.2f}"),
        ("PostgreSQL backends CPU ms per trigger", f"{1000 * backend / n:.2f}"),
        ("database transactions per trigger", f"{xacts / n:.2f}"),
    ]
    if pg_proxy is not None and redis_counter is not None:
        sent = pg1 - pg0
        rows += [
            ("database round trips per trigger", f"{(sent['S'] + sent['Q']) / n:.2f}"),
            ("  of which simple queries (BEGIN, COMMIT...)", f"{sent['Q'] / n:.2f}"),
            ("  statements bound (Bind) per trigger", f"{sent['B'] / n:.2f}"),
            ("  statements prepared (Parse) per trigger", f"{sent['P'] / n:.2f}"),
            ("Redis commands per trigger", f"{(redis1 - redis0)['command'] / n:.2f}"),
        ]
    rows += [
        ("machine busy during the load", f"{load.machine_busy_pct:.0f}%"),
        ("load average (1 min) after", f"{os.getloadavg()[0]:.1f}"),
    ]
    width = max(len(r[0]) for r in rows)
    print("\n".join(f"{name.ljust(width)}  {value}" for name, value in rows))
    if args.profile:
        print(peers.summarize_profile(Path(args.profile), top=20))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000, help="triggers measured")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--repeat", action="store_true", help="one body: all cache hits")
    parser.add_argument(
        "--processes", type=int, default=1, help="the replica's processes (serve --processes)"
    )
    parser.add_argument("--no-proxy", action="store_true", help="connect directly, no counts")
    parser.add_argument("--profile", metavar="OUT", help="py-spy the replica into OUT (raw)")
    main(parser.parse_args())
