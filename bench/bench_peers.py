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
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
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
    rss_mb,
    server,
    table,
    write_section,
)

N8N_VERSION = "2.8.4"
N8N_WORKFLOW_ID = "benchWf000000001"
REPOSITORY = Path(__file__).resolve().parents[1]
PEERS_SRC = Path(os.environ.get("NODELOOM_PEERS_SRC", str(REPOSITORY / "bench" / "peers")))
PEERS_DIR = Path(os.environ.get("NODELOOM_PEERS_DIR", "/tmp/nodeloom-peers"))
N8N_PACKAGE_JSON = {
    "name": "n8n-peer",
    "private": True,
    # One dependency (xlsx) points at a tarball outside the registry: use the registry copy.
    "overrides": {"xlsx": "npm:@e965/xlsx@0.20.3"},
}
GRAPH = WEBHOOK_GRAPH
WARMUP_SECONDS = 3
CONCURRENCIES = (10, 50)
RUNS_CONCURRENCY = 50


def log(message: str) -> None:
    print(f"[bench-peers] {message}", flush=True)


# --------------------------------------------------------------------------- processes / CPU


def process_tree(root: int) -> list[int]:
    """``root`` and all of its descendants (n8n starts task-runner children, for instance)."""
    parents: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := proc_stat(int(entry.name))) is not None:
            parents[stat[0]].append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(parents.get(pid, []))
    return tree


def tree_cpu_seconds(root: int) -> float:
    return sum(stat[1] for pid in process_tree(root) if (stat := proc_stat(pid)) is not None)


def tree_rss_mb(root: int) -> float:
    return sum(rss_mb(pid) for pid in process_tree(root))


def machine_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def stop_pid(pid: int) -> None:
    """Like the peers' stop_pid.sh: SIGTERM, wait up to 40 s (again at 20 s), then SIGKILL."""
    for i in range(400):
        try:
            if i in (0, 200):
                os.kill(pid, signal.SIGTERM)
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


# --------------------------------------------------------------------------- wrk


@dataclass
class Load:
    requests: int
    ok: int
    non_2xx: int
    socket_errors: int
    seconds: float  # wall time of the wrk process
    rps_ok: float  # 2xx responses per second of the measured duration
    p50_ms: float
    p99_ms: float
    wrk_cpu_pct: float  # of one core
    server_cpu_pct: float  # the server's process tree, of one core
    machine_busy_pct: float  # all cores, 100 = every core busy


def wrk_lua(
    paths: list[str],
    stop_after: int = 0,
    marker: str = "",
    nonce: str = "",
    same_body: bool = False,
) -> str:
    """POST a unique small JSON body per request (round-robin over ``paths``); with
    ``stop_after`` the (single) thread stops once that many 2xx responses arrived and writes
    ``marker`` (wrk's main thread sleeps for the whole -d anyway: the caller SIGINTs it).
    The bodies of two wrk runs are the same unless their ``nonce`` differs. ``same_body``:
    every request of the run sends one body (Nodeloom's output cache answers all but the
    first)."""
    listed = ", ".join(f'"{p}"' for p in paths)
    counted = "0" if same_body else "counter"
    return f"""
paths = {{{listed}}}
counter = 0
ok = 0
stop_after = {stop_after}
marker = "{marker}"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  local body = string.format(
    '{{"text":"A sunset over the sea{nonce} %d","category":"travel","id":%d}}',
    {counted}, {counted})
  return wrk.format(nil, paths[(counter % #paths) + 1], nil, body)
end
response = function(status, headers, body)
  if status >= 200 and status < 300 then ok = ok + 1 end
  if stop_after > 0 and ok == stop_after then
    local f = io.open(marker, "w")
    f:write("done")
    f:close()
    wrk.thread:stop()
  end
end
done = function(summary, latency, requests)
  io.write(string.format("REPORT p50=%.3f p99=%.3f\\n",
    latency:percentile(50)/1000, latency:percentile(99)/1000))
end
"""


def run_wrk(
    base_url: str,
    paths: list[str],
    *,
    connections: int,
    seconds: int,
    server_pid: int,
    stop_after: int = 0,
    nonce: str | None = None,
    same_body: bool = False,
) -> Load:
    """One wrk run (1 thread). Counts come from wrk's own summary (the Lua ``done`` hook runs
    in another Lua state than the threads, so counters kept in Lua would not reach it).
    With ``stop_after``, ``Load.seconds`` is the time until that many 2xx responses.
    Bodies differ from every other run's unless ``nonce`` is given (the same nonce, the same
    bodies): wrk's counter starts at 1 each run, so without one a run repeated the bodies of
    the runs before it and Nodeloom's node cache answered them. ``same_body``: one body for
    every request of the run (``wrk_lua``), so the cache answers all but the first."""
    if nonce is None:
        nonce = f" {os.urandom(4).hex()}"
    assert base_url.startswith("http://127.0.0.1:"), "benchmarks target loopback only"
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        marker = Path(tmp) / "reached"
        script = Path(tmp) / "load.lua"
        script.write_text(wrk_lua(paths, stop_after, str(marker), nonce, same_body))
        out_file = Path(tmp) / "wrk.out"
        cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "60s"]
        cmd += ["--latency", "-s", str(script), base_url + paths[0]]
        cpu0, busy0 = tree_cpu_seconds(server_pid), machine_busy_ticks()
        started = time.monotonic()
        with out_file.open("w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            reached = None
            while True:  # wait4, not poll(): the child's rusage gives wrk's own CPU time
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG if stop_after else 0)
                if pid == proc.pid:
                    break
                if reached is None and marker.exists():
                    reached = time.monotonic()
                    proc.send_signal(signal.SIGINT)  # wrk stops and prints its summary
                time.sleep(0.005)
            proc.returncode = os.waitstatus_to_exitcode(status)
        exited = time.monotonic()
        wall = (reached or exited) - started
        cpu1, busy1 = tree_cpu_seconds(server_pid), machine_busy_ticks()
        text = out_file.read_text()
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {text}")
    requests = int(_find(r"(\d+) requests in", text))
    non_2xx = int(_find(r"Non-2xx or 3xx responses: (\d+)", text, "0"))
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text
    )
    socket_errors = sum(int(n) for n in errors.groups()) if errors else 0
    runtime = _wrk_seconds(text)
    p50, p99 = (float(v) for v in re.findall(r"REPORT p50=([\d.]+) p99=([\d.]+)", text)[0])
    ok = requests - non_2xx
    return Load(
        requests=requests,
        ok=ok,
        non_2xx=non_2xx,
        socket_errors=socket_errors,
        seconds=wall,
        rps_ok=ok / runtime,
        p50_ms=p50,
        p99_ms=p99,
        wrk_cpu_pct=100 * (usage.ru_utime + usage.ru_stime) / (exited - started),
        server_cpu_pct=100 * (cpu1 - cpu0) / (exited - started),
        machine_busy_pct=100 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
    )


# wrk prints a duration in the unit that suits it: "924.55ms", "15.10s", "1.00m".
_WRK_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _wrk_seconds(text: str) -> float:
    match = re.search(r"requests in ([\d.]+)(us|ms|s|m|h),", text)
    if match is None:
        raise RuntimeError(f"no duration in wrk output:\n{text}")
    return float(match.group(1)) * _WRK_UNITS[match.group(2)]


def _find(pattern: str, text: str, default: str | None = None) -> str:
    match = re.search(pattern, text)
    if match:
        return match.group(1)
    if default is not None:
        return default
    raise RuntimeError(f"{pattern!r} not in wrk output:\n{text}")


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
            log(f"  {_short(loads[conns])}")

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
    log(f"  {runs} runs in {ended - started:.2f} s; {_short(load)}")
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


def n8n_dir() -> Path:
    return PEERS_DIR / "n8n"


def _n8n_env(folder: Path, port: int, broker_port: int) -> dict[str, str]:
    """The environment env.sh sets up (sourced in the n8n folder), moved to free ports."""
    dumped = subprocess.run(
        ["bash", "-c", ". ./env.sh && env -0"],
        cwd=folder,
        capture_output=True,
        check=True,
        env={**os.environ, "PWD": str(folder)},
    ).stdout.decode()
    env = dict(item.split("=", 1) for item in dumped.split("\0") if "=" in item)
    env["N8N_PORT"] = str(port)
    env["WEBHOOK_URL"] = f"http://127.0.0.1:{port}/"
    env["N8N_RUNNERS_BROKER_PORT"] = str(broker_port)
    return env


def ensure_n8n() -> Path:
    """Install n8n as in the peers README, unless an earlier run already did."""
    folder = n8n_dir()
    installed = folder / f".nodeloom-installed-{N8N_VERSION}"
    imported = folder / ".nodeloom-workflow-published"
    if installed.exists() and imported.exists():
        return folder
    if not shutil.which("npm"):
        raise SystemExit("npm (Node.js 20) is required to install n8n")
    try:
        folder.resolve().relative_to(ROOT)
    except ValueError:
        pass
    else:
        raise SystemExit(f"{folder} is inside the repository: set NODELOOM_PEERS_DIR elsewhere")
    folder.mkdir(parents=True, exist_ok=True)
    if not installed.exists():
        package = folder / "package.json"
        if not package.exists():
            package.write_text(json.dumps(N8N_PACKAGE_JSON) + "\n")
        npm_log = folder / "npm-install.log"
        log(f"installing n8n {N8N_VERSION} into {folder} (about 6 min, 2.3 GB; log: {npm_log})")
        with npm_log.open("ab") as out:
            done = subprocess.run(
                ["npm", "install", f"n8n@{N8N_VERSION}", "--no-audit", "--no-fund"],
                cwd=folder,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if done.returncode != 0:
            tail = npm_log.read_text(errors="replace")[-3000:]
            raise SystemExit(f"npm install n8n failed ({done.returncode}):\n{tail}")
        installed.write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
    shutil.copy(PEERS_SRC / "n8n-env.sh", folder / "env.sh")
    shutil.copy(PEERS_SRC / "n8n-bench-workflow.json", folder / "n8n-bench-workflow.json")
    log("n8n: importing and publishing the bench workflow")
    script = (
        ". ./env.sh && "
        "N8N_LOG_LEVEL=info ./node_modules/.bin/n8n import:workflow "
        "--input=n8n-bench-workflow.json && "
        f"N8N_LOG_LEVEL=info ./node_modules/.bin/n8n publish:workflow --id={N8N_WORKFLOW_ID}"
    )
    with (folder / "import.log").open("ab") as out:
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PWD": str(folder)},
            check=False,
        )
    if done.returncode != 0:
        tail = (folder / "import.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"n8n workflow import/publish failed:\n{tail}")
    imported.write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
    return folder


@contextmanager
def n8n_server(folder: Path) -> Iterator[tuple[str, int]]:
    """``n8n start`` on a free loopback port; stopped by its PID (and any children) at the end."""
    port, broker = free_port(), free_port()
    env = _n8n_env(folder, port, broker)
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


def _n8n_version(folder: Path) -> str:
    package = json.loads((folder / "node_modules" / "n8n" / "package.json").read_text())
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    return f"{package['version']} (Node.js {node}, SQLite, executions saved)"


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
            log(f"  {_short(loads[conns])}")
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
        log(f"  {args.runs} runs in {ended - started:.2f} s; {_short(runs_load)}")
        rss = tree_rss_mb(pid)
    return Product(
        name="n8n",
        version=_n8n_version(folder),
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
    lines = [f"(a) c={c}: {_short(load)}" for c, load in nl.loads.items()]
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


def _short(load: Load) -> str:
    return (
        f"{load.rps_ok:,.0f} ok/s, p50 {load.p50_ms:.1f} ms, p99 {load.p99_ms:.1f} ms, "
        f"non-2xx {load.non_2xx}, socket errors {load.socket_errors}, "
        f"server CPU {load.server_cpu_pct:.0f}%, wrk CPU {load.wrk_cpu_pct:.0f}%, "
        f"machine busy {load.machine_busy_pct:.0f}%"
    )


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.1f}x" if theirs else "-"


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
                _ratio(ours.rps_ok, theirs.rps_ok),
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
    rows.append(("Nodeloom/n8n", "", "", _ratio(nl.runs_per_s, n8n.runs_per_s), ""))
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
            f"completed 2-node runs/s >= 5x n8n: {_ratio(nl.runs_per_s, n8n.runs_per_s)} "
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
