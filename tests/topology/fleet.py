"""What the topology tests share: small graphs, open limits, and the checks that read the
truth from the database itself (one ``node.started`` per start, no double charge, a ledger
that matches every balance, event logs without gaps)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from nodeloom.db.migrate import upgrade
from tests.conftest import PASSWORD, _admin, _pg_url
from tests.services import require_postgres

TEXT = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {
            "id": "a",
            "type": "TextTemplate",
            "position": {"x": 1, "y": 0},
            "data": {"template": "a {{ text }}"},
        },
        {
            "id": "b",
            "type": "TextTemplate",
            "position": {"x": 1, "y": 1},
            "data": {"template": "b {{ text }}"},
        },
        {"id": "join", "type": "TextJoin", "position": {"x": 2, "y": 0}, "data": {}},
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "a"},
        {"id": "e2", "source": "in", "target": "b"},
        {"id": "e3", "source": "a", "target": "join"},
        {"id": "e4", "source": "b", "target": "join"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}
INSTANT = {  # instant nodes only: executed while the run is accepted, on any process
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {
            "id": "tpl",
            "type": "TextTemplate",
            "position": {"x": 1, "y": 0},
            "data": {"template": "now: {{ text }}"},
        },
    ],
    "edges": [{"id": "e1", "source": "in", "target": "tpl"}],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}
MEDIA = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {
            "id": "img",
            "type": "RenderText",
            "position": {"x": 1, "y": 0},
            "data": {"width": 160, "height": 90},
        },
        {
            "id": "small",
            "type": "ImageResize",
            "position": {"x": 2, "y": 0},
            "data": {"width": 80, "height": 46},
        },
        {
            "id": "voice",
            "type": "TextToSpeech",
            "position": {"x": 1, "y": 1},
            "data": {"max_seconds": 5},
        },
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "img"},
        {"id": "e2", "source": "img", "target": "small"},
        {"id": "e3", "source": "in", "target": "voice"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}
SLOW = {
    "nodes": [
        {"id": "in", "type": "TextInput", "position": {"x": 0, "y": 0}, "data": {}},
        {"id": "wait", "type": "Delay", "position": {"x": 1, "y": 0}, "data": {"seconds": 6}},
        {
            "id": "out",
            "type": "TextTemplate",
            "position": {"x": 2, "y": 0},
            "data": {"template": "done {{ text }}"},
        },
    ],
    "edges": [
        {"id": "e1", "source": "in", "target": "wait"},
        {"id": "e2", "source": "wait", "target": "out"},
    ],
    "viewport": {"x": 0, "y": 0, "zoom": 1},
}
OPEN_LIMITS = {
    "NODELOOM_RATE_LIMIT_API_KEY": "1000000",
    "NODELOOM_RATE_LIMIT_JWT": "1000000",
    "NODELOOM_RATE_LIMIT_WEBHOOK": "1000000",
    "NODELOOM_SIGNUP_ENABLED": "true",
    "NODELOOM_LOG_LEVEL": "INFO",
}


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A migrated PostgreSQL database of the test's own, dropped afterwards."""
    require_postgres()
    name = f"nl_topo_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    url = _pg_url(name)
    try:
        upgrade(url)
        yield url
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


# -- reading the truth from the database --------------------------------------------------


def replicate_fleet_env(url: str, replicate_api_url: str, **more: str) -> dict[str, str]:
    """The environment of a fleet on the PostgreSQL database ``url`` that calls a fake of
    Replicate's API (``replicate_api_url``) on 127.0.0.1, plus ``more``."""
    from tests.conftest import TEST_SECRET

    return {
        **OPEN_LIMITS,
        "NODELOOM_DATABASE_URL": url,
        "NODELOOM_SECRET_KEY": TEST_SECRET,
        "NODELOOM_HTTP_ALLOWLIST": '["127.0.0.1/32"]',
        "NODELOOM_REPLICATE_API_URL": replicate_api_url,
        **more,
    }


def query(url: str, sql: str, **params: Any) -> list[Any]:
    async def run() -> list[Any]:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                return list((await conn.execute(sa.text(sql), params)).all())
        finally:
            await engine.dispose()

    return asyncio.run(run())


def assert_nothing_ran_twice_and_the_books_balance(url: str) -> None:
    starts = query(
        url,
        "SELECT run_id, node_id, count(*) FROM run_events WHERE type = 'node.started' "
        "GROUP BY run_id, node_id",
    )
    attempts = {(r.run_id, r.node_id): r.attempts for r in query(url, "SELECT * FROM node_runs")}
    for run_id, node_id, count in starts:
        assert count == attempts[(run_id, node_id)], (run_id, node_id, count)
    twice = query(
        url,
        "SELECT run_id, node_id FROM credit_ledger WHERE kind = 'charge' "
        "GROUP BY run_id, node_id HAVING count(*) > 1",
    )
    assert twice == []
    balances = "SELECT account_id, credits_balance FROM account_balances"
    for account_id, balance in query(url, balances):
        ledger = query(
            url,
            "SELECT coalesce(sum(CASE kind WHEN 'grant' THEN amount WHEN 'hold' THEN -amount "
            "WHEN 'release' THEN amount ELSE 0 END), 0) FROM credit_ledger WHERE account_id = :a",
            a=account_id,
        )[0][0]
        assert ledger == balance, (account_id, ledger, balance)
    for run_id, count, top in query(
        url, "SELECT run_id, count(*), max(seq) FROM run_events GROUP BY run_id"
    ):
        assert count == top, f"run {run_id}: {count} events but seq reaches {top}"


def wait_runs(http: httpx.Client, runs: dict[str, str], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    done: dict[str, Any] = {}
    while len(done) < len(runs):
        for run_id, wf in runs.items():
            if run_id in done:
                continue
            try:
                body = http.get(f"/api/v1/workflows/{wf}/runs/{run_id}").json()
            except (httpx.RemoteProtocolError, httpx.ReadError):
                # A kept-alive connection the server closed as this GET left (its idle
                # timeout passed while a busy machine held this loop): asked again.
                continue
            if body["status"] != "running":
                done[run_id] = body
        assert time.monotonic() < deadline, f"{len(runs) - len(done)} runs still running"
        time.sleep(0.2)
    return done


def login(http: httpx.Client, email: str) -> str:
    r = http.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    return str(r.json()["access_token"])
