"""``nodeloom serve --processes 2`` on the embedded default (SQLite, no Redis), as a user
runs it: one port, two server processes behind it.

Checked from outside and from the database: runs accepted by either process complete, and
each process drives some; nothing runs twice and the books balance; one WebSocket sees live
the runs the other process drives; a rate limit holds for the whole server, not per process;
a killed process is replaced and its runs are adopted; SIGTERM stops everything cleanly.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.sync.client import connect

from tests.live import account
from tests.server import ServerProcess
from tests.topology.fleet import (
    OPEN_LIMITS,
    SLOW,
    TEXT,
    assert_nothing_ran_twice_and_the_books_balance,
    query,
    wait_runs,
)

pytestmark = pytest.mark.slow

KEY_LIMIT = 30


def _fresh_connections(base_url: str, token: str) -> httpx.Client:
    """No keep-alive: the kernel spreads connections, not requests, over the processes."""
    return httpx.Client(
        base_url=base_url,
        timeout=30,
        headers={"Authorization": f"Bearer {token}"},
        limits=httpx.Limits(max_keepalive_connections=0),
    )


class Follower(threading.Thread):
    """A WebSocket subscribed to one workflow, recording each run's final event."""

    def __init__(self, base_url: str, token: str, workflow_id: str) -> None:
        super().__init__(daemon=True)
        self.url = base_url.replace("http://", "ws://") + "/api/v1/ws"
        self.token = token
        self.workflow_id = workflow_id
        self.finals: dict[str, str] = {}
        self.subscribed = threading.Event()
        self.halt = threading.Event()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with connect(self.url, additional_headers=headers) as ws:
            ws.send(orjson.dumps({"type": "subscribe", "workflow_id": self.workflow_id}).decode())
            assert orjson.loads(ws.recv(10))["type"] == "subscribed"
            self.subscribed.set()
            while not self.halt.is_set():
                try:
                    message: dict[str, Any] = orjson.loads(ws.recv(0.5))
                except TimeoutError:
                    continue
                if message.get("type") in ("run.completed", "run.failed"):
                    self.finals[message["run_id"]] = message["type"]


def _children(server: ServerProcess) -> list[int]:
    found = re.search(r"with 2 processes \(pids (\d+), (\d+)\)", server.log_path.read_text())
    assert found, server.log_path.read_text()
    return [int(found.group(1)), int(found.group(2))]


def _execute(http: httpx.Client, wf: str, count: int) -> dict[str, str]:
    runs: dict[str, str] = {}
    for i in range(count):
        r = http.post(f"/api/v1/workflows/{wf}/execute", json={"input": {"text": str(i)}})
        assert r.status_code == 202, r.text
        runs[r.json()["run_id"]] = wf
    return runs


def test_two_processes_on_one_port_share_runs_events_and_limits(tmp_path: Path) -> None:
    data = tmp_path / "data"
    url = f"sqlite+aiosqlite:///{data / 'nodeloom.db'}"
    env = {**OPEN_LIMITS, "NODELOOM_RATE_LIMIT_API_KEY": str(KEY_LIMIT)}
    server = ServerProcess(data, env, args=["--processes", "2"])
    server.start(timeout=90)
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as setup:
            jwt, key = account(setup, "two@example.com")
        http = _fresh_connections(server.base_url, jwt)
        wf = http.post("/api/v1/workflows", json={"name": "t", "graph_json": TEXT}).json()["id"]

        # Runs accepted on both processes complete; one WebSocket sees all of them live.
        follower = Follower(server.base_url, jwt, wf)
        follower.start()
        assert follower.subscribed.wait(20)
        # The kernel, not us, picks which process accepts each new connection; on a busy
        # machine one process can win a whole batch. More batches until both have driven runs.
        runs: dict[str, str] = {}
        for _ in range(4):
            batch = _execute(http, wf, 30)
            runs.update(batch)
            results = wait_runs(http, batch, timeout=90)
            assert all(r["status"] == "completed" for r in results.values())
            drivers = query(url, "SELECT DISTINCT driver FROM runs")
            if len({d[0].split("-", 1)[0] for d in drivers}) == 2:
                break
        assert len({d[0].split("-", 1)[0] for d in drivers}) == 2, drivers
        # Both children started at once and both lived: none died setting up what they share.
        assert "starting another" not in server.log_path.read_text()
        deadline = time.monotonic() + 20
        while set(follower.finals) != set(runs):
            assert time.monotonic() < deadline, f"{len(set(runs) - set(follower.finals))} unseen"
            time.sleep(0.1)
        follower.halt.set()
        follower.join(5)  # closed before a process (maybe its own) is killed below
        assert set(follower.finals.values()) == {"run.completed"}

        # A limit of KEY_LIMIT a minute per key holds for the server, whichever process answers.
        with _fresh_connections(server.base_url, key) as by_key:
            codes = [by_key.get("/api/v1/workflows").status_code for _ in range(KEY_LIMIT + 10)]
        assert codes.count(200) == KEY_LIMIT and codes.count(429) == 10, codes

        # A process killed while driving runs is replaced; its runs finish elsewhere.
        slow = http.post("/api/v1/workflows", json={"name": "s", "graph_json": SLOW}).json()["id"]
        slow_runs = _execute(http, slow, 6)
        deadline = time.monotonic() + 30
        while (
            len(query(url, "SELECT 1 FROM node_runs WHERE node_id='wait' AND status='running'")) < 6
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        victim = _children(server)[0]
        os.kill(victim, signal.SIGKILL)
        results = wait_runs(http, slow_runs, timeout=90)
        assert all(r["status"] == "completed" for r in results.values()), results
        assert "starting another" in server.log_path.read_text()
        assert http.get("/api/v1/workflows").status_code == 200

        # A cancel reaches the run whichever process took the request and drives the run.
        cancelled = _execute(http, slow, 4)
        for run_id in cancelled:
            r = http.post(f"/api/v1/workflows/{slow}/runs/{run_id}/cancel")
            assert r.status_code == 202, r.text
        results = wait_runs(http, cancelled, timeout=30)
        assert {r["error"]["code"] for r in results.values()} == {"cancelled"}, results
        assert_nothing_ran_twice_and_the_books_balance(url)
        http.close()
    finally:
        server.stop()
    assert server.proc is not None and server.proc.returncode == 0
    # No child is left listening on the port.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.base_url}/healthz", timeout=2)


def _connections_of(pid: int, port: int) -> int:
    """Established TCP connections on ``port`` that process ``pid`` holds (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    held = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "01" and fields[9] in inodes:
                held += 1
    return held


class KeepAlive:
    """One HTTP/1.1 keep-alive connection asking again and again, as a load generator does:
    connected at once, and again whenever a response says ``Connection: close``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port))

    def ask(self) -> None:
        self.sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            assert chunk, "the server closed the connection before answering"
            head += chunk
        head, _, body = head.partition(b"\r\n\r\n")
        lines = head.decode().lower().split("\r\n")
        assert lines[0].startswith("http/1.1 200"), lines[0]
        length = int(next(x for x in lines if x.startswith("content-length:")).split(":")[1])
        while len(body) < length:
            body += self.sock.recv(4096)
        if "connection: close" in lines:
            self.sock.close()
            self.sock = socket.create_connection(("127.0.0.1", self.port))


def test_keep_alive_connections_end_up_spread_over_the_processes(tmp_path: Path) -> None:
    """Connections opened at once land on whichever process wakes first; the one that holds
    more than its share closes some (Connection: close) and the clients come back."""
    server = ServerProcess(tmp_path / "data", OPEN_LIMITS, args=["--processes", "2"])
    server.start(timeout=90)
    try:
        port = int(server.base_url.rsplit(":", 1)[1])
        clients = [KeepAlive(port) for _ in range(24)]  # a burst, as wrk opens them
        stop = time.monotonic() + 6

        def keep_asking(client: KeepAlive) -> None:
            while time.monotonic() < stop:
                client.ask()

        threads = [threading.Thread(target=keep_asking, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        time.sleep(4)
        held = [_connections_of(pid, port) for pid in _children(server)]
        for thread in threads:
            thread.join(15)
        for client in clients:
            client.sock.close()
        assert sum(held) >= 20, held
        assert min(held) >= 8, held  # 12 each, give or take the slack and the stragglers
    finally:
        server.stop()
