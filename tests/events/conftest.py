"""One real ``nodeloom serve`` on 127.0.0.1 for the event tests (shared by the package to save
start-up time), two accounts made over HTTP, and WebSocket helpers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.conftest import PASSWORD
from tests.runs_helpers import e, g, n
from tests.server import ServerProcess


@dataclass
class Account:
    id: str
    jwt: str
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


@dataclass
class Live:
    server: ServerProcess
    owner: Account
    other: Account

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def ws_url(self) -> str:
        return self.server.base_url.replace("http://", "ws://") + "/api/v1/ws"

    def http(self, account: Account | None = None) -> httpx.AsyncClient:
        account = account or self.owner
        return httpx.AsyncClient(base_url=self.base_url, headers=account.headers, timeout=10)

    def connect(self, account: Account | None = None, **kwargs: Any) -> Any:
        account = account or self.owner
        return connect(
            self.ws_url,
            additional_headers={"Authorization": f"Bearer {account.api_key}"},
            open_timeout=5,
            **kwargs,
        )


def _account(http: httpx.Client, email: str) -> Account:
    r = http.post("/api/v1/auth/signup", json={"email": email, "password": PASSWORD})
    assert r.status_code == 201, r.text
    account_id = r.json()["id"]
    r = http.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    jwt = r.json()["access_token"]
    r = http.post(
        "/api/v1/api-keys", json={"name": "k"}, headers={"Authorization": f"Bearer {jwt}"}
    )
    assert r.status_code == 201, r.text
    return Account(account_id, jwt, r.json()["key"])


@pytest.fixture(scope="package")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    data_dir: Path = tmp_path_factory.mktemp("events-server")
    server = ServerProcess(
        data_dir,
        env={
            "NODELOOM_RATE_LIMIT_API_KEY": "1000000",
            "NODELOOM_RATE_LIMIT_JWT": "1000000",
            "NODELOOM_SIGNUP_ENABLED": "true",
            "NODELOOM_SIGNUP_CREDITS": "1000000",
            "NODELOOM_LOG_LEVEL": "WARNING",
        },
    )
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            owner = _account(http, "owner@example.com")
            other = _account(http, "other@example.com")
        yield Live(server, owner, other)
    finally:
        server.stop()


# -- graphs ----------------------------------------------------------------------------------


def quick_graph() -> dict[str, Any]:
    """Two nodes, no waiting: 6 events (run.started ... run.completed)."""
    return g(
        [n("in", "TextInput", text="hi"), n("tpl", "TextTemplate", template="{{ text }}!")],
        [e("in", "tpl")],
    )


def delay_graph(seconds: float) -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput", text="hi"),
            n("d", "Delay", seconds=seconds),
            n("tpl", "TextTemplate", template="{{ text }}!"),
        ],
        [e("in", "d"), e("d", "tpl")],
    )


async def create_workflow(http: httpx.AsyncClient, graph: dict[str, Any]) -> str:
    r = await http.post("/api/v1/workflows", json={"name": "events", "graph_json": graph})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def execute(http: httpx.AsyncClient, workflow_id: str) -> str:
    r = await http.post(f"/api/v1/workflows/{workflow_id}/execute", json={"cache": False})
    assert r.status_code == 202, r.text
    return str(r.json()["run_id"])


async def wait_finished(
    http: httpx.AsyncClient, workflow_id: str, run_id: str, timeout: float = 15
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        r = await http.get(f"/api/v1/workflows/{workflow_id}/runs/{run_id}")
        body: dict[str, Any] = r.json()
        if body["status"] != "running":
            return body
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.05)


async def wait_running(
    http: httpx.AsyncClient, workflow_id: str, run_id: str, node_id: str, timeout: float = 15
) -> None:
    """Until the run's node ``node_id`` is running."""
    deadline = time.monotonic() + timeout
    while True:
        r = await http.get(f"/api/v1/workflows/{workflow_id}/runs/{run_id}")
        body: dict[str, Any] = r.json()
        if any(nr["node_id"] == node_id for nr in body["node_runs"] if nr["status"] == "running"):
            return
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.05)


# -- WebSocket messages ----------------------------------------------------------------------


async def send(ws: ClientConnection, message: dict[str, Any]) -> None:
    await ws.send(orjson.dumps(message).decode())


async def recv(ws: ClientConnection, timeout: float = 5) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        while True:
            message: dict[str, Any] = orjson.loads(await ws.recv())
            if message["type"] != "ping":  # heartbeats
                return message


async def subscribe(ws: ClientConnection, **target: str) -> dict[str, Any]:
    await send(ws, {"type": "subscribe", **target})
    return await recv(ws)


async def events_until_final(
    ws: ClientConnection, run_ids: set[str], timeout: float = 10
) -> dict[str, list[dict[str, Any]]]:
    """Every event received, by run, until each run in ``run_ids`` has sent its final event."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    open_runs = set(run_ids)
    async with asyncio.timeout(timeout):
        while open_runs:
            message = await recv(ws, timeout)
            assert "seq" in message, message
            by_run.setdefault(message["run_id"], []).append(message)
            if message["type"] in ("run.completed", "run.failed"):
                open_runs.discard(message["run_id"])
    return by_run


def assert_contiguous(events: list[dict[str, Any]]) -> None:
    """seq 1..N, no gaps, no duplicates, exactly one final event, last."""
    assert [m["seq"] for m in events] == list(range(1, len(events) + 1)), [
        (m["seq"], m["type"]) for m in events
    ]
    assert events[0]["type"] == "run.started"
    assert events[-1]["type"] in ("run.completed", "run.failed")
    assert sum(m["type"] in ("run.completed", "run.failed") for m in events) == 1
