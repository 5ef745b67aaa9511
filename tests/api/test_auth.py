"""SPEC §1: sign-up, log-in, /me, credentials on requests."""

from __future__ import annotations

import time

import httpx
import jwt
import pytest
from fastapi import FastAPI

from tests.conftest import PASSWORD, TEST_SECRET, User


def assert_problem(r: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == status and body["code"] == code
    assert isinstance(body["detail"], str) and body["detail"]
    return body


class TestSignup:
    async def test_first_account_is_created(self, client: httpx.AsyncClient) -> None:
        r = await client.post(
            "/api/v1/auth/signup", json={"email": "Boss@Example.com", "password": PASSWORD}
        )
        assert r.status_code == 201
        body = r.json()
        assert body["email"] == "boss@example.com"
        assert body["plan"] == "enterprise" and body["credits_balance"] == 10_000
        assert body["created_at"].endswith("Z")
        assert "password" not in r.text and "hash" not in r.text

    async def test_second_signup_is_forbidden_unless_enabled(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        r = await client.post(
            "/api/v1/auth/signup", json={"email": "x@example.com", "password": PASSWORD}
        )
        assert_problem(r, 403, "forbidden")
        app.state.ctx.settings.signup_enabled = True
        r = await client.post(
            "/api/v1/auth/signup", json={"email": "x@example.com", "password": PASSWORD}
        )
        assert r.status_code == 201
        assert r.json()["plan"] == "free"

    async def test_duplicate_email_conflicts(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        app.state.ctx.settings.signup_enabled = True
        r = await client.post(
            "/api/v1/auth/signup", json={"email": "OWNER@example.com", "password": PASSWORD}
        )
        assert_problem(r, 409, "conflict")

    @pytest.mark.parametrize(
        "body",
        [
            {"email": "a@example.com", "password": "short"},
            {"email": "a@example.com", "password": "x" * 129},
            {"email": "not-an-email", "password": PASSWORD},
            {"password": PASSWORD},
            {"email": "a@example.com"},
            [],
        ],
    )
    async def test_invalid_bodies_are_400(self, client: httpx.AsyncClient, body: object) -> None:
        r = await client.post("/api/v1/auth/signup", json=body)
        problem = assert_problem(r, 400, "invalid_request")
        assert problem["errors"]

    async def test_non_json_body_is_400_with_hint(self, client: httpx.AsyncClient) -> None:
        r = await client.post(
            "/api/v1/auth/signup",
            content=b"email=a",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        problem = assert_problem(r, 400, "invalid_request")
        assert "application/json" in str(problem["detail"])

    async def test_malformed_json_is_400(self, client: httpx.AsyncClient) -> None:
        r = await client.post(
            "/api/v1/auth/signup", content=b"{bad", headers={"content-type": "application/json"}
        )
        assert_problem(r, 400, "invalid_request")


class TestLogin:
    async def test_returns_a_bearer_jwt_for_24_hours(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.post(
            "/api/v1/auth/login", json={"email": owner.email, "password": PASSWORD}
        )
        assert r.status_code == 200
        body = r.json()
        assert body["token_type"] == "bearer" and body["expires_in"] == 86400
        claims = jwt.decode(body["access_token"], TEST_SECRET, algorithms=["HS256"])
        assert claims["sub"] == owner.id
        assert abs(claims["exp"] - time.time() - 86400) < 60

    async def test_wrong_password_and_unknown_email_look_the_same(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        a = await client.post(
            "/api/v1/auth/login", json={"email": owner.email, "password": "wrong password"}
        )
        b = await client.post(
            "/api/v1/auth/login", json={"email": "nobody@example.com", "password": "wrong password"}
        )
        assert_problem(a, 401, "invalid_credentials")
        assert_problem(b, 401, "invalid_credentials")
        assert a.json()["detail"] == b.json()["detail"]

    async def test_throttles_after_ten_failures_per_email(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        for _ in range(10):
            r = await client.post(
                "/api/v1/auth/login", json={"email": owner.email, "password": "nope-nope"}
            )
            assert r.status_code == 401
        r = await client.post(
            "/api/v1/auth/login", json={"email": owner.email, "password": PASSWORD}
        )
        assert_problem(r, 429, "rate_limited")
        assert int(r.headers["Retry-After"]) > 0
        # Another e-mail is not affected.
        r = await client.post(
            "/api/v1/auth/login", json={"email": "other@example.com", "password": "nope-nope"}
        )
        assert r.status_code == 401


class TestCredentials:
    async def test_me_with_jwt_and_with_api_key(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        for headers in (owner.jwt_headers, owner.headers):
            r = await client.get("/api/v1/me", headers=headers)
            assert r.status_code == 200
            assert r.json()["id"] == owner.id

    @pytest.mark.parametrize(
        "header",
        [
            None,
            "Bearer",
            "Bearer ",
            "Basic abc",
            "Bearer nlk_notakey",
            "Bearer not.a.jwt",
            "Token abc",
        ],
    )
    async def test_missing_or_invalid_credentials_are_401(
        self, client: httpx.AsyncClient, owner: User, header: str | None
    ) -> None:
        headers = {"Authorization": header} if header is not None else {}
        r = await client.get("/api/v1/workflows", headers=headers)
        assert_problem(r, 401, "unauthorized")
        assert r.headers["WWW-Authenticate"] == "Bearer"

    async def test_expired_jwt_is_401(self, client: httpx.AsyncClient, owner: User) -> None:
        token = jwt.encode(
            {"sub": owner.id, "exp": int(time.time()) - 5, "iat": 0, "typ": "access"},
            TEST_SECRET,
            algorithm="HS256",
        )
        r = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert_problem(r, 401, "unauthorized")

    async def test_jwt_signed_with_another_secret_is_401(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        token = jwt.encode(
            {"sub": owner.id, "exp": int(time.time()) + 500, "typ": "access"},
            "another-secret-of-sufficient-length-xx",
            algorithm="HS256",
        )
        r = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert_problem(r, 401, "unauthorized")
