"""Run lists while runs are in progress, on both databases and against a real server whose
keep-alive connections must survive every answer, a 500 included."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from nodeloom.api.middleware import ContainErrors
from nodeloom.api.problems import install
from tests.conftest import User
from tests.live import account
from tests.runs_helpers import create_workflow, e, execute, g, n
from tests.server import ServerProcess, free_port

# The template (1 credit) completes at once; the Delay keeps the run in progress.
SLOW = g(
    [n("in", "TextInput"), n("t", "TextTemplate"), n("d", "Delay", seconds=30)],
    [e("in", "t"), e("t", "d")],
)


class TestListsWithRunsInProgress:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_both_lists_show_the_running_run_and_its_credits_so_far(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        wf = await create_workflow(client, owner, SLOW)
        run_id = (await execute(client, owner, wf)).json()["run_id"]
        await _until_template_completed(client, owner, wf, run_id)
        for path in ("/api/v1/runs", f"/api/v1/workflows/{wf}/runs"):
            r = await client.get(path, headers=owner.headers)
            assert r.status_code == 200, r.text
            (summary,) = r.json()
            assert summary["id"] == run_id and summary["status"] == "running"
            # The template has completed: its credit is already charged.
            assert summary["credits_used"] == 1
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202


async def _until_template_completed(
    client: httpx.AsyncClient, owner: User, wf: str, run_id: str
) -> None:
    for _ in range(200):
        r = await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}", headers=owner.headers)
        if {n["node_id"]: n["status"] for n in r.json()["node_runs"]}["t"] == "completed":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the template never completed")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", args=["--processes", "2"])
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_keep_alive_connections_survive_listing_runs_in_progress(server: ServerProcess) -> None:
    """Two server processes, one keep-alive connection: every list answers 200 while a run
    is in progress, and the connection stays usable (a reset shows as a transport error)."""
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        _, key = account(http, "lists@example.com")
        http.headers["Authorization"] = f"Bearer {key}"
        r = http.post("/api/v1/workflows", json={"name": "slow", "graph_json": SLOW})
        assert r.status_code == 201, r.text
        wf = r.json()["id"]
        run_id = http.post(f"/api/v1/workflows/{wf}/execute", json={}).json()["run_id"]
        for _ in range(10):
            for path in ("/api/v1/runs", f"/api/v1/workflows/{wf}/runs"):
                r = http.get(path)
                assert r.status_code == 200, r.text
                assert r.json()[0]["id"] == run_id
        assert http.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel").status_code == 202
    assert "Traceback" not in server.log_path.read_text()


def _raw_requests(port: int, paths: list[str]) -> list[bytes]:
    """Send each request on one keep-alive connection; the status line of each answer."""
    lines: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        reader = sock.makefile("rb")
        for path in paths:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            status = reader.readline()
            lines.append(status)
            length = 0
            while (header := reader.readline()) not in (b"\r\n", b""):
                name, _, value = header.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            reader.read(length)
    return lines


async def test_an_unexpected_error_answers_500_and_keeps_the_connection() -> None:
    """An error no handler expects is a problem+json 500, and the next request on the same
    connection is answered (the framework's outermost handler would re-raise, and the
    server would then close the connection under the client's next request)."""
    app = FastAPI()
    install(app, "http://127.0.0.1")
    app.add_middleware(ContainErrors)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    @app.get("/fine")
    async def fine() -> dict[str, bool]:
        return {"ok": True}

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            r = await http.get("/boom")
            assert r.status_code == 500
            assert r.headers["content-type"] == "application/problem+json"
            assert r.json()["code"] == "internal_error"
        lines = await asyncio.to_thread(_raw_requests, port, ["/boom", "/fine", "/boom", "/fine"])
        assert [line.split()[1] for line in lines] == [b"500", b"200", b"500", b"200"]
    finally:
        server.should_exit = True
        await task
