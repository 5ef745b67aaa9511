"""Side by side with n8n: the same webhook load against Nodeloom and against n8n 2.8.4 on
this machine, one server at a time (the other one stopped), all traffic on 127.0.0.1.

    make bench-peers
    .venv/bin/python -m bench.bench_peers [--seconds 15] [--runs 5000] [--profile OUT]

n8n is installed (once, ~6 min, ~2.3 GB) into ``$NODELOOM_PEERS_DIR/n8n`` (default
``/tmp/nodeloom-peers/n8n``, outside the repository, never committed) as follows:
a package.json overriding xlsx with the registry copy,
``npm install n8n@2.8.4``, its env.sh, then import + publish of the bench workflow
(Webhook -> Edit Fields -> Respond to Webhook). The folder's copies of those files are kept in
``bench/peers/`` (``$NODELOOM_PEERS_SRC`` points elsewhere): n8n's environment (loopback only,
telemetry and banners off) and the bench workflow.

Scenarios, each run against both products with wrk (1 thread, every request body unique so
Nodeloom's node cache never answers):

(a) accepted triggers/s and p50/p99 at concurrency 10 and 50 (3 s warm-up, then ``--seconds``
    each). Nodeloom: POST /api/v1/webhooks/{token} of a TextInput -> TextTemplate workflow (202
    once the run is durably queued). n8n: POST /webhook/bench (200 once the execution finished
    and was saved).
(b) completed runs/s: ``--runs`` triggers at c=50, timed from the first request until the last
    Nodeloom run is completed (its /metrics counters) or the last n8n request is answered.

Writes the ``peers`` section of docs/benchmarks.md. ``--profile OUT`` adds a py-spy recording
(raw collapsed stacks into OUT) of the Nodeloom server under a further c=50 load and prints
the top self-time frames of its MainThread.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import (
    ROOT,
    WEBHOOK_GRAPH,
    Server,
    ensure_wrk,
    free_port,
    grant_credits,
    machine_line,
    make_account,
    proc_stat,
    server,
    table,
    write_section,
)
from bench.peers_kit import (
    Load,
    ensure_n8n,
    log,
    n8n_env,
    n8n_version,
    process_tree,
    ratio,
    run_wrk,
    short,
    stop_pid,
    tree_rss_mb,
)

GRAPH = WEBHOOK_GRAPH
WARMUP_SECONDS = 3
CONCURRENCIES = (10, 50)
RUNS_CONCURRENCY = 50


# --------------------------------------------------------------------------- results


@dataclass
class Product:
    name: str
    version: str
    loads: dict[int, Load]  # concurrency -> (a)
    runs: int  # (b): runs asked for
    runs_seconds: float
    runs_load: Load
    runs_failed: int
    rss_mb: float
    # (b) again with one body for every trigger (seconds, load, failed); Nodeloom only.
    same_body: tuple[float, Load, int] | None = None

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.runs_seconds


# --------------------------------------------------------------------------- Nodeloom


def nodeloom_finished(data_dir: Path) -> tuple[float, float]:
    """(completed, failed) runs so far, from the database: /metrics answers for one process
    only when the server runs several (--processes)."""
    with sqlite3.connect(data_dir / "nodeloom.db", timeout=10) as conn:
        rows = dict(
            conn.execute(
                "select status, count(*) from runs where status in ('completed', 'failed') "
                "group by status"
            ).fetchall()
        )
    return float(rows.get("completed", 0)), float(rows.get("failed", 0))


def wait_runs(data_dir: Path, target: float, timeout: float = 600) -> float:
    """Poll the database (every 20 ms, light next to the load) until ``target`` runs finished."""
    deadline = time.monotonic() + timeout
    while sum(nodeloom_finished(data_dir)) < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {sum(nodeloom_finished(data_dir))} of {target} runs done")
        time.sleep(0.02)
    return time.monotonic()


def settle(data_dir: Path, quiet: float = 1.0, timeout: float = 600) -> float:
    """Wait until the finished-runs counters stop moving (the backlog drained)."""
    deadline = time.monotonic() + timeout
    last, since = sum(nodeloom_finished(data_dir)), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise RuntimeError("runs kept finishing until the timeout")
        time.sleep(0.1)
        now = sum(nodeloom_finished(data_dir))
        if now != last:
            last, since = now, time.monotonic()
    return last


def measure_nodeloom(args: argparse.Namespace) -> Product:
    with server({"NODELOOM_PROCESSES": str(args.processes)}) as srv:
        pid = srv.proc.pid
        _jwt, key = make_account(srv.base_url)
        grant_credits(srv.data_dir)
        with httpx.Client(
            base_url=srv.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10
        ) as http:
            created = http.post("/api/v1/workflows", json={"name": "peers", "graph_json": GRAPH})
            created.raise_for_status()
            workflow = created.json()["id"]
            paths = []
            for i in range(args.webhooks):
                hook = http.post(
                    f"/api/v1/workflows/{workflow}/webhooks", json={"name": f"h{i}", "active": True}
                )
                hook.raise_for_status()
                paths.append(f"/api/v1/webhooks/{hook.json()['token']}")
            probe = http.post(paths[0], json={"text": "probe", "category": "x"})
            assert probe.status_code == 202, probe.text

        log("Nodeloom: warm-up")
        run_wrk(srv.base_url, paths, connections=10, seconds=WARMUP_SECONDS, server_pid=pid)
        settle(srv.data_dir)
        loads = {}
        for conns in CONCURRENCIES:
            log(f"Nodeloom: (a) c={conns} for {args.seconds} s")
            base = settle(srv.data_dir)
            loads[conns] = run_wrk(
                srv.base_url, paths, connections=conns, seconds=args.seconds, server_pid=pid
            )
            wait_runs(srv.data_dir, base + loads[conns].ok)
            log(f"  {short(loads[conns])}")

        runs_seconds, runs_load, runs_failed = _completed_runs(srv, paths, args.runs, False)
        same_seconds, same_load, same_failed = _completed_runs(srv, paths, args.runs, True)
        if args.profile:
            profile_nodeloom(srv, paths, args.profile)
        rss = tree_rss_mb(pid)
    return Product(
        name="Nodeloom",
        version=_nodeloom_version(),
        loads=loads,
        runs=args.runs,
        runs_seconds=runs_seconds,
        runs_load=runs_load,
        runs_failed=runs_failed,
        rss_mb=rss,
        same_body=(same_seconds, same_load, same_failed),
    )


def _completed_runs(
    srv: Server, paths: list[str], runs: int, same_body: bool
) -> tuple[float, Load, int]:
    """(b): ``runs`` triggers at c=50 until the last run ended (seconds, the load, runs
    failed), with a body per trigger or, ``same_body``, one body for all (the output cache
    answers all but the first)."""
    bodies = "one body for all" if same_body else "a body each"
    log(f"Nodeloom: (b) {runs} runs at c={RUNS_CONCURRENCY}, {bodies}")
    settle(srv.data_dir)
    completed0, failed0 = nodeloom_finished(srv.data_dir)
    started = time.monotonic()
    load = run_wrk(
        srv.base_url,
        paths,
        connections=RUNS_CONCURRENCY,
        seconds=600,
        server_pid=srv.proc.pid,
        stop_after=runs,
        same_body=same_body,
    )
    ended = wait_runs(srv.data_dir, completed0 + failed0 + runs)
    _, failed1 = nodeloom_finished(srv.data_dir)
    log(f"  {runs} runs in {ended - started:.2f} s; {short(load)}")
    return ended - started, load, int(failed1 - failed0)


def _nodeloom_version() -> str:
    version = importlib.metadata.version("nodeloom")
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return f"{version} ({sha}, working tree)" if sha else version


def profile_nodeloom(srv: Server, paths: list[str], out: str) -> None:
    """py-spy over a further c=50 load (not one of the measured ones)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    pid = str(srv.proc.pid)
    spy = subprocess.Popen(
        [exe, "record", "-p", pid, "-d", "10", "-f", "raw", "-o", out, "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1)
    log("Nodeloom: c=50 load under py-spy")
    run_wrk(srv.base_url, paths, connections=50, seconds=12, server_pid=srv.proc.pid)
    spy.wait(60)
    settle(srv.data_dir)
    print(summarize_profile(Path(out)))


def summarize_profile(raw: Path, top: int = 12) -> str:
    """Top self-time frames of the MainThread (the event loop) from py-spy's raw output: one
    collapsed stack per line with its sample count. Without --threads py-spy names no thread:
    other threads' stacks are rooted in ``Thread._bootstrap``; the rest are MainThread's (with
    --nonblocking some come truncated, without their outer frames)."""
    leaves: collections.Counter[str] = collections.Counter()
    ours: collections.Counter[str] = collections.Counter()
    main_total = other_total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        if frames[0].startswith(("Thread._bootstrap", "_bootstrap ")):
            other_total += int(count)
            continue
        n = int(count)
        main_total += n
        leaves[frames[-1]] += n
        # Deepest Nodeloom frame: which of our functions the time is spent under.
        mine = [f for f in frames if "(nodeloom/" in f]
        ours[mine[-1] if mine else frames[-1]] += n
    if not main_total:
        return "py-spy: no MainThread samples"
    lines = [
        f"py-spy: {main_total} MainThread samples, {other_total} in other threads",
        "top self-time frames (MainThread):",
    ]
    lines += [f"  {100 * n / main_total:5.1f}%  {f}" for f, n in leaves.most_common(top)]
    lines += ["time by deepest Nodeloom frame (MainThread, inclusive):"]
    lines += [f"  {100 * n / main_total:5.1f}%  {f}" for f, n in ours.most_common(top)]
    return "\n".join(lines)


# --------------------------------------------------------------------------- n8n


@contextmanager
def n8n_server(folder: Path) -> Iterator[tuple[str, int]]:
    """``n8n start`` on a free loopback port; stopped by its PID (and any children) at the end."""
    port, broker = free_port(), free_port()
    env = n8n_env(folder, port, broker)
    base_url = f"http://127.0.0.1:{port}"
    n8n_log = (folder / "n8n.log").open("wb")
    proc = subprocess.Popen(
        [str(folder / "node_modules" / ".bin" / "n8n"), "start"],
        cwd=folder,
        env=env,
        stdout=n8n_log,
        stderr=subprocess.STDOUT,
    )
    (folder / "n8n.pid").write_text(f"{proc.pid}\n")
    log(f"n8n: started, pid {proc.pid}, {base_url}")
    children: list[int] = []
    try:
        deadline = time.monotonic() + 180
        # /healthz answers before the webhook does: poll the webhook itself.
        while True:
            try:
                answer = httpx.post(f"{base_url}/webhook/bench", json={}, timeout=5)
                if answer.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "n8n.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"n8n did not answer on /webhook/bench:\n{tail}")
            time.sleep(1)
        children = process_tree(proc.pid)[1:]
        yield base_url, proc.pid
    finally:
        children = sorted(set(children) | set(process_tree(proc.pid)[1:]))
        stop_pid(proc.pid)
        for child in children:  # task runners n8n started, if it left any behind
            if proc_stat(child) is not None:
                stop_pid(child)
        n8n_log.close()
        log(f"n8n: stopped (pid {proc.pid})")


def measure_n8n(folder: Path, args: argparse.Namespace) -> Product:
    with n8n_server(folder) as (base_url, pid):
        paths = ["/webhook/bench"]
        log("n8n: warm-up")
        run_wrk(base_url, paths, connections=10, seconds=WARMUP_SECONDS, server_pid=pid)
        loads = {}
        for conns in CONCURRENCIES:
            time.sleep(2)
            log(f"n8n: (a) c={conns} for {args.seconds} s")
            loads[conns] = run_wrk(
                base_url, paths, connections=conns, seconds=args.seconds, server_pid=pid
            )
            log(f"  {short(loads[conns])}")
        time.sleep(2)
        log(f"n8n: (b) {args.runs} runs at c={RUNS_CONCURRENCY}")
        started = time.monotonic()
        runs_load = run_wrk(
            base_url,
            paths,
            connections=RUNS_CONCURRENCY,
            seconds=600,
            server_pid=pid,
            stop_after=args.runs,
        )
        ended = time.monotonic()
        log(f"  {args.runs} runs in {ended - started:.2f} s; {short(runs_load)}")
        rss = tree_rss_mb(pid)
    return Product(
        name="n8n",
        version=n8n_version(folder),
        loads=loads,
        runs=args.runs,
        runs_seconds=ended - started,
        runs_load=runs_load,
        runs_failed=runs_load.non_2xx,
        rss_mb=rss,
    )


# --------------------------------------------------------------------------- report


def nodeloom_summary(nl: Product) -> str:
    """Nodeloom's (a) and (b) alone (``--no-n8n``)."""
    lines = [f"(a) c={c}: {short(load)}" for c, load in nl.loads.items()]
    lines.append(
        f"(b) {nl.runs} runs, a body each: {nl.runs_per_s:,.0f} completed runs/s "
        f"(server CPU {nl.runs_load.server_cpu_pct:.0f}%), {nl.runs_failed} failed"
    )
    if nl.same_body is not None:
        seconds, load, failed = nl.same_body
        lines.append(
            f"(b) {nl.runs} runs, one body for all: {nl.runs / seconds:,.0f} completed runs/s "
            f"(server CPU {load.server_cpu_pct:.0f}%), {failed} failed"
        )
    return "\n".join(lines)


def report(nl: Product, n8n: Product, args: argparse.Namespace) -> tuple[str, list[str]]:
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout
    wrk_version = wrk_version.split(" [")[0].strip() or "wrk"
    text = (
        f"Machine: {machine_line()}. Versions: Nodeloom {nl.version}"
        + (f" (`serve --processes {args.processes}`)" if args.processes > 1 else "")
        + f"; n8n {n8n.version}; "
        f"{wrk_version}. One server at a time (the other stopped), wrk on the same machine, "
        "1 thread, every request body unique (Nodeloom's node cache never answers), "
        "127.0.0.1 only.\n\n"
    )
    text += (
        f"### (a) Accepted webhook triggers ({args.seconds} s per concurrency after a "
        f"{WARMUP_SECONDS} s warm-up)\n\n"
    )
    rows = []
    for conns in CONCURRENCIES:
        ours, theirs = nl.loads[conns], n8n.loads[conns]
        rows.append(
            (
                f"c={conns}",
                f"{ours.rps_ok:,.0f}",
                f"{ours.p50_ms:.1f} / {ours.p99_ms:.1f}",
                f"{theirs.rps_ok:,.0f}",
                f"{theirs.p50_ms:.1f} / {theirs.p99_ms:.1f}",
                ratio(ours.rps_ok, theirs.rps_ok),
                f"{ours.non_2xx + ours.socket_errors} / {theirs.non_2xx + theirs.socket_errors}",
            )
        )
    text += table(
        rows,
        (
            "load",
            "Nodeloom accepted/s",
            "Nodeloom p50 / p99 ms",
            "n8n answered/s",
            "n8n p50 / p99 ms",
            "Nodeloom/n8n",
            "errors (Nodeloom / n8n)",
        ),
    )
    text += (
        f"\n\n### (b) Completed 2-node runs per second ({args.runs} triggers at "
        f"c={RUNS_CONCURRENCY})\n\n"
    )
    rows = [
        (
            p.name,
            "last run completed (its database)"
            if p is nl
            else "last request answered (execution finished and saved)",
            f"{p.runs_seconds:.2f}",
            f"{p.runs_per_s:,.0f}",
            p.runs_failed,
        )
        for p in (nl, n8n)
    ]
    if nl.same_body is not None:
        seconds, _load, failed = nl.same_body
        rows.append(
            (
                "Nodeloom, one body for every trigger (output cache hits)",
                "the same",
                f"{seconds:.2f}",
                f"{nl.runs / seconds:,.0f}",
                failed,
            )
        )
    rows.append(("Nodeloom/n8n", "", "", ratio(nl.runs_per_s, n8n.runs_per_s), ""))
    text += table(rows, ("product", "done when", "seconds", "completed runs/s", "failed"))
    text += "\n\n### Where the CPU went during the c=50 load of (a)\n\n"
    rows = [
        (
            p.name,
            f"{p.loads[50].server_cpu_pct:.0f}%",
            f"{p.loads[50].wrk_cpu_pct:.0f}%",
            f"{p.loads[50].machine_busy_pct:.0f}%",
            f"{p.rss_mb:.0f}",
        )
        for p in (nl, n8n)
    ]
    text += table(
        rows,
        (
            "server under load",
            "server CPU (100% = one core)",
            "wrk CPU (one core)",
            "machine busy (all cores)",
            "server RSS MB after",
        ),
    )
    text += (
        "\n\n**Fairness.** The two answer at different moments: n8n's webhook (respond with the "
        "last node) answers only after the execution finished and was saved. Nodeloom answers "
        "202 once the run is committed to SQLite; a run whose nodes are all instant text nodes "
        "(as this one is) is executed within that same transaction, so its 202 also comes "
        "after the work, while a run with slower nodes would be executed after the answer. "
        "(a) compares what a caller waits for; (b) "
        "compares the same work, finished: for Nodeloom the clock stops when the last of the "
        "runs is completed according to its database, so its backlog is included. wrk is not "
        "the bottleneck: it uses one thread on one of the cores (its CPU is in the table above, "
        "read from its rusage) while the server's process tree uses the rest.\n"
    )
    c50 = nl.loads[50]
    targets = [
        (
            f"completed 2-node runs/s >= 5x n8n: {ratio(nl.runs_per_s, n8n.runs_per_s)} "
            f"({nl.runs_per_s:,.0f} vs {n8n.runs_per_s:,.0f})",
            nl.runs_per_s >= 5 * n8n.runs_per_s,
        ),
        (
            f"accepted triggers/s at c=50 >= 1,000 with p99 < 50 ms: {c50.rps_ok:,.0f}/s, "
            f"p99 {c50.p99_ms:.1f} ms",
            c50.rps_ok >= 1000 and c50.p99_ms < 50,
        ),
    ]
    text += "\nTargets:\n\n" + "\n".join(
        f"- {'met' if ok else 'missed'}: {what}" for what, ok in targets
    )
    missed = [what for what, ok in targets if not ok]
    return text, missed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=15, help="per concurrency in (a)")
    parser.add_argument("--runs", type=int, default=5000, help="triggers in (b)")
    parser.add_argument(
        "--webhooks", type=int, default=1, help="Nodeloom webhooks, round-robin (n8n has one)"
    )
    parser.add_argument("--profile", metavar="OUT", help="py-spy the Nodeloom server into OUT")
    parser.add_argument(
        "--processes",
        type=int,
        default=2,
        help="nodeloom serve --processes N (default 2: both cores, as n8n uses them)",
    )
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument(
        "--queue-mode",
        action="store_true",
        help="scaled out instead: Nodeloom on PostgreSQL (API replica + workers) against n8n's "
        "queue mode (main + workers, Bull on Redis, PostgreSQL); bench/bench_queue_mode.py",
    )
    parser.add_argument("--workers", type=int, default=1, help="--queue-mode: workers of each")
    parser.add_argument("--no-n8n", action="store_true", help="Nodeloom only")
    parser.add_argument("--queued-runs", type=int, default=1000, help="--queue-mode: runs of (e)")
    parser.add_argument(
        "--claim-hops",
        type=int,
        default=0,
        metavar="N",
        help="--queue-mode: only N runs through the workers one at a time, the node claim "
        "latency broken into its hops (bench/bench_worker_path.py)",
    )
    parser.add_argument(
        "--scaling",
        type=int,
        default=0,
        metavar="N",
        help="--queue-mode: only completed runs/s of N runs with 1 and with 2 workers",
    )
    parser.add_argument(
        "--scaling-delay", type=float, default=0.5, help="--scaling: the Delay's seconds"
    )
    parser.add_argument(
        "--scaling-runs",
        type=int,
        default=160,
        metavar="N",
        help="--queue-mode: (f), the runs of each 1 -> 2 workers pass (0: none)",
    )
    parser.add_argument(
        "--goal-concurrency",
        type=int,
        default=25,
        help="--queue-mode: (a) again at this many clients (the replica's 1,000/s goal)",
    )
    parser.add_argument(
        "--claim-runs",
        type=int,
        default=100,
        help="--queue-mode: (e)'s runs one at a time, for the claim latency",
    )
    parser.add_argument(
        "--scaling-concurrency", type=int, default=8, help="--scaling: jobs per worker"
    )
    args = parser.parse_args()
    if args.queue_mode:
        from bench import bench_queue_mode

        if "--runs" not in sys.argv:
            args.runs = 3000
        bench_queue_mode.main(args)
        return

    ensure_wrk()
    if args.no_n8n:  # Nodeloom's figures only, written nowhere
        nodeloom = measure_nodeloom(args)
        print(nodeloom_summary(nodeloom))
        return
    folder = ensure_n8n()
    nodeloom = measure_nodeloom(args)
    n8n = measure_n8n(folder, args)
    text, missed = report(nodeloom, n8n, args)
    print(text)
    if not args.no_write:
        command = "make bench-peers"
        if args.processes != 2:
            command = f".venv/bin/python -m bench.bench_peers --processes {args.processes}"
        write_section("peers", command, text)
    if missed:
        log("targets missed: " + "; ".join(missed))


if __name__ == "__main__":
    main()
