"""Helpers for tests against a real ``nodeloom serve`` process: an account with a key, runs
polled to their end, latency probes, and what the server's process tree uses (/proc)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import PASSWORD


def account(http: httpx.Client, email: str) -> tuple[str, str]:
    """Sign up (the first account needs no switch), log in, make a key: (jwt, key)."""
    r = http.post("/api/v1/auth/signup", json={"email": email, "password": PASSWORD})
    assert r.status_code == 201, r.text
    jwt = http.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD}).json()[
        "access_token"
    ]
    r = http.post(
        "/api/v1/api-keys", json={"name": "k"}, headers={"Authorization": f"Bearer {jwt}"}
    )
    assert r.status_code == 201, r.text
    return jwt, str(r.json()["key"])


def wait_run(http: httpx.Client, workflow_id: str, run_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        r = http.get(f"/api/v1/workflows/{workflow_id}/runs/{run_id}")
        assert r.status_code == 200, r.text
        run: dict[str, Any] = r.json()
        if run["status"] != "running":
            return run
        assert time.monotonic() < deadline, f"run still running after {timeout} s: {run}"
        time.sleep(0.05)


def node(run: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in run["node_runs"] if n["node_id"] == node_id)


@dataclass
class Probe:
    """Requests the server in a background thread every ``interval`` seconds and records
    how long each answer took; any status other than 200 is recorded as a failure."""

    base_url: str
    paths: list[tuple[str, dict[str, str]]]
    interval: float = 0.05
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=10) as http:
            while not self._stop.is_set():
                for path, headers in self.paths:
                    started = time.perf_counter()
                    try:
                        status = http.get(path, headers=headers).status_code
                    except httpx.HTTPError as exc:
                        self.failures.append(f"{path}: {exc!r}")
                        continue
                    self.latencies.append(time.perf_counter() - started)
                    if status != 200:
                        self.failures.append(f"{path}: {status}")
                self._stop.wait(self.interval)

    def p99(self) -> float:
        ordered = sorted(self.latencies)
        assert ordered, "the probe got no answer at all"
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (the fork server and its sandbox processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, []))
    return found


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    fields = _stat(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(p) for p in descendants(pid))
