"""API keys — shown once, hashed at rest, revoked at once, managed with a JWT only."""

from __future__ import annotations

import sqlite3

import httpx
from fastapi import FastAPI

from tests.api.test_auth import assert_problem
from tests.conftest import User


class TestApiKeys:
    async def test_create_shows_the_key_once(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await client.post("/api/v1/api-keys", json={"name": "ci"}, headers=owner.jwt_headers)
        assert r.status_code == 201
        created = r.json()
        assert created["key"].startswith("nlk_") and len(created["key"]) >= 4 + 43
        assert created["key"].startswith(created["prefix"])
        r = await client.get("/api/v1/api-keys", headers=owner.jwt_headers)
        assert r.status_code == 200
        listed = {k["id"]: k for k in r.json()}
        assert created["id"] in listed
        assert "key" not in listed[created["id"]]
        assert created["key"] not in r.text
        assert set(listed[created["id"]]) == {
            "id",
            "name",
            "prefix",
            "created_at",
            "last_used_at",
            "revoked_at",
        }

    async def test_key_is_not_stored_in_plaintext(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        db_file = app.state.ctx.settings.data_dir / "nodeloom.db"
        raw = b""
        for suffix in ("", "-wal"):
            path = db_file.with_name(db_file.name + suffix)
            if path.exists():
                raw += path.read_bytes()
        assert owner.api_key.encode() not in raw
        with sqlite3.connect(db_file) as conn:
            hashes = [row[0] for row in conn.execute("select key_hash from api_keys")]
        assert hashes and all(len(h) == 64 for h in hashes)

    async def test_revocation_takes_effect_on_the_next_request(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        assert (await client.get("/api/v1/workflows", headers=owner.headers)).status_code == 200
        keys = (await client.get("/api/v1/api-keys", headers=owner.jwt_headers)).json()
        r = await client.delete(f"/api/v1/api-keys/{keys[0]['id']}", headers=owner.jwt_headers)
        assert r.status_code == 204
        r = await client.get("/api/v1/workflows", headers=owner.headers)
        assert_problem(r, 401, "unauthorized")
        keys = (await client.get("/api/v1/api-keys", headers=owner.jwt_headers)).json()
        assert keys[0]["revoked_at"] is not None

    async def test_management_needs_a_jwt(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await client.get("/api/v1/api-keys", headers=owner.headers)
        assert_problem(r, 403, "jwt_required")
        r = await client.post("/api/v1/api-keys", json={"name": "x"}, headers=owner.headers)
        assert_problem(r, 403, "jwt_required")

    async def test_another_accounts_key_is_404(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        keys = (await client.get("/api/v1/api-keys", headers=owner.jwt_headers)).json()
        r = await client.delete(f"/api/v1/api-keys/{keys[0]['id']}", headers=other.jwt_headers)
        assert_problem(r, 404, "not_found")
        assert (await client.get("/api/v1/me", headers=owner.headers)).status_code == 200

    async def test_bad_names_are_400(self, client: httpx.AsyncClient, owner: User) -> None:
        for body in ({}, {"name": ""}, {"name": "   "}, {"name": "x" * 201}, {"name": 5}):
            r = await client.post("/api/v1/api-keys", json=body, headers=owner.jwt_headers)
            assert_problem(r, 400, "invalid_request")

    async def test_last_used_at_is_recorded(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI
    ) -> None:
        await client.get("/api/v1/me", headers=owner.headers)
        await app.state.ctx.key_usage.flush()
        keys = (await client.get("/api/v1/api-keys", headers=owner.jwt_headers)).json()
        assert keys[0]["last_used_at"] is not None


async def test_an_account_has_at_most_fifty_active_keys(
    client: httpx.AsyncClient, owner: User
) -> None:
    headers = owner.jwt_headers
    listed = (await client.get("/api/v1/api-keys", headers=headers)).json()
    for i in range(50 - len(listed)):
        r = await client.post("/api/v1/api-keys", json={"name": f"k{i}"}, headers=headers)
        assert r.status_code == 201, r.text
    r = await client.post("/api/v1/api-keys", json={"name": "one too many"}, headers=headers)
    assert_problem(r, 409, "conflict")
    victim = (await client.get("/api/v1/api-keys", headers=headers)).json()[0]["id"]
    assert (await client.delete(f"/api/v1/api-keys/{victim}", headers=headers)).status_code == 204
    r = await client.post("/api/v1/api-keys", json={"name": "now it fits"}, headers=headers)
    assert r.status_code == 201
