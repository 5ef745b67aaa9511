"""A client that stops reading is dropped (close 4408) without slowing anyone else, and the
publisher (the runner, under its commit lock) never waits for it."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from fastapi import FastAPI
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from nodeloom.api.app import create_app
from nodeloom.events.bus import MemoryBus
from nodeloom.events.model import Event
from nodeloom.settings import Settings
from tests.conftest import PASSWORD
from tests.events.conftest import (
    Live,
    assert_contiguous,
    create_workflow,
    events_until_final,
    execute,
    quick_graph,
    subscribe,
)
from tests.server import free_port


def tiny_buffer_socket(port: int) -> socket.socket:
    """A TCP socket whose receive buffer fills after a few frames, so not reading it pushes
    back on the server at once (with compression off: padding would deflate to nothing)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    return sock


async def test_a_socket_that_never_reads_does_not_slow_the_others(live: Live) -> None:
    async with live.http() as http:
        wf = await create_workflow(http, quick_graph())
        slow_sock = tiny_buffer_socket(live.server.port)
        async with (
            live.connect(sock=slow_sock, max_queue=1, compression=None, close_timeout=0.5) as slow,
            live.connect() as fast,
        ):
            await subscribe(slow, workflow_id=wf)
            await subscribe(fast, workflow_id=wf)
            # From here on `slow` is never read.
            started = time.monotonic()
            run_ids = set(await asyncio.gather(*(execute(http, wf) for _ in range(40))))
            by_run = await events_until_final(fast, run_ids, timeout=15)
            elapsed = time.monotonic() - started
    assert set(by_run) == run_ids
    for events in by_run.values():
        assert_contiguous(events)
    assert elapsed < 5


# -- the overflow itself, on an in-process uvicorn with a small queue -------------------------


@pytest.fixture
async def small_queue_server(settings: Settings) -> AsyncIterator[tuple[FastAPI, str]]:
    app = create_app(settings)
    app.state.ctx.bus = MemoryBus(queue_size=32)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "server failed to start"
            await asyncio.sleep(0.02)
        yield app, f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


async def drain(ws: ClientConnection) -> ConnectionClosed:
    try:
        async with asyncio.timeout(15):
            while True:
                await ws.recv()
    except ConnectionClosed as closed:
        return closed
    raise AssertionError("unreachable")


async def test_overflow_closes_the_slow_socket_with_4408(
    small_queue_server: tuple[FastAPI, str],
) -> None:
    app, address = small_queue_server
    bus: MemoryBus = app.state.ctx.bus
    async with httpx.AsyncClient(base_url=f"http://{address}", timeout=10) as http:
        r = await http.post(
            "/api/v1/auth/signup", json={"email": "slow@example.com", "password": PASSWORD}
        )
        account_id = r.json()["id"]
        jwt = (
            await http.post(
                "/api/v1/auth/login", json={"email": "slow@example.com", "password": PASSWORD}
            )
        ).json()["access_token"]
        http.headers["Authorization"] = f"Bearer {jwt}"
        wf = await create_workflow(http, quick_graph())

    url = f"ws://{address}/api/v1/ws?token={jwt}"
    port = int(address.rsplit(":", 1)[1])
    runs = 400
    async with (
        connect(url, sock=tiny_buffer_socket(port), max_queue=1, compression=None) as slow,
        connect(url, max_size=None, compression=None) as fast,
    ):
        await subscribe(slow, workflow_id=wf)
        await subscribe(fast, workflow_id=wf)
        pad = "x" * 4000

        async def publish() -> None:
            for _ in range(runs):
                run_id = str(uuid.uuid4())
                types = ["run.started", "node.started", "node.progress", "node.completed"]
                batch = [
                    Event(t, i + 1, datetime.now(UTC), run_id, wf, account_id, "n", {"pad": pad})
                    for i, t in enumerate([*types, "run.completed"])
                ]
                await bus.publish(batch)  # never waits for a listener
                await asyncio.sleep(0.002)

        async def receive_all() -> dict[str, list[dict[str, Any]]]:
            received: dict[str, list[dict[str, Any]]] = {}
            async with asyncio.timeout(20):
                while sum(len(v) for v in received.values()) < runs * 5:
                    m = orjson.loads(await fast.recv())
                    if "seq" in m:
                        received.setdefault(m["run_id"], []).append(m)
            return received

        async def slow_dropped() -> None:
            while len(bus._by_key.get(("workflow", wf), ())) != 1:
                await asyncio.sleep(0.01)

        receiver = asyncio.create_task(receive_all())
        publisher = asyncio.create_task(publish())
        await asyncio.wait_for(slow_dropped(), 10)
        closed = await drain(slow)  # reading again lets the close frame through
        await publisher
        received = await receiver
    assert closed.rcvd is not None and closed.rcvd.code == 4408, closed
    assert len(received) == runs
    for events in received.values():
        assert_contiguous(events)
