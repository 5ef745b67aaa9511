"""Schedules and callbacks with more than one process: two ``nodeloom serve`` replicas on
one database each run the schedule loop and the callback sender, yet every firing starts
exactly one run and every run's callback is sent exactly once. On PostgreSQL (replicas of a
scale-out) and on one shared SQLite file (two embedded servers)."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TEST_SECRET
from tests.fakes import serve
from tests.live import account
from tests.server import ServerProcess
from tests.topology.fleet import OPEN_LIMITS, TEXT, postgres_database, query

pytestmark = pytest.mark.slow

FIRING_EVERY = 2  # seconds


@contextlib.contextmanager
def receiver() -> Iterator[tuple[str, list[str]]]:
    """A callback receiver on 127.0.0.1: (its URL, the webhook-id of every POST)."""
    seen: list[str] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            with lock:
                seen.append(self.headers["webhook-id"])
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = serve(Handler)
    try:
        yield server.url, seen
    finally:
        server.stop()


@contextlib.contextmanager
def database(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "postgres":
        with postgres_database() as url:
            yield url
        return
    from nodeloom.db.migrate import upgrade

    url = f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    upgrade(url)
    yield url


@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
def test_two_replicas_fire_each_time_once_and_call_back_once(tmp_path: Path, kind: str) -> None:
    with database(kind, tmp_path) as url, receiver() as (callback_url, seen):
        env = {
            **OPEN_LIMITS,
            "NODELOOM_DATABASE_URL": url,
            "NODELOOM_SECRET_KEY": TEST_SECRET,
            "NODELOOM_SCHEDULE_TICK_SECONDS": "0.1",
            "NODELOOM_SCHEDULE_MIN_INTERVAL_SECONDS": "1",
            "NODELOOM_CALLBACK_POLL_SECONDS": "0.1",
            "NODELOOM_HTTP_ALLOWLIST": '["127.0.0.1"]',
        }
        replicas = [ServerProcess(tmp_path / f"replica{i}", env) for i in range(2)]
        try:
            for replica in replicas:
                replica.start()
            _scenario(url, replicas, callback_url, seen)
        finally:
            for replica in replicas:
                replica.stop()


def _scenario(url: str, replicas: list[ServerProcess], callback_url: str, seen: list[str]) -> None:
    http = httpx.Client(base_url=replicas[0].base_url, timeout=30)
    _, key = account(http, "schedules@example.com")
    http.headers["Authorization"] = f"Bearer {key}"
    assert http.post("/api/v1/callbacks/secret").status_code == 201
    wf = http.post("/api/v1/workflows", json={"name": "tick", "graph_json": TEXT}).json()["id"]
    r = http.post(
        f"/api/v1/workflows/{wf}/schedules",
        json={
            "name": "every two seconds",
            "cron": f"* * * * * */{FIRING_EVERY}",
            "input": {"text": "tick"},
            "callback_url": callback_url,
        },
    )
    assert r.status_code == 201, r.text
    schedule = r.json()
    time.sleep(9)
    r = http.patch(f"/api/v1/workflows/{wf}/schedules/{schedule['id']}", json={"active": False})
    assert r.status_code == 200
    time.sleep(1)  # a firing claimed just before the pause finishes starting its run

    rows = query(
        url, "SELECT id, created_at FROM runs WHERE trigger = 'schedule' ORDER BY created_at"
    )
    assert len(rows) >= 3, rows
    starts = [r[1] if isinstance(r[1], datetime) else datetime.fromisoformat(r[1]) for r in rows]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    # Two replicas firing the same time would start two runs milliseconds apart.
    assert min(gaps) > FIRING_EVERY / 2, gaps

    run_ids = {r[0] for r in rows}
    deadline = time.monotonic() + 30
    while set(seen) != run_ids:
        assert time.monotonic() < deadline, (len(seen), len(run_ids))
        time.sleep(0.1)
    time.sleep(1)
    assert Counter(seen).most_common(1)[0][1] == 1  # each run called back once
    assert set(seen) == run_ids
    # Both replicas serve the API, so either may have fired: the database decides who.
    other = httpx.Client(base_url=replicas[1].base_url, timeout=30, headers=http.headers)
    shown = other.get(f"/api/v1/workflows/{wf}/schedules/{schedule['id']}").json()
    assert shown["last_run_id"] in run_ids and shown["next_run_at"] is None
    http.close()
    other.close()
