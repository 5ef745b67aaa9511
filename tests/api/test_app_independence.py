"""Apps built in one process share their route objects (api/route_table.py) and their OpenAPI
document (api/openapi.py), and nothing else: each answers by its own settings, from its own
database, side by side on one event loop."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.api.route_table import api_routes
from nodeloom.settings import Settings
from tests.conftest import PASSWORD, TEST_SECRET, User, make_user, started_app

SECOND_BASE = "https://second.example"


@pytest.fixture
async def second_app(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> AsyncIterator[FastAPI]:
    """Another app in this process: its own database and data, sign-up open, a tight rate
    limit, another public address, and FastAPI answering the hot requests."""
    data = tmp_path_factory.mktemp("second")
    shutil.copy(sqlite_template, data / "nodeloom.db")
    settings = Settings(
        data_dir=data,
        secret_key=TEST_SECRET,
        base_url=SECOND_BASE,
        signup_enabled=True,
        rate_limit_api_key=3,
        hot_paths=False,
    ).prepare()
    async with started_app(settings) as application:
        yield application


@pytest.fixture
async def second(second_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=second_app)
    async with httpx.AsyncClient(transport=transport, base_url=SECOND_BASE) as c:
        yield c


def test_the_apps_share_their_routes_and_document(app: FastAPI, second_app: FastAPI) -> None:
    for application in (app, second_app):
        assert all(any(r is s for r in application.routes) for s in api_routes())
    assert app.state.ctx is not second_app.state.ctx
    assert app.openapi() is second_app.openapi()


async def test_each_app_answers_by_its_own_settings(
    client: httpx.AsyncClient, owner: User, second: httpx.AsyncClient
) -> None:
    # Sign-up: closed on the first app once it has its owner, open on the second.
    r = await client.post(
        "/api/v1/auth/signup", json={"email": "b@example.com", "password": PASSWORD}
    )
    assert r.status_code == 403, r.text
    second_owner = await make_user(second, "owner@example.com")
    await make_user(second, "b@example.com")

    # Each has its own database: the first app's owner is not the second's.
    assert second_owner.id != owner.id
    r = await second.get("/api/v1/workflows", headers=owner.headers)
    assert r.status_code == 401
    # ... and its own public address in the problems it answers.
    assert r.json()["type"].startswith(SECOND_BASE + "/")
    r = await client.get("/api/v1/workflows", headers=second_owner.headers)
    assert r.status_code == 401
    assert r.json()["type"].startswith("http://testserver/")

    # Each counts against its own limit: 3 requests a minute per key on the second app.
    statuses = [
        (await second.get("/api/v1/workflows", headers=second_owner.headers)).status_code
        for _ in range(4)
    ]
    assert statuses == [200, 200, 200, 429]
    for _ in range(4):
        r = await client.get("/api/v1/workflows", headers=owner.headers)
        assert r.status_code == 200, r.text
