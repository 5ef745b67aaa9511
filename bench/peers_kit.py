"""What the peer benches share (bench_peers.py, bench_queue_mode.py, bench_worker_path.py):
process trees and their CPU, wrk runs and their figures, n8n installed and its environment,
and the queued workflow the scaled-out benches run."""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.common import (
    ROOT,
    proc_stat,
    rss_mb,
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


def log(message: str) -> None:
    print(f"[bench-peers] {message}", flush=True)


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


def n8n_dir() -> Path:
    return PEERS_DIR / "n8n"


def n8n_env(folder: Path, port: int, broker_port: int) -> dict[str, str]:
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


def n8n_version(folder: Path) -> str:
    package = json.loads((folder / "node_modules" / "n8n" / "package.json").read_text())
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    return f"{package['version']} (Node.js {node}, SQLite, executions saved)"


def short(load: Load) -> str:
    return (
        f"{load.rps_ok:,.0f} ok/s, p50 {load.p50_ms:.1f} ms, p99 {load.p99_ms:.1f} ms, "
        f"non-2xx {load.non_2xx}, socket errors {load.socket_errors}, "
        f"server CPU {load.server_cpu_pct:.0f}%, wrk CPU {load.wrk_cpu_pct:.0f}%, "
        f"machine busy {load.machine_busy_pct:.0f}%"
    )


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.1f}x" if theirs else "-"


# A run that must go through the workers: Delay is not instant (it waits, even 0 s), so the
# run is accepted pending and each of its nodes is claimed by a worker (or, with instant
# successors, executed by the job that made them runnable).
QUEUED_GRAPH = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {"id": "wait", "type": "Delay", "position": {"x": 1, "y": 0}, "data": {"seconds": 0}},
        {
            "id": "tpl",
            "type": "TextTemplate",
            "position": {"x": 2, "y": 0},
            "data": {"template": "{{ text }} / done"},
        },
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "wait"},
        {"id": "e2", "source": "wait", "target": "tpl"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}


def backends(admin_url: str, database: str) -> list[int]:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "select pid from pg_stat_activity where datname = %s", (database,)
        ).fetchall()
    return [int(r[0]) for r in rows]


class CpuMeter:
    """CPU seconds of process trees and of a database's PostgreSQL backends, between
    ``start`` and ``stop`` (a backend that appears meanwhile counts from zero; one that
    exits meanwhile is lost — the pools keep theirs for the whole load)."""

    def __init__(
        self,
        roots: dict[str, list[int]],
        admin_url: str,
        database: str,
        exclude: set[int] | None = None,
    ) -> None:
        self.roots, self.admin_url, self.database = roots, admin_url, database
        self.exclude = exclude or set()  # backends of the bench's own connections
        self._before: dict[str, dict[int, float]] = {}

    def _sample(self) -> dict[str, dict[int, float]]:
        found: dict[str, dict[int, float]] = {}
        for part, roots in self.roots.items():
            pids = [p for root in roots for p in process_tree(root)]
            found[part] = {p: s[1] for p in pids if (s := proc_stat(p)) is not None}
        pids = [p for p in backends(self.admin_url, self.database) if p not in self.exclude]
        found["PostgreSQL backends"] = {p: s[1] for p in pids if (s := proc_stat(p)) is not None}
        return found

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> dict[str, float]:
        after = self._sample()
        return {
            part: sum(cpu - self._before.get(part, {}).get(pid, 0.0) for pid, cpu in now.items())
            for part, now in after.items()
        }
