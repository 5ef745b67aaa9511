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


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_sqlite_memory_is_reported(client: httpx.AsyncClient, owner: User) -> None:
    """Part of the process's RSS is SQLite's page cache: an operator can tell it apart."""
    r = await client.get("/api/v1/workflows", headers=owner.headers)
    assert r.status_code == 200
    lines = (await client.get("/metrics")).text.splitlines()
    found = [float(x.split()[1]) for x in lines if x.startswith("nodeloom_sqlite_memory_bytes ")]
    assert len(found) == 1
    assert 0 < found[0] < 1 << 30
