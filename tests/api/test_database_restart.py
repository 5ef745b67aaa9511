"""PostgreSQL restarts, or a proxy drops every idle connection, while the API is idle: the
next requests, reads and writes, are answered as if nothing happened, never with a 503 that
the client would have to try again."""

from __future__ import annotations

import httpx
import pytest

from nodeloom.settings import Settings
from tests.conftest import User, drop_connections, text_graph
from tests.runs_helpers import create_workflow, execute, wait_for_run


@pytest.fixture(params=["postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_the_first_requests_after_every_connection_dropped_succeed(
    client: httpx.AsyncClient, owner: User, settings: Settings
) -> None:
    wf = await create_workflow(client, owner, text_graph())
    # Several requests at once so the pool holds several connections, all to be ended.
    for _ in range(3):
        r = await execute(client, owner, wf, {"input": {"text": "before"}, "cache": False})
        assert r.status_code == 202, r.text
    assert settings.database_url is not None
    assert await drop_connections(settings.database_url) > 0

    r = await client.get("/api/v1/workflows", headers=owner.headers)  # a read
    assert r.status_code == 200, r.text
    r = await execute(client, owner, wf, {"input": {"text": "after"}, "cache": False})  # a write
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, owner, wf, str(r.json()["run_id"]), timeout=60)
    assert run["status"] == "completed", run
