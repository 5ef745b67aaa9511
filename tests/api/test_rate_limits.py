"""Rate limits: 100 requests per rolling 60 s per API key, 300 per JWT account; over it 429
``rate_limited`` with Retry-After; RateLimit-* headers on every limited response. (Webhook
triggers: tests/api/test_webhooks.py; Redis and replicas: tests/test_redis_ratelimit.py.)"""

from __future__ import annotations

import httpx
import pytest

from tests.api.test_auth import assert_problem
from tests.conftest import User


def assert_headers(r: httpx.Response, limit: int, remaining: int) -> None:
    assert r.headers["ratelimit-limit"] == str(limit)
    assert r.headers["ratelimit-remaining"] == str(remaining)
    assert 0 <= int(r.headers["ratelimit-reset"]) <= 60


async def new_key(client: httpx.AsyncClient, user: User) -> str:
    r = await client.post("/api/v1/api-keys", json={"name": "second"}, headers=user.jwt_headers)
    assert r.status_code == 201
    return str(r.json()["key"])


class TestApiKeyLimit:
    async def test_the_101st_request_in_a_minute_is_429(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        for i in range(100):
            r = await client.get("/api/v1/workflows", headers=owner.headers)
            assert r.status_code == 200, (i, r.text)
            assert_headers(r, 100, 99 - i)
        r = await client.get("/api/v1/workflows", headers=owner.headers)
        assert_problem(r, 429, "rate_limited")
        assert_headers(r, 100, 0)
        assert 1 <= int(r.headers["retry-after"]) <= 60
        assert int(r.headers["ratelimit-reset"]) >= 1
        # Every endpoint taking the key shares its budget.
        r = await client.get("/api/v1/me", headers=owner.headers)
        assert_problem(r, 429, "rate_limited")

    async def test_each_key_and_the_jwt_have_their_own_budget(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        for _ in range(100):
            assert (await client.get("/api/v1/me", headers=owner.headers)).status_code == 200
        assert (await client.get("/api/v1/me", headers=owner.headers)).status_code == 429
        second = await new_key(client, owner)
        r = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {second}"})
        assert r.status_code == 200
        assert_headers(r, 100, 99)
        r = await client.get("/api/v1/me", headers=owner.jwt_headers)
        assert r.status_code == 200 and r.headers["ratelimit-limit"] == "300"
        r = await client.get("/api/v1/me", headers=other.headers)
        assert r.status_code == 200
        assert_headers(r, 100, 99)

    async def test_refused_credentials_are_not_rate_limited_responses(
        self, client: httpx.AsyncClient
    ) -> None:
        r = await client.get("/api/v1/me", headers={"Authorization": "Bearer nlk_nope"})
        assert_problem(r, 401, "unauthorized")
        assert "ratelimit-limit" not in r.headers


class TestJwtLimit:
    async def test_the_301st_jwt_request_is_429(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.get("/api/v1/me", headers=owner.jwt_headers)
        used = 300 - int(r.headers["ratelimit-remaining"])  # sign-up, log-in, key creation
        for _ in range(300 - used):
            r = await client.get("/api/v1/me", headers=owner.jwt_headers)
            assert r.status_code == 200
        assert_headers(r, 300, 0)
        r = await client.get("/api/v1/me", headers=owner.jwt_headers)
        assert_problem(r, 429, "rate_limited")
        assert_headers(r, 300, 0)
        assert int(r.headers["retry-after"]) >= 1


class TestLimitsAreSettings:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"rate_limit_api_key": 3, "rate_limit_jwt": 1000}

    async def test_configured_limit_applies(self, client: httpx.AsyncClient, owner: User) -> None:
        for i in range(3):
            r = await client.get("/api/v1/workflows", headers=owner.headers)
            assert r.status_code == 200
            assert_headers(r, 3, 2 - i)
        r = await client.get("/api/v1/workflows", headers=owner.headers)
        assert_problem(r, 429, "rate_limited")
        assert_headers(r, 3, 0)


class TestAccountBudget:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"rate_limit_api_key": 5, "rate_limit_jwt": 8}

    async def test_more_keys_buy_no_more_requests(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        second = {"Authorization": f"Bearer {await new_key(client, owner)}"}
        used = 0
        for headers in (owner.headers, second):
            while True:
                r = await client.get("/api/v1/workflows", headers=headers)
                if r.status_code == 429:
                    break
                used += 1
        # The two key creations (with the JWT) counted too: 8 in all, whichever credential.
        assert used == 8 - 2
        assert_problem(r, 429, "rate_limited")
        assert "account" in r.json()["detail"]
        assert_headers(r, 8, 0)
        r = await client.get("/api/v1/me", headers=owner.jwt_headers)
        assert_problem(r, 429, "rate_limited")
