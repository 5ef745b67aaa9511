"""Memory under a long load: one ``nodeloom serve`` kept at about ``--in-flight`` runs
accepted and not yet finished (each run: TextInput -> Delay 2 s -> TextTemplate, so runs
stay in flight) for ``--minutes``; the server's RSS sampled every 10 s.

    .venv/bin/python -m bench.bench_soak [--minutes 10] [--in-flight 1000] [--write]

Runs beyond the server's ``NODELOOM_MAX_ACTIVE_RUNS`` wait in its queue: they count as in
flight (accepted, safe in the database, not finished), which is what a burst looks like.
Reports RSS at the first sample after the warm-up, the peak, the last sample, and the slope
of a least-squares line through the samples (MB per minute): flat means no leak.
"""

from __future__ import annotations

import argparse
import sqlite3
import threading
import time
from pathlib import Path

import httpx

from bench.common import grant_credits, make_account, metric, server, table, write_section

GRAPH = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {"id": "wait", "type": "Delay", "position": {"x": 1, "y": 0}, "data": {"seconds": 2}},
        {
            "id": "out",
            "type": "TextTemplate",
            "position": {"x": 2, "y": 0},
            "data": {"template": "{{ text }} done"},
        },
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "wait"},
        {"id": "e2", "source": "wait", "target": "out"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}


def in_flight(db_file: Path) -> int:
    with sqlite3.connect(db_file) as conn:
        (count,) = conn.execute("select count(*) from runs where status='running'").fetchone()
    return int(count)


def feeder(
    base_url: str, key: str, wf: str, target: int, db_file: Path, stop: threading.Event
) -> None:
    """Keep about ``target`` runs in flight: top up every 100 ms."""
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        i = 0
        while not stop.is_set():
            missing = target - in_flight(db_file)
            for _ in range(max(0, min(missing, 200))):
                i += 1
                http.post(f"/api/v1/workflows/{wf}/execute", json={"input": {"text": f"s{i}"}})
            time.sleep(0.1)


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return (cov / var) * 60 if var else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    with server() as srv:
        _jwt, key = make_account(srv.base_url)
        grant_credits(srv.data_dir)
        db_file = srv.data_dir / "nodeloom.db"
        with httpx.Client(
            base_url=srv.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as http:
            wf = http.post("/api/v1/workflows", json={"name": "soak", "graph_json": GRAPH}).json()[
                "id"
            ]
        stop = threading.Event()
        feed = threading.Thread(
            target=feeder, args=(srv.base_url, key, wf, args.in_flight, db_file, stop)
        )
        feed.start()
        time.sleep(30)  # warm-up: the backlog fills, caches and pools reach their size
        samples: list[tuple[float, float]] = []
        flights: list[int] = []
        sqlite_mb: list[tuple[float, float]] = []  # SQLite's own memory, part of the RSS
        start = time.monotonic()
        try:
            while time.monotonic() - start < args.minutes * 60:
                at = time.monotonic() - start
                samples.append((at, srv.rss_mb()))
                sqlite_mb.append((at, metric(srv.base_url, "nodeloom_sqlite_memory_bytes") / 1e6))
                flights.append(in_flight(db_file))
                time.sleep(10)
        finally:
            stop.set()
            feed.join()
        with sqlite3.connect(db_file) as conn:
            (completed,) = conn.execute(
                "select count(*) from runs where status='completed'"
            ).fetchone()
    rest = [(t, rss - mb) for (t, rss), (_, mb) in zip(samples, sqlite_mb, strict=True)]
    rows = [
        (
            "runs in flight while sampled (min / median / max)",
            f"{min(flights)} / {sorted(flights)[len(flights) // 2]} / {max(flights)}",
        ),
        ("runs completed during the soak (incl. warm-up)", completed),
        ("RSS first sample (MB)", f"{samples[0][1]:.0f}"),
        ("RSS peak (MB)", f"{max(v for _, v in samples):.0f}"),
        ("RSS last sample (MB)", f"{samples[-1][1]:.0f}"),
        ("RSS slope (MB per minute)", f"{slope_per_minute(samples):+.2f}"),
        (
            "of which SQLite's page caches and statements, first / last (MB)",
            f"{sqlite_mb[0][1]:.0f} / {sqlite_mb[-1][1]:.0f}",
        ),
        ("RSS less SQLite's memory: slope (MB per minute)", f"{slope_per_minute(rest):+.2f}"),
    ]
    text = (
        f"One `nodeloom serve` (embedded SQLite) kept at ~{args.in_flight} runs in flight for "
        f"{args.minutes:g} minutes after a 30 s warm-up (TextInput -> Delay 2 s -> TextTemplate); "
        "RSS of the server process (sandbox processes excluded: they are budgeted apart), "
        "sampled every 10 s, with what SQLite reports holding (`nodeloom_sqlite_memory_bytes`):"
        " its page cache (16 MB at most per connection) fills as the database grows, which "
        "the RSS shows as growth until the cache is full.\n\n" + table(rows, ("measure", "value"))
    )
    print(text)
    if args.write:
        write_section("soak", ".venv/bin/python -m bench.bench_soak --write", text)


if __name__ == "__main__":
    main()
