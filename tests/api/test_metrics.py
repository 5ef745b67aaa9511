"""/metrics counts what an operator sizes a database by: statements sent to it."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import User


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _statements(client: httpx.AsyncClient) -> float:
    for line in (await client.get("/metrics")).text.splitlines():
        if line.startswith("nodeloom_db_statements "):
            return float(line.split()[1])
    raise AssertionError("nodeloom_db_statements is missing")


async def test_each_request_adds_its_statements(client: httpx.AsyncClient, owner: User) -> None:
    before = await _statements(client)
    for _ in range(5):
        r = await client.get("/api/v1/workflows", headers=owner.headers)
        assert r.status_code == 200
    per_request = (await _statements(client) - before) / 5
    # Authentication and the page: a few statements, transaction control not counted.
    assert 2 <= per_request <= 6, per_request
