"""Batches (issue 22): a 1,000-item batch of instant nodes, and a 100-item batch of 1-second
Delay calls with concurrency 20, whose wall time should be within 10 % of 100 / 20 x 1 s.

    .venv/bin/python -m bench.bench_batches
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx

from bench.common import (
    grant_credits,
    make_account,
    median,
    metric,
    server,
    table,
    write_section,
)

COMMAND = ".venv/bin/python -m bench.bench_batches"
REPEATS = 3
# The run's own bound (a ForEach's concurrency is at most that many nodes of one run).
SERVER_ENV = {"NODELOOM_MAX_CONCURRENT_NODES_PER_RUN": "32", "NODELOOM_MAX_CONCURRENT_NODES": "64"}


def batch_graph(items: int, per_item: dict[str, Any], concurrency: int) -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
            {
                "id": "each",
                "type": "ForEach",
                "position": {"x": 1, "y": 0},
                "data": {"concurrency": concurrency, "max_items": items},
            },
            {"id": "item", "position": {"x": 2, "y": 0}, **per_item},
            {"id": "all", "type": "Collect", "position": {"x": 3, "y": 0}, "data": {}},
        ],
        "edges": [
            {"id": "a", "source": "in", "target": "each"},
            {"id": "b", "source": "each", "target": "item"},
            {"id": "c", "source": "item", "target": "all"},
        ],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }


def timed_run(http: httpx.Client, wf: str, items: int) -> tuple[float, dict[str, Any]]:
    """Execute to the run's end, watched on the metrics counters (a GET of a run of 2,000
    node runs costs the server more than its items do: that is not what is measured)."""
    text = "\n".join(f"item {i}" for i in range(items))
    base = str(http.base_url)
    target = finished(base) + 1
    started = time.monotonic()
    run_id = http.post(
        f"/api/v1/workflows/{wf}/execute", json={"input": {"text": text}, "cache": False}
    ).json()["run_id"]
    while finished(base) < target:
        time.sleep(0.01)
    wall = time.monotonic() - started
    run: dict[str, Any] = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
    return wall, run


def finished(base_url: str) -> float:
    return metric(base_url, "nodeloom_runs_completed_total") + metric(
        base_url, "nodeloom_runs_failed_total"
    )


def main() -> None:
    rows: list[tuple[Any, ...]] = []
    with server(SERVER_ENV) as srv:
        _, key = make_account(srv.base_url)
        grant_credits(srv.data_dir)
        with httpx.Client(
            base_url=srv.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as http:
            cases = [
                (
                    "1,000 items of TextTemplate (instant), concurrency 100",
                    1000,
                    {"type": "TextTemplate", "data": {"template": "{{ text }}!"}},
                    100,
                    None,
                ),
                (
                    "100 items of Delay 1 s, concurrency 20",
                    100,
                    {"type": "Delay", "data": {"seconds": 1}},
                    20,
                    100 / 20 * 1.0,
                ),
            ]
            for name, items, per_item, concurrency, ideal in cases:
                graph = batch_graph(items, per_item, concurrency)
                wf = http.post("/api/v1/workflows", json={"name": name, "graph_json": graph})
                assert wf.status_code == 201, wf.text
                walls = []
                for _ in range(REPEATS):
                    wall, run = timed_run(http, wf.json()["id"], items)
                    assert run["status"] == "completed", run
                    assert len(run["node_runs"]) == 2 + 2 * items + 1, len(run["node_runs"])
                    walls.append(wall)
                wall = median(walls)
                rows.append(
                    (
                        name,
                        f"{wall:.2f} s",
                        f"{wall / items * 1000:.2f} ms",
                        f"{ideal:.1f} s, {100 * (wall - ideal) / ideal:+.1f} %" if ideal else "—",
                    )
                )
                print(rows[-1], flush=True)
    body = (
        "A run of `TextInput -> ForEach -> <item node> -> Collect` against one `nodeloom serve` "
        "(SQLite, the in-process driver), timed from execute until the server's finished-runs "
        f"counter moves (`/metrics`, read every 10 ms); the median of {REPEATS} runs, the "
        "output cache off, items in flight per account at the default cap (64: the instant "
        "batch's concurrency of 100 runs at most 64 items at once). "
        f"Load average when it ended: {os.getloadavg()[0]:.1f} (other "
        "work on the machine shows in these figures).\n\n"
        + table(rows, ("batch", "wall (median)", "per item", "ideal, overshoot"))
    )
    write_section("batches", COMMAND, body)


if __name__ == "__main__":
    main()
