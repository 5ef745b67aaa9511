"""Rate limits hold across replicas: two app instances (replicas) on one Redis, over HTTP.
(What every store of windows promises, Redis included: tests/contracts/test_windows.py.)
Skipped when Redis is absent, a failure under NODELOOM_REQUIRE_SERVICES=1.
Every test uses its own key namespace so runs never collide."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.api.app import create_app
from nodeloom.db.migrate import upgrade
from nodeloom.ratelimit import RateLimiter
from nodeloom.ratelimit_redis import RedisWindows
from nodeloom.settings import Settings
from tests.api.test_auth import assert_problem
from tests.api.test_webhooks import make_webhook, trigger
from tests.conftest import TEST_SECRET, User, text_graph
from tests.server import free_port
from tests.services import REDIS_URL, require_redis

pytestmark = pytest.mark.redis

API_KEY_LIMIT = 5


@pytest.fixture
def namespace() -> str:
    require_redis()
    return f"nltest-{uuid.uuid4().hex}"


@pytest.fixture
def settings_overrides(namespace: str) -> dict[str, object]:
    return {
        "redis_url": REDIS_URL,
        "rate_limit_api_key": API_KEY_LIMIT,
        "rate_limit_jwt": 100_000,
    }


async def _replica(settings: Settings, namespace: str) -> AsyncIterator[FastAPI]:
    application = create_app(settings)
    chosen = application.state.ctx.limiter
    assert isinstance(chosen.windows, RedisWindows)  # settings.redis_url selects Redis
    await chosen.close()
    # Same Redis, but this test's own key namespace.
    application.state.ctx.limiter = RateLimiter(RedisWindows(REDIS_URL, namespace))
    try:
        async with application.router.lifespan_context(application):
            yield application
    finally:
        await application.state.ctx.limiter.close()


@pytest.fixture
async def app(settings: Settings, namespace: str) -> AsyncIterator[FastAPI]:
    """Replica A (the conftest ``client`` and ``owner`` go through it)."""
    async for application in _replica(settings, namespace):
        yield application


@pytest.fixture
async def client_b(
    settings: Settings, namespace: str, app: FastAPI
) -> AsyncIterator[httpx.AsyncClient]:
    """Replica B: another app instance on the same database and the same Redis."""
    async for application in _replica(settings, namespace):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            yield c


class TestReplicas:
    async def test_api_key_limit_holds_across_replicas(
        self, client: httpx.AsyncClient, client_b: httpx.AsyncClient, owner: User
    ) -> None:
        for i in range(API_KEY_LIMIT):
            c = client if i % 2 == 0 else client_b
            r = await c.get("/api/v1/workflows", headers=owner.headers)
            assert r.status_code == 200
            assert r.headers["ratelimit-remaining"] == str(API_KEY_LIMIT - 1 - i)
        for c in (client, client_b):
            r = await c.get("/api/v1/workflows", headers=owner.headers)
            assert_problem(r, 429, "rate_limited")
            assert r.headers["retry-after"] and r.headers["ratelimit-remaining"] == "0"

    async def test_webhook_limit_holds_across_replicas(
        self, client: httpx.AsyncClient, client_b: httpx.AsyncClient, owner: User
    ) -> None:
        # Management with the JWT (enterprise): the API key's limit is tiny here.
        r = await client.post(
            "/api/v1/workflows",
            json={"name": "wf", "graph_json": text_graph()},
            headers=owner.jwt_headers,
        )
        workflow = r.json()["id"]
        hook = await make_webhook(client, owner, workflow, headers=owner.jwt_headers)
        for i in range(4):
            assert (await trigger(client if i % 2 else client_b, hook["token"])).status_code == 202
        # 12 at once, half through each replica: exactly the 6 remaining slots are taken.
        results = await asyncio.gather(
            *(trigger(client if i % 2 else client_b, hook["token"]) for i in range(12))
        )
        assert sorted(r.status_code for r in results) == [202] * 6 + [429] * 6
        for c in (client, client_b):
            assert_problem(await trigger(c, hook["token"]), 429, "rate_limited")
        r = await client.get(f"/api/v1/workflows/{workflow}/runs", headers=owner.jwt_headers)
        assert len(r.json()) == 10


async def test_redis_unreachable_is_a_503_to_retry_never_a_500(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        secret_key=TEST_SECRET,
        redis_url=f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
    ).prepare()
    await asyncio.to_thread(upgrade, settings.effective_database_url)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            r = await client.post(
                "/api/v1/auth/login", json={"email": "a@example.com", "password": "whatever1"}
            )
            problem = assert_problem(r, 503, "service_unavailable")
            assert "Redis" in str(problem["detail"])
            assert int(r.headers["retry-after"]) >= 1
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/readyz")).status_code == 503
