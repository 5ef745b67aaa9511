"""Sign-up, log-in, /me, credentials on requests."""

from __future__ import annotations

import asyncio
import time

import httpx
import jwt
import pytest
from argon2 import PasswordHasher
from fastapi import FastAPI

from nodeloom.auth import passwords
from tests.conftest import PASSWORD, TEST_SECRET, User


def assert_problem(r: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == status and body["code"] == code
    assert isinstance(body["detail"], str) and body["detail"]
    return body


class TestConcurrentFirstSignup:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_twenty_at_once_make_exactly_one_owner(self, client: httpx.AsyncClient) -> None:
        answers = await asyncio.gather(
            *[
                client.post(
                    "/api/v1/auth/signup", json={"email": f"o{i}@example.com", "password": PASSWORD}
                )
                for i in range(20)
            ]
        )
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [201] + [403] * 19, statuses


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

    def test_an_unknown_email_costs_a_verification_of_the_servers_own_profile(self) -> None:
        # The dummy hash an unknown e-mail is checked against is a constant, not made at
        # import: it must still be of the profile real passwords are hashed with, or a
        # login's time would tell whether the e-mail has an account.
        assert not PasswordHasher().check_needs_rehash(passwords._DUMMY_HASH)
        assert passwords.verify_password(None, "dummy-password-for-timing") is False

    async def test_failures_back_off_per_address_and_never_lock_the_owner_out(
        self, app: FastAPI, client: httpx.AsyncClient, owner: User
    ) -> None:
        wrong = {"email": owner.email, "password": "nope-nope"}
        async with _from_address(app, "203.0.113.7") as stranger:
            for _ in range(3):
                assert (await stranger.post("/api/v1/auth/login", json=wrong)).status_code == 401
            # Back-off: the fourth try from that address waits, even with the right password.
            r = await stranger.post(
                "/api/v1/auth/login", json={"email": owner.email, "password": PASSWORD}
            )
            assert_problem(r, 429, "rate_limited")
            assert 1 <= int(r.headers["Retry-After"]) <= 10
            # Another e-mail from the same address is not held back.
            other = {"email": "other@example.com", "password": "nope-nope"}
            assert (await stranger.post("/api/v1/auth/login", json=other)).status_code == 401
        # The owner, elsewhere, logs in as usual.
        async with _from_address(app, "198.51.100.20") as home:
            r = await home.post(
                "/api/v1/auth/login", json={"email": owner.email, "password": PASSWORD}
            )
            assert r.status_code == 200, r.text

    async def test_one_address_failing_for_many_emails_is_stopped(
        self, app: FastAPI, client: httpx.AsyncClient, owner: User
    ) -> None:
        async with _from_address(app, "192.0.2.99") as stuffer:
            for i in range(50):
                r = await stuffer.post(
                    "/api/v1/auth/login", json={"email": f"u{i}@example.com", "password": "x"}
                )
                assert r.status_code == 401
            r = await stuffer.post(
                "/api/v1/auth/login", json={"email": owner.email, "password": PASSWORD}
            )
            assert_problem(r, 429, "rate_limited")
        r = await client.post(
            "/api/v1/auth/login", json={"email": owner.email, "password": PASSWORD}
        )
        assert r.status_code == 200


def _from_address(app: FastAPI, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


class TestPassword:
    async def test_change_revokes_older_tokens_but_not_keys(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.post(
            "/api/v1/me/password",
            json={"current_password": "wrong one", "new_password": "a brand new password"},
            headers=owner.jwt_headers,
        )
        assert_problem(r, 401, "invalid_credentials")
        r = await client.post(
            "/api/v1/me/password",
            json={"current_password": PASSWORD, "new_password": "short"},
            headers=owner.jwt_headers,
        )
        assert_problem(r, 400, "invalid_request")
        r = await client.post(
            "/api/v1/me/password",
            json={"current_password": PASSWORD, "new_password": "a brand new password"},
            headers=owner.headers,
        )
        assert_problem(r, 403, "jwt_required")
        r = await client.post(
            "/api/v1/me/password",
            json={"current_password": PASSWORD, "new_password": "a brand new password"},
            headers=owner.jwt_headers,
        )
        assert r.status_code == 200, r.text
        fresh = {"Authorization": f"Bearer {r.json()['access_token']}"}
        assert_problem(
            await client.get("/api/v1/me", headers=owner.jwt_headers), 401, "unauthorized"
        )
        assert (await client.get("/api/v1/me", headers=fresh)).status_code == 200
        assert (await client.get("/api/v1/me", headers=owner.headers)).status_code == 200
        r = await client.post(
            "/api/v1/auth/login", json={"email": owner.email, "password": PASSWORD}
        )
        assert_problem(r, 401, "invalid_credentials")
        r = await client.post(
            "/api/v1/auth/login", json={"email": owner.email, "password": "a brand new password"}
        )
        assert r.status_code == 200


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
