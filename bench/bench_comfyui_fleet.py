"""A fleet of ComfyUI servers: N prompts of S seconds over K one-slot servers, through a real
``nodeloom serve`` (SQLite), and the same with one server killed partway.

Each server is the fake ComfyUI of the tests (tests/comfyui_fake.py: ComfyUI's HTTP and
WebSocket protocol), in a process of its own on 127.0.0.1, running one prompt at a time; a
prompt's ``KSampler`` takes S seconds. One ``comfyui`` credential names the K servers
(``max_in_flight`` 1 each), one workflow holds a ``ComfyUIWorkflow`` node, and N runs of it
are executed at once. Reported: the wall time from the first execute to the last run
finished, the ideal (ceil(N / K) * S), how many prompts each server ran (its /history), and
how many runs completed. ``--kill-at T`` SIGKILLs the first server T seconds after the
first execute: its prompt is submitted again on another server.

    .venv/bin/python -m bench.bench_comfyui_fleet --prompts 40 --servers 4 --seconds 1
    .venv/bin/python -m bench.bench_comfyui_fleet --prompts 40 --servers 4 --seconds 1 --kill-at 3

Only ever talks to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import multiprocessing as mp
import os
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import free_port, grant_credits, make_account, server, table, write_section

STEPS = 4


def serve_fake(port: int, seconds: float) -> None:
    from tests.comfyui_fake import FakeComfyUI, running

    fake = FakeComfyUI(steps=STEPS, step_seconds=seconds / STEPS, port=port)
    with running(fake):
        threading.Event().wait()


def graph(credential: str) -> dict[str, Any]:
    from tests.comfyui_fake import SDXL_WORKFLOW

    data = {
        "workflow": copy.deepcopy(SDXL_WORKFLOW),
        "output": {"node": "9"},
        "credential": credential,
    }
    return {
        "nodes": [
            {"id": "comfy", "type": "ComfyUIWorkflow", "position": {"x": 0, "y": 0}, "data": data}
        ],
        "edges": [],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }


def wait_listening(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/system_stats", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not start")
        time.sleep(0.05)


def measure(prompts: int, servers: int, seconds: float, kill_at: float | None) -> dict[str, Any]:
    ports = [free_port() for _ in range(servers)]
    procs = [mp.Process(target=serve_fake, args=(p, seconds), daemon=True) for p in ports]
    for proc in procs:
        proc.start()
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    try:
        for url in urls:
            wait_listening(url)
        env = {"NODELOOM_HTTP_ALLOWLIST": json.dumps(["127.0.0.1"])}
        with server(env, start_timeout=120) as srv:
            make_account(srv.base_url)
            grant_credits(srv.data_dir)
            _, key = make_account(srv.base_url)
            headers = {"Authorization": f"Bearer {key}"}
            with httpx.Client(
                base_url=srv.base_url + "/api/v1", headers=headers, timeout=30
            ) as api:
                fields = {
                    "servers": [{"base_url": u, "name": f"gpu{i}"} for i, u in enumerate(urls)]
                }
                r = api.post(
                    "/credentials", json={"name": "fleet", "kind": "comfyui", "fields": fields}
                )
                r.raise_for_status()
                r = api.post(
                    "/workflows", json={"name": "fleet", "graph_json": graph(r.json()["id"])}
                )
                r.raise_for_status()
                wf = r.json()["id"]
                started, started_wall = time.monotonic(), time.time()
                killed = False
                for _ in range(prompts):
                    api.post(f"/workflows/{wf}/execute", json={"cache": False}).raise_for_status()
                while True:
                    if kill_at is not None and not killed and time.monotonic() - started >= kill_at:
                        os.kill(procs[0].pid or 0, signal.SIGKILL)
                        killed = True
                    runs = api.get(f"/workflows/{wf}/runs", params={"limit": 200}).json()
                    if all(run["status"] not in ("queued", "running") for run in runs):
                        break
                    if time.monotonic() - started > 300:
                        raise RuntimeError("the runs did not finish within 300 s")
                    # Polled gently: the bench shares the server's event loop and the
                    # machine; the wall is read from the runs' own finished_at.
                    time.sleep(0.25 if kill_at is None or killed else 0.02)
                last = max(datetime.fromisoformat(run["finished_at"]).timestamp() for run in runs)
                wall = last - started_wall
                statuses = [run["status"] for run in runs]
                for run in runs:
                    if run["status"] != "completed":
                        detail = api.get(f"/workflows/{wf}/runs/{run['id']}").json()
                        errors = [n["error"] for n in detail["node_runs"] if n["error"]]
                        print(
                            json.dumps(
                                {"run": run["id"], "status": run["status"], "errors": errors}
                            )
                        )
                servers_ran = Counter(
                    node.get("server")
                    for run in runs
                    for node in api.get(f"/workflows/{wf}/runs/{run['id']}").json()["node_runs"]
                )
        ran, gaps, firsts, lengths = [], [], [], []
        for i, url in enumerate(urls):
            if kill_at is not None and i == 0:
                ran.append("killed")
                continue
            history = httpx.get(url + "/history", timeout=5).json()
            ran.append(str(len(history)))
            spans = sorted(span for entry in history.values() if (span := _span(entry)))
            if spans:
                firsts.append(spans[0][0] - started_wall)
            gaps += [later[0] - earlier[1] for earlier, later in itertools.pairwise(spans)]
            lengths += [end - start for start, end in spans]
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(5)
    return {
        "wall": wall,
        "ideal": math.ceil(prompts / servers) * seconds,
        "completed": statuses.count("completed"),
        "runs": len(statuses),
        "per_server": ran,
        "node_runs_by_server": dict(servers_ran),
        # Between a server ending a prompt and starting its next: our share of the wall.
        "gap_p50": statistics.median(gaps) if gaps else None,
        "gap_max": max(gaps) if gaps else None,
        "first_start_max": max(firsts) if firsts else None,
        "prompt_p50": statistics.median(lengths) if lengths else None,
    }


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def _span(entry: dict[str, Any]) -> tuple[float, float] | None:
    """(start, end) in Unix seconds of a finished prompt, from the execution_start and
    execution_success timestamps (milliseconds) of its history entry, as ComfyUI records them."""
    stamps = {
        kind: data.get("timestamp")
        for kind, data in entry.get("status", {}).get("messages", [])
        if isinstance(data, dict)
    }
    start, end = stamps.get("execution_start"), stamps.get("execution_success")
    if not isinstance(start, int | float) or not isinstance(end, int | float):
        return None
    return start / 1000, end / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--kill-at", type=float, default=None)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    rows = []
    for kill in [None, args.kill_at] if args.kill_at is not None else [None]:
        result = measure(args.prompts, args.servers, args.seconds, kill)
        print(json.dumps({"kill_at": kill, **result}))
        rows.append(
            (
                "none" if kill is None else f"server gpu0 SIGKILLed at {kill:g} s",
                f"{result['completed']}/{result['runs']}",
                f"{result['wall']:.2f}",
                f"{result['ideal']:g}",
                " / ".join(result["per_server"]),
                _ms(result["first_start_max"]),
                _ms(result["prompt_p50"]),
                f"{_ms(result['gap_p50'])} / {_ms(result['gap_max'])}",
                f"{os.getloadavg()[0]:.1f}",
            )
        )
    body = (
        f"{args.prompts} ComfyUIWorkflow runs executed at once, each prompt {args.seconds:g} s on "
        f"the fake ComfyUI, over {args.servers} one-slot servers (one comfyui credential "
        "naming them all); embedded `nodeloom serve` on SQLite. Wall: first execute to last "
        "run finished (the runs' finished_at). From the servers' own history timestamps "
        "(execution_start / execution_success, as ComfyUI records them): when the last server "
        "started its first prompt, how long a prompt took on the fake, and the gap between a "
        "server ending a prompt and starting its next (our share of the wall: the result "
        "seen, the slot handed over, the next POST). The machine is shared with other work "
        "(2 cores): figures vary with its load.\n\n"
        + table(
            rows,
            (
                "killed",
                "completed",
                "wall s",
                "ideal s",
                "prompts per server",
                "first start ms",
                "prompt p50 ms",
                "gap p50 / max ms",
                "load (1 min)",
            ),
        )
    )
    command = "python -m bench.bench_comfyui_fleet " + " ".join(sys.argv[1:])
    if not args.no_write:
        write_section("comfyui_fleet", command.strip(), "### ComfyUI fleet\n\n" + body)


if __name__ == "__main__":
    main()
