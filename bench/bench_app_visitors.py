"""Many visitors running a workflow app at once (issue 35), against a real ``nodeloom serve``
(embedded, SQLite) on 127.0.0.1.

    .venv/bin/python -m bench.bench_app_visitors [--visitors 200] [--bits 16] [--write]

The app is the small one of the other benches (TextInput -> TextTemplate), published
``public`` with its owner's defaults (20 runs per visitor and 60 per address an hour, no
budget, no cap on runs at once). Each visitor does what the app's page does: reads the form,
sends a run (JSON, its own ``X-Visitor-Session``), follows the run's Server-Sent Events
(``?token=``) until the record says completed, and checks the greeting it got. All visitors
start at the same moment (one burst).

**Distinct visitors, as a crowd is.** The per-address limit counts by the client address
the server sees. Each visitor sends from an address of its own in the loopback range
(127.0.1.1, 127.0.1.2, …: Linux routes all of 127.0.0.0/8 to the loopback interface), on
connections of its own, so the server sees 200 clients, as it would 200 phones, and no limit
is raised and no forwarded-address trust is needed. (Behind a reverse proxy the same is had
with ``NODELOOM_FORWARDED_ALLOW_IPS``; see docs/apps.md.)

**Two rounds**: without a proof of work, then with ``--bits`` (the app changed with
``PATCH challenge_bits``): each visitor's proof is found before the burst, as each visitor's
own device would (the bench's two cores would otherwise spend the burst hashing), so the
figure is the server's cost of checking and spending the proofs, not the hashing.

Reported: time to result (the run sent -> the completed record on the stream) p50/p99/max,
the form read p50/p99, errors (any answer but 200/202, a stream ending without the result,
a wrong greeting, a 60 s timeout), the burst's wall time and the server's CPU and peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench.common import (
    WEBHOOK_GRAPH,
    grant_credits,
    make_account,
    percentile,
    proc_stat,
    server,
    table,
    write_section,
)

COMMAND = ".venv/bin/python -m bench.bench_app_visitors --write"
TIMEOUT = 60.0
GRAPH: dict[str, Any] = {
    **WEBHOOK_GRAPH,
    "nodes": [
        {**WEBHOOK_GRAPH["nodes"][0], "data": {"key": "name", "text": "world"}},
        {**WEBHOOK_GRAPH["nodes"][1], "data": {"template": "Hello {{ text }}!"}},
    ],
}


@dataclass
class Visit:
    form_ms: float = 0.0
    result_ms: float = 0.0
    error: str | None = None


@dataclass
class Round:
    name: str
    visits: list[Visit] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0


def address(round_no: int, i: int) -> str:
    """The visitor's own loopback address: 127.<1 + 4 * round + i // 250>.0.<1 + i % 250>."""
    third, fourth = divmod(i, 250)
    return f"127.{round_no * 4 + 1 + third}.0.{fourth + 1}"


def solve(token: str, bits: int) -> str:
    """The proof the page would find: SHA-256 of ``token:s`` starts with ``bits`` zeros."""
    for i in itertools.count():
        digest = hashlib.sha256(f"{token}:{i}".encode()).digest()
        if int.from_bytes(digest, "big") >> (256 - bits) == 0:
            return str(i)
    raise AssertionError("unreachable")


async def result_from_stream(http: httpx.AsyncClient, path: str, token: str) -> dict[str, Any]:
    """The last ``run`` record of the run's event stream (it ends when the run ends)."""
    record: dict[str, Any] = {}
    event = ""
    async with http.stream("GET", path, params={"token": token}) as stream:
        if stream.status_code != 200:
            raise RuntimeError(f"events {stream.status_code}")
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "run":
                record = orjson.loads(line[6:])
            elif line.startswith("data: ") and event == "closed":
                raise RuntimeError("stream closed")
    return record


async def visitor(
    base: str, slug: str, addr: str, i: int, start: asyncio.Event, proof: dict[str, str]
) -> Visit:
    visit = Visit()
    # A connection per request, as a visitor who types between reading the form and running
    # it (a browser's idle connection is closed by the server's 5 s keep-alive meanwhile).
    # Reused connections raced that timeout on this starved machine: the server closed one
    # as the next request went out on it (ReadError), which a browser retries and httpx
    # does not.
    transport = httpx.AsyncHTTPTransport(
        local_address=addr, limits=httpx.Limits(max_keepalive_connections=0)
    )
    async with httpx.AsyncClient(base_url=base, transport=transport, timeout=TIMEOUT) as http:
        await start.wait()
        phase = "form"
        try:
            t0 = time.perf_counter()
            form = await http.get(f"/api/v1/public/apps/{slug}")
            visit.form_ms = (time.perf_counter() - t0) * 1000
            if form.status_code != 200:
                raise RuntimeError(f"form {form.status_code}")
            name = f"visitor {i}"
            t1 = time.perf_counter()
            phase = "run"
            sent = await http.post(
                f"/api/v1/public/apps/{slug}/runs",
                json={"input": {"name": name}},
                headers={"X-Visitor-Session": f"session-{addr}", **proof},
            )
            if sent.status_code != 202:
                raise RuntimeError(f"run {sent.status_code} {sent.json().get('code')}")
            accepted = sent.json()
            phase = "events"
            record = await asyncio.wait_for(
                result_from_stream(
                    http,
                    f"/api/v1/public/apps/{slug}/runs/{accepted['run_id']}/events",
                    accepted["visitor_token"],
                ),
                TIMEOUT,
            )
            visit.result_ms = (time.perf_counter() - t1) * 1000
            texts = [o.get("text") for o in record.get("outputs", [])]
            if record.get("status") != "completed" or texts != [f"Hello {name}!"]:
                raise RuntimeError(f"result {record.get('status')} {texts}")
        except Exception as exc:  # every failure is counted, by its kind
            visit.error = f"{phase}: {str(exc)[:80] or type(exc).__name__}"
    return visit


async def burst(
    base: str, slug: str, round_no: int, visitors: int, bits: int | None, pid: int
) -> Round:
    proofs: list[dict[str, str]] = [{} for _ in range(visitors)]
    if bits:
        # Each visitor's proof, found before the burst (its own device's work, not the
        # server's): a challenge from the form, solved here.
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as http:
            for i in range(visitors):
                challenge = (await http.get(f"/api/v1/public/apps/{slug}")).json()["challenge"]
                proofs[i] = {
                    "X-App-Challenge": challenge["token"],
                    "X-App-Solution": await asyncio.to_thread(solve, challenge["token"], bits),
                }
    start = asyncio.Event()
    tasks = [
        asyncio.create_task(visitor(base, slug, address(round_no, i), i, start, proofs[i]))
        for i in range(visitors)
    ]
    await asyncio.sleep(0.5)  # every client made and waiting on the event
    cpu_before = proc_stat(pid)
    began = time.perf_counter()
    start.set()
    visits = await asyncio.gather(*tasks)
    wall = time.perf_counter() - began
    cpu_after = proc_stat(pid)
    cpu = cpu_after[1] - cpu_before[1] if cpu_before and cpu_after else float("nan")
    return Round("", list(visits), wall, cpu)


def report(rounds: list[Round], visitors: int, peak_rss: float) -> str:
    rows = []
    for r in rounds:
        ok = [v for v in r.visits if v.error is None]
        errors: dict[str, int] = {}
        for v in r.visits:
            if v.error:
                errors[v.error] = errors.get(v.error, 0) + 1
        results = [v.result_ms for v in ok]
        forms = [v.form_ms for v in r.visits if v.form_ms]
        rows.append(
            (
                r.name,
                f"{len(ok)}/{visitors}",
                f"{percentile(results, 50):.0f} / {percentile(results, 99):.0f} / "
                f"{max(results, default=float('nan')):.0f}",
                f"{percentile(forms, 50):.0f} / {percentile(forms, 99):.0f}",
                ", ".join(f"{k}: {n}" for k, n in errors.items()) or "0",
                f"{r.wall_s:.1f}",
                f"{r.cpu_s:.1f}",
            )
        )
    header = (
        "round",
        "completed",
        "time to result p50 / p99 / max (ms)",
        "form read p50 / p99 (ms)",
        "errors",
        "burst wall (s)",
        "server CPU (s)",
    )
    return (
        f"### Workflow apps: {visitors} visitors at once (issue 35)\n\n"
        f"{visitors} visitors start at the same moment, each from its own loopback address "
        "with its own visitor session, on an app of TextInput -> TextTemplate (public, the "
        "default limits: 20 runs per visitor and 60 per address an hour). Each reads the "
        "form, sends a run and follows its event stream to the result, as the page does. "
        "Time to result: the run sent -> the completed record on the stream. One "
        "`nodeloom serve` (embedded, SQLite); the visitors run on the same 2 cores.\n\n"
        + table(rows, header)
        + f"\n\nServer peak RSS: {peak_rss:.0f} MB.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--visitors", type=int, default=200)
    parser.add_argument("--bits", type=int, default=16)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    assert args.visitors <= 1000, "the loopback addresses run out"
    load_before = os.getloadavg()[0]
    with server(start_timeout=120) as srv:
        _, key = make_account(srv.base_url)
        grant_credits(srv.data_dir)
        auth = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=srv.base_url, headers=auth, timeout=30) as http:
            wf = http.post("/api/v1/workflows", json={"name": "hello", "graph_json": GRAPH})
            app = http.post(
                "/api/v1/apps",
                json={
                    "workflow_id": wf.json()["id"],
                    "title": "Hello",
                    "inputs": [{"key": "name", "label": "Your name", "max_length": 40}],
                    "outputs": [{"node_id": "tpl", "label": "Greeting"}],
                    "access": "public",
                },
            )
            assert app.status_code == 201, app.text
        slug, app_id = app.json()["slug"], app.json()["id"]
        rounds = []
        plans: list[tuple[str, int | None]] = [("no proof of work", None)]
        if args.bits:
            plans.append((f"proof of work, {args.bits} bits", args.bits))
        for number, (name, bits) in enumerate(plans):
            if bits:
                httpx.patch(
                    f"{srv.base_url}/api/v1/apps/{app_id}", json={"challenge_bits": bits},
                    headers=auth,
                ).raise_for_status()  # fmt: skip
            done = asyncio.run(burst(srv.base_url, slug, number, args.visitors, bits, srv.proc.pid))
            done.name = name
            rounds.append(done)
        body = report(rounds, args.visitors, srv.peak_rss_mb())
    body += (
        f"Load average (1 min) on the 2 cores, shared with other work: "
        f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.\n"
    )
    print(body)
    if args.write:
        write_section("app_visitors", COMMAND, body)
    failed = sum(v.error is not None for r in rounds for v in r.visits)
    if failed:
        raise SystemExit(f"{failed} visits failed")


if __name__ == "__main__":
    main()
