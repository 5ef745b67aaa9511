"""Shared pieces of the benchmarks: a real ``nodeloom serve`` on 127.0.0.1 with a fresh data
directory, an account with an API key, wrk runs, and writing results into docs/benchmarks.md.

Benchmarks only ever send traffic to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
BENCH_MD = ROOT / "docs" / "benchmarks.md"
PASSWORD = "benchmark password"
RAISED_LIMITS = {
    "NODELOOM_RATE_LIMIT_API_KEY": "100000000",
    "NODELOOM_RATE_LIMIT_JWT": "100000000",
    "NODELOOM_RATE_LIMIT_WEBHOOK": "100000000",
    "NODELOOM_LOG_LEVEL": "WARNING",
}


# The 2-node text workflow of the webhook scenarios (TextInput -> TextTemplate).
WEBHOOK_GRAPH: dict[str, Any] = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {
            "id": "tpl",
            "type": "TextTemplate",
            "position": {"x": 200, "y": 0},
            "data": {"template": "{{ text }} / {{ input.category }}"},
        },
    ],
    "edges": [{"id": "e1", "source": "in", "target": "tpl"}],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    base_url: str
    data_dir: Path

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def peak_rss_mb(self) -> float:
        """Peak RSS of the server; with ``--processes N``, of the supervisor and its
        server processes together."""
        return sum(_peak_rss_mb(pid) for pid in [self.proc.pid, *_children(self.proc.pid)])


def rss_mb(pid: int) -> float:
    """Resident memory of a live process (0 when it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(match.group(1)) / 1024 if match else 0.0


def proc_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime + stime in seconds) of a live process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks


def _peak_rss_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(match.group(1)) / 1024 if match else 0.0


def _children(pid: int) -> list[int]:
    """Direct children that are Nodeloom servers (not the sandbox processes' own tree)."""
    try:
        listed = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [
        int(c)
        for c in listed
        if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")
        and "resource_tracker" not in Path(f"/proc/{c}/cmdline").read_text(errors="replace")
    ]


def wait_healthy(
    base_url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30
) -> None:
    """Until ``/healthz`` answers 200; the server's log as the error if it exits or is late."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(log.read_text())
        time.sleep(0.1)


@contextmanager
def server(env: dict[str, str] | None = None, start_timeout: float = 30) -> Iterator[Server]:
    data_dir = Path(tempfile.mkdtemp(prefix="nodeloom-bench-"))
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    full_env = {
        **os.environ,
        **RAISED_LIMITS,
        "NODELOOM_DATA_DIR": str(data_dir),
        "NODELOOM_BASE_URL": base_url,
        **(env or {}),
    }
    log = (data_dir / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeloom.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_healthy(base_url, proc, data_dir / "server.log", start_timeout)
        yield Server(proc, base_url, data_dir)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def make_account(base_url: str) -> tuple[str, str]:
    """Sign up the owner, log in, create an API key. Returns (jwt, api_key)."""
    with httpx.Client(base_url=base_url, timeout=10) as http:
        http.post("/api/v1/auth/signup", json={"email": "bench@example.com", "password": PASSWORD})
        jwt = http.post(
            "/api/v1/auth/login", json={"email": "bench@example.com", "password": PASSWORD}
        ).json()["access_token"]
        key = http.post(
            "/api/v1/api-keys", json={"name": "bench"}, headers={"Authorization": f"Bearer {jwt}"}
        ).json()["key"]
    return jwt, key


def grant_credits(data_dir: Path, email: str = "bench@example.com", credits: int = 10**12) -> None:
    env = {**os.environ, "NODELOOM_DATA_DIR": str(data_dir)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeloom.cli",
            "accounts",
            "set",
            "--email",
            email,
            "--credits",
            str(credits),
        ],
        env=env,
        check=True,
        capture_output=True,
    )


def ensure_wrk() -> None:
    """wrk comes from Debian's packages (a fresh machine may not have it)."""
    if shutil.which("wrk"):
        return
    print("wrk is missing: apt-get install -y wrk", flush=True)
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=False)
    subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "wrk"], check=True)
    if not shutil.which("wrk"):
        raise SystemExit("wrk could not be installed")


@dataclass
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int


def wrk(url: str, *, connections: int, seconds: int, lua: str, threads: int = 1) -> WrkResult:
    assert url.startswith("http://127.0.0.1:"), "benchmarks target loopback only"
    ensure_wrk()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(lua + LUA_REPORT)
        script = handle.name
    try:
        out = subprocess.run(
            [
                "wrk",
                f"-t{threads}",
                f"-c{connections}",
                f"-d{seconds}s",
                "--latency",
                "-s",
                script,
                url,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(script)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    report = re.search(r"REPORT p50=([\d.]+) p99=([\d.]+)", out)
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    assert report, out
    # wrk's response() runs in per-thread Lua states that done() cannot see, so the count
    # of non-2xx answers comes from wrk's own summary line.
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    bad = int(non_2xx.group(1)) if non_2xx else 0
    return WrkResult(rps, float(report.group(1)), float(report.group(2)), total, bad)


LUA_REPORT = """
done = function(summary, latency, requests)
  io.write(string.format("REPORT p50=%.3f p99=%.3f\\n",
    latency:percentile(50)/1000, latency:percentile(99)/1000))
end
"""


def lua_request(method: str, headers: dict[str, str], body: str | None = None) -> str:
    lines = [f'wrk.method = "{method}"']
    for name, value in headers.items():
        lines.append(f'wrk.headers["{name}"] = "{value}"')
    if body is not None:
        escaped = body.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'wrk.body = "{escaped}"')
    return "\n".join(lines) + "\n"


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values)


def machine_line() -> str:
    mem = Path("/proc/meminfo").read_text().split("\n")[0].split()[1]
    return (
        f"{os.cpu_count()} cores, {int(mem) // 1024 // 1024} GiB, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, {platform.machine()}"
    )


def write_section(name: str, command: str, body: str) -> None:
    """Replace (or append) the section ``name`` of docs/benchmarks.md."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"<!-- bench:{name}:start -->\n"
        f"Measured {stamp} on {machine_line()}.\n"
        f"Reproduce: `{command}`\n\n{body.strip()}\n"
        f"<!-- bench:{name}:end -->"
    )
    text = BENCH_MD.read_text() if BENCH_MD.exists() else "# Benchmarks\n"
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)}:start -->.*?<!-- bench:{re.escape(name)}:end -->", re.S
    )
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    BENCH_MD.parent.mkdir(parents=True, exist_ok=True)
    BENCH_MD.write_text(text)


def table(rows: list[tuple[Any, ...]], header: tuple[str, ...]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def poll_latency(
    base_url: str, key: str, path: str, stop: threading.Event, out: list[float]
) -> None:
    """GET ``path`` every 10 ms until ``stop``, each answer's latency (ms) into ``out``: what
    a client polling a run's status sees while the server is under load."""

    async def loop() -> None:
        async with httpx.AsyncClient(
            base_url=base_url, headers={"Authorization": f"Bearer {key}"}
        ) as c:
            while not stop.is_set():
                t = time.perf_counter()
                r = await c.get(path)
                out.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200
                await asyncio.sleep(0.01)

    asyncio.run(loop())


def metric(base_url: str, name: str) -> float:
    """One figure of the server's /metrics (0 when it does not report it)."""
    for line in httpx.get(f"{base_url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0
