"""Webhook triggers: management, plans, the trigger endpoint and
every refusal it can give, the 1 MB cap, the per-webhook limit and signatures."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI

from nodeloom.auth.signatures import TOLERANCE_SECONDS, parse_header, sign
from nodeloom.errors import BadSignature
from nodeloom.store import accounts
from tests.api.test_auth import assert_problem
from tests.conftest import User, text_graph
from tests.runs_helpers import balance, create_workflow, wait_for_run

LIMIT = 1_048_576
SECRET = "whsec-" + "s" * 30
SEED_BODY = {"text": "A sunset over the sea", "category": "travel"}


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    # Management calls must not run into the per-key limit; the webhook limit stays at 10.
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


async def make_webhook(
    client: httpx.AsyncClient,
    user: User,
    workflow_id: str,
    *,
    headers: dict[str, str] | None = None,
    **body: Any,
) -> dict[str, Any]:
    r = await client.post(
        f"/api/v1/workflows/{workflow_id}/webhooks",
        json={"name": "hook", "active": True, **body},
        headers=headers or user.headers,
    )
    assert r.status_code == 201, r.text
    created: dict[str, Any] = r.json()
    return created


async def trigger(
    client: httpx.AsyncClient,
    token: str,
    body: Any = SEED_BODY,
    *,
    content: Any = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    if content is None:
        content = orjson.dumps(body)
    return await client.post(
        f"/api/v1/webhooks/{token}",
        content=content,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


async def set_plan(app: FastAPI, user: User, plan: str) -> None:
    await app.state.ctx.db.write(lambda c: accounts.set_plan(c, user.id, plan))


async def set_credits(app: FastAPI, user: User, credits: int) -> None:
    await app.state.ctx.db.write(lambda c: accounts.set_credits(c, user.id, credits))


async def runs_of(client: httpx.AsyncClient, user: User, workflow_id: str) -> list[dict[str, Any]]:
    r = await client.get(f"/api/v1/workflows/{workflow_id}/runs", headers=user.headers)
    assert r.status_code == 200, r.text
    runs: list[dict[str, Any]] = r.json()
    return runs


def body_of_size(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes."""
    frame = b'{"text": ""}'
    body = b'{"text": "' + b"a" * (size - len(frame)) + b'"}'
    assert len(body) == size
    return body


@pytest.fixture
async def workflow(client: httpx.AsyncClient, owner: User) -> str:
    return await create_workflow(client, owner, text_graph("{{ text }} / {{ input.category }}"))


@pytest.fixture
async def hook(client: httpx.AsyncClient, owner: User, workflow: str) -> dict[str, Any]:
    return await make_webhook(client, owner, workflow)


class TestManagement:
    async def test_create_returns_token_and_url(
        self, client: httpx.AsyncClient, owner: User, workflow: str
    ) -> None:
        r = await client.post(
            f"/api/v1/workflows/{workflow}/webhooks",
            json={"name": "orders", "active": True},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        body = r.json()
        assert set(body) == {
            "id",
            "workflow_id",
            "name",
            "token",
            "url",
            "active",
            "signed",
            "callback_url",
            "created_at",
        }
        assert body["name"] == "orders" and body["active"] is True and body["signed"] is False
        assert body["workflow_id"] == workflow
        # 32 random bytes, base64url without padding: 43 characters.
        assert re.fullmatch(r"[A-Za-z0-9_-]{43,}", body["token"])
        assert body["url"] == f"http://testserver/api/v1/webhooks/{body['token']}"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", body["created_at"])

    async def test_tokens_are_unique(
        self, client: httpx.AsyncClient, owner: User, workflow: str
    ) -> None:
        tokens = {(await make_webhook(client, owner, workflow))["token"] for _ in range(5)}
        assert len(tokens) == 5

    async def test_active_defaults_to_true_and_can_start_inactive(
        self, client: httpx.AsyncClient, owner: User, workflow: str
    ) -> None:
        r = await client.post(
            f"/api/v1/workflows/{workflow}/webhooks", json={"name": "a"}, headers=owner.headers
        )
        assert r.status_code == 201 and r.json()["active"] is True
        off = await make_webhook(client, owner, workflow, active=False)
        assert off["active"] is False

    @pytest.mark.parametrize(
        "body",
        [
            {},
            {"name": ""},
            {"name": 5},
            {"name": "x", "active": "maybe"},
            {"name": "x", "secret": "short"},
        ],
    )
    async def test_invalid_body_is_400(
        self, client: httpx.AsyncClient, owner: User, workflow: str, body: dict[str, Any]
    ) -> None:
        r = await client.post(
            f"/api/v1/workflows/{workflow}/webhooks", json=body, headers=owner.headers
        )
        assert_problem(r, 400, "invalid_request")

    async def test_token_is_not_stored_in_plaintext(
        self, client: httpx.AsyncClient, owner: User, workflow: str, app: FastAPI
    ) -> None:
        created = await make_webhook(client, owner, workflow, secret=SECRET)
        db_file = app.state.ctx.settings.data_dir / "nodeloom.db"
        raw = b""
        for suffix in ("", "-wal"):
            path = db_file.with_name(db_file.name + suffix)
            if path.exists():
                raw += path.read_bytes()
        assert created["token"].encode() not in raw
        assert SECRET.encode() not in raw
        with sqlite3.connect(db_file) as conn:
            rows = list(conn.execute("select token_hash, token_encrypted from webhooks"))
        assert rows and all(len(h) == 64 and created["token"] not in e for h, e in rows)

    async def test_list_shows_urls_again_and_never_the_secret(
        self, client: httpx.AsyncClient, owner: User, workflow: str
    ) -> None:
        first = await make_webhook(client, owner, workflow, name="one")
        second = await make_webhook(client, owner, workflow, name="two", secret=SECRET)
        assert second["signed"] is True and SECRET not in str(second)
        r = await client.get(f"/api/v1/workflows/{workflow}/webhooks", headers=owner.headers)
        assert r.status_code == 200
        listed = r.json()
        assert isinstance(listed, list)
        assert [w["id"] for w in listed] == [second["id"], first["id"]]  # newest first
        assert listed[1]["url"] == first["url"] and listed[1]["token"] == first["token"]
        assert SECRET not in r.text

    async def test_list_pages_with_link_header(
        self, client: httpx.AsyncClient, owner: User, workflow: str
    ) -> None:
        ids = [(await make_webhook(client, owner, workflow))["id"] for _ in range(3)]
        url: str | None = f"/api/v1/workflows/{workflow}/webhooks?limit=2"
        seen: list[str] = []
        while url:
            r = await client.get(url, headers=owner.headers)
            assert r.status_code == 200
            seen += [w["id"] for w in r.json()]
            link = r.headers.get("link")
            url = link[1 : link.index(">")] if link else None
        assert seen == ids[::-1]

    async def test_patch_deactivates_without_deleting(
        self, client: httpx.AsyncClient, owner: User, workflow: str, hook: dict[str, Any]
    ) -> None:
        path = f"/api/v1/workflows/{workflow}/webhooks/{hook['id']}"
        r = await client.patch(path, json={"active": False}, headers=owner.headers)
        assert r.status_code == 200
        assert r.json()["active"] is False and r.json()["name"] == "hook"
        assert r.json()["url"] == hook["url"]
        assert_problem(await trigger(client, hook["token"]), 403, "webhook_inactive")
        r = await client.patch(path, json={"name": "renamed"}, headers=owner.headers)
        assert r.json()["active"] is False and r.json()["name"] == "renamed"
        r = await client.patch(path, json={"active": True}, headers=owner.headers)
        assert r.json()["active"] is True
        assert (await trigger(client, hook["token"])).status_code == 202

    async def test_delete_stops_the_webhook_at_once(
        self, client: httpx.AsyncClient, owner: User, workflow: str, hook: dict[str, Any]
    ) -> None:
        path = f"/api/v1/workflows/{workflow}/webhooks/{hook['id']}"
        r = await client.delete(path, headers=owner.headers)
        assert r.status_code == 204 and r.content == b""
        assert_problem(await trigger(client, hook["token"]), 404, "not_found")
        listed = (
            await client.get(f"/api/v1/workflows/{workflow}/webhooks", headers=owner.headers)
        ).json()
        assert listed == []
        assert_problem(await client.delete(path, headers=owner.headers), 404, "not_found")
        r = await client.patch(path, json={"active": True}, headers=owner.headers)
        assert_problem(r, 404, "not_found")

    async def test_deleting_the_workflow_stops_its_webhooks(
        self, client: httpx.AsyncClient, owner: User, workflow: str, hook: dict[str, Any]
    ) -> None:
        r = await client.delete(f"/api/v1/workflows/{workflow}", headers=owner.headers)
        assert r.status_code == 204
        assert_problem(await trigger(client, hook["token"]), 404, "not_found")
        r = await client.get(f"/api/v1/workflows/{workflow}/webhooks", headers=owner.headers)
        assert_problem(r, 404, "not_found")

    async def test_another_accounts_workflow_and_webhook_are_404(
        self,
        client: httpx.AsyncClient,
        owner: User,
        other: User,
        app: FastAPI,
        workflow: str,
        hook: dict[str, Any],
    ) -> None:
        await set_plan(app, other, "enterprise")
        base = f"/api/v1/workflows/{workflow}/webhooks"
        for r in (
            await client.post(base, json={"name": "x"}, headers=other.headers),
            await client.get(base, headers=other.headers),
            await client.patch(
                f"{base}/{hook['id']}", json={"active": False}, headers=other.headers
            ),
            await client.delete(f"{base}/{hook['id']}", headers=other.headers),
        ):
            assert_problem(r, 404, "not_found")
        # The owner's webhook through another (own) workflow id is not found either.
        mine = await create_workflow(client, other, text_graph())
        r = await client.patch(
            f"/api/v1/workflows/{mine}/webhooks/{hook['id']}",
            json={"active": False},
            headers=other.headers,
        )
        assert_problem(r, 404, "not_found")
        r = await client.delete(
            f"/api/v1/workflows/{workflow}/webhooks/not-a-uuid", headers=owner.headers
        )
        assert_problem(r, 404, "not_found")
        assert (await trigger(client, hook["token"])).status_code == 202

    async def test_management_needs_credentials(
        self, client: httpx.AsyncClient, workflow: str
    ) -> None:
        r = await client.get(f"/api/v1/workflows/{workflow}/webhooks")
        assert_problem(r, 401, "unauthorized")


class TestPlans:
    async def test_free_plan_has_no_webhooks(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI, workflow: str
    ) -> None:
        hook = await make_webhook(client, owner, workflow)
        await set_plan(app, owner, "free")
        base = f"/api/v1/workflows/{workflow}/webhooks"
        for headers in (owner.headers, owner.jwt_headers):
            for r in (
                await client.post(base, json={"name": "x"}, headers=headers),
                await client.get(base, headers=headers),
                await client.patch(f"{base}/{hook['id']}", json={}, headers=headers),
                await client.delete(f"{base}/{hook['id']}", headers=headers),
            ):
                assert_problem(r, 403, "plan_upgrade_required")
        # The plan is checked before the body: even an invalid one gets 403.
        r = await client.post(base, json={"name": ""}, headers=owner.headers)
        assert_problem(r, 403, "plan_upgrade_required")
        # Triggering checks the owner's current plan.
        assert_problem(await trigger(client, hook["token"]), 403, "plan_upgrade_required")
        assert await runs_of(client, owner, workflow) == []

    async def test_pro_manages_with_an_api_key_only(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI, workflow: str
    ) -> None:
        await set_plan(app, owner, "pro")
        hook = await make_webhook(client, owner, workflow)
        base = f"/api/v1/workflows/{workflow}/webhooks"
        r = await client.get(base, headers=owner.headers)
        assert r.status_code == 200 and len(r.json()) == 1
        for r in (
            await client.post(base, json={"name": "x"}, headers=owner.jwt_headers),
            await client.get(base, headers=owner.jwt_headers),
            await client.patch(f"{base}/{hook['id']}", json={}, headers=owner.jwt_headers),
            await client.delete(f"{base}/{hook['id']}", headers=owner.jwt_headers),
        ):
            assert_problem(r, 403, "plan_upgrade_required")
        # Pro triggers work.
        assert (await trigger(client, hook["token"])).status_code == 202

    @pytest.mark.parametrize("plan", ["business", "enterprise"])
    async def test_business_and_up_manage_with_a_jwt_too(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI, workflow: str, plan: str
    ) -> None:
        await set_plan(app, owner, plan)
        hook = await make_webhook(client, owner, workflow, headers=owner.jwt_headers)
        r = await client.get(f"/api/v1/workflows/{workflow}/webhooks", headers=owner.jwt_headers)
        assert r.status_code == 200 and r.json()[0]["id"] == hook["id"]
        assert (await trigger(client, hook["token"])).status_code == 202

    async def test_plan_change_takes_effect_at_once(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI, hook: dict[str, Any]
    ) -> None:
        await set_plan(app, owner, "free")
        assert_problem(await trigger(client, hook["token"]), 403, "plan_upgrade_required")
        await set_plan(app, owner, "pro")
        assert (await trigger(client, hook["token"])).status_code == 202


class TestTrigger:
    async def test_json_body_becomes_the_run_input(
        self, client: httpx.AsyncClient, owner: User, workflow: str, hook: dict[str, Any]
    ) -> None:
        r = await client.post(hook["url"].removeprefix("http://testserver"), json=SEED_BODY)
        assert r.status_code == 202, r.text
        body = r.json()
        assert set(body) == {"run_id", "status", "estimated_credits"}
        assert body["status"] == "running" and body["estimated_credits"] == 1
        assert r.headers["ratelimit-limit"] == "10"
        assert r.headers["ratelimit-remaining"] == "9"
        assert 0 < int(r.headers["ratelimit-reset"]) <= 60
        run = await wait_for_run(client, owner, workflow, body["run_id"])
        assert run["status"] == "completed" and run["input"] == SEED_BODY
        art = run["node_runs"][1]["artifact_id"]
        r = await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)
        assert r.text == "A sunset over the sea / travel"
        assert [x["id"] for x in await runs_of(client, owner, workflow)] == [body["run_id"]]

    async def test_the_token_is_the_only_credential(
        self, client: httpx.AsyncClient, hook: dict[str, Any]
    ) -> None:
        r = await trigger(client, hook["token"], headers={"Authorization": "Bearer nonsense"})
        assert r.status_code == 202

    @pytest.mark.parametrize(
        "content_type", ["application/json; charset=utf-8", "application/cloudevents+json"]
    )
    async def test_json_content_types_are_accepted(
        self, client: httpx.AsyncClient, hook: dict[str, Any], content_type: str
    ) -> None:
        r = await trigger(client, hook["token"], headers={"Content-Type": content_type})
        assert r.status_code == 202

    @pytest.mark.parametrize(
        "token",
        ["short", "A" * 43, "!" * 43, "a" * 300],
    )
    async def test_unknown_token_is_404(self, client: httpx.AsyncClient, token: str) -> None:
        assert_problem(await trigger(client, token), 404, "not_found")

    @pytest.mark.parametrize(
        "content_type", [None, "text/plain", "application/x-www-form-urlencoded"]
    )
    async def test_non_json_content_type_is_415(
        self, client: httpx.AsyncClient, hook: dict[str, Any], content_type: str | None
    ) -> None:
        headers = {"Content-Type": content_type} if content_type else {}
        r = await client.post(
            f"/api/v1/webhooks/{hook['token']}", content=b'{"text": "x"}', headers=headers
        )
        assert_problem(r, 415, "unsupported_media_type")

    @pytest.mark.parametrize(
        "content", [b"", b"   ", b"{not json", b"[1, 2]", b'"text"', b"42", b"null", b"\xff\xfe"]
    )
    async def test_invalid_json_or_not_an_object_is_400(
        self, client: httpx.AsyncClient, hook: dict[str, Any], content: bytes
    ) -> None:
        r = await trigger(client, hook["token"], content=content)
        body = assert_problem(r, 400, "invalid_request")
        assert body["errors"]

    async def test_insufficient_credits_is_402(
        self,
        client: httpx.AsyncClient,
        owner: User,
        app: FastAPI,
        workflow: str,
        hook: dict[str, Any],
    ) -> None:
        await set_credits(app, owner, 0)
        body = assert_problem(await trigger(client, hook["token"]), 402, "insufficient_credits")
        assert body["required"] == 1 and body["available"] == 0
        assert await runs_of(client, owner, workflow) == []
        assert await balance(client, owner) == 0


class TestBodyLimit:
    async def test_exactly_one_mebibyte_is_accepted(
        self, client: httpx.AsyncClient, hook: dict[str, Any]
    ) -> None:
        r = await trigger(client, hook["token"], content=body_of_size(LIMIT))
        assert r.status_code == 202, r.text

    async def test_one_byte_more_is_413(
        self, client: httpx.AsyncClient, owner: User, workflow: str, hook: dict[str, Any]
    ) -> None:
        r = await trigger(client, hook["token"], content=body_of_size(LIMIT + 1))
        assert_problem(r, 413, "payload_too_large")
        assert await runs_of(client, owner, workflow) == []

    async def test_chunked_body_without_length(
        self, client: httpx.AsyncClient, hook: dict[str, Any]
    ) -> None:
        def chunked(data: bytes) -> AsyncIterator[bytes]:
            async def gen() -> AsyncIterator[bytes]:
                for i in range(0, len(data), 65_536):
                    yield data[i : i + 65_536]

            return gen()

        r = await trigger(client, hook["token"], content=chunked(body_of_size(LIMIT)))
        assert r.request.headers.get("content-length") is None
        assert r.request.headers.get("transfer-encoding") == "chunked"
        assert r.status_code == 202, r.text
        r = await trigger(client, hook["token"], content=chunked(body_of_size(LIMIT + 1)))
        assert_problem(r, 413, "payload_too_large")

    async def test_reading_stops_at_the_limit_when_the_length_lies(
        self, client: httpx.AsyncClient, hook: dict[str, Any]
    ) -> None:
        sent = 0

        async def endless() -> AsyncIterator[bytes]:
            nonlocal sent
            yield b'{"text": "'
            while sent < 100 * LIMIT:
                sent += 65_536
                yield b"a" * 65_536

        r = await trigger(
            client, hook["token"], content=endless(), headers={"Content-Length": "100"}
        )
        assert_problem(r, 413, "payload_too_large")
        # Refused while reading: never much more than the limit was pulled from the client.
        assert sent <= LIMIT + 2 * 65_536

    async def test_declared_length_over_the_limit_is_refused_before_reading(
        self, client: httpx.AsyncClient, hook: dict[str, Any]
    ) -> None:
        sent = 0

        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            sent += 1
            yield b"{}"

        r = await trigger(
            client, hook["token"], content=body(), headers={"Content-Length": str(LIMIT + 1)}
        )
        assert_problem(r, 413, "payload_too_large")
        assert sent == 0


class TestRateLimit:
    async def test_eleventh_trigger_in_a_minute_is_429(
        self, client: httpx.AsyncClient, owner: User, workflow: str, hook: dict[str, Any]
    ) -> None:
        for i in range(10):
            r = await trigger(client, hook["token"])
            assert r.status_code == 202, r.text
            assert r.headers["ratelimit-remaining"] == str(9 - i)
        r = await trigger(client, hook["token"])
        assert_problem(r, 429, "rate_limited")
        assert r.headers["ratelimit-limit"] == "10"
        assert r.headers["ratelimit-remaining"] == "0"
        assert 1 <= int(r.headers["retry-after"]) <= 60
        assert 0 < int(r.headers["ratelimit-reset"]) <= 60
        assert len(await runs_of(client, owner, workflow)) == 10

    async def test_the_limit_is_per_webhook(
        self, client: httpx.AsyncClient, owner: User, workflow: str, hook: dict[str, Any]
    ) -> None:
        for _ in range(10):
            assert (await trigger(client, hook["token"])).status_code == 202
        fresh = await make_webhook(client, owner, workflow)
        assert (await trigger(client, fresh["token"])).status_code == 202

    async def test_refused_triggers_do_not_count(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI, hook: dict[str, Any]
    ) -> None:
        token = hook["token"]
        for _ in range(4):
            assert_problem(await trigger(client, token, content=b"[]"), 400, "invalid_request")
            assert_problem(
                await trigger(client, token, headers={"Content-Type": "text/plain"}),
                415,
                "unsupported_media_type",
            )
            r = await trigger(client, token, content=body_of_size(LIMIT + 1))
            assert_problem(r, 413, "payload_too_large")
        await set_credits(app, owner, 0)
        for _ in range(4):
            r = await trigger(client, token)
            assert_problem(r, 402, "insufficient_credits")
            assert r.headers["ratelimit-remaining"] == "10"
        await set_credits(app, owner, 1000)
        for _ in range(10):
            assert (await trigger(client, token)).status_code == 202
        assert_problem(await trigger(client, token), 429, "rate_limited")

    async def test_concurrent_triggers_never_pass_the_last_slot(
        self, client: httpx.AsyncClient, owner: User, workflow: str, hook: dict[str, Any]
    ) -> None:
        for _ in range(7):
            assert (await trigger(client, hook["token"])).status_code == 202
        results = await asyncio.gather(*(trigger(client, hook["token"]) for _ in range(12)))
        codes = sorted(r.status_code for r in results)
        assert codes == [202] * 3 + [429] * 9
        assert len(await runs_of(client, owner, workflow)) == 10


class TestRefusalsCostNothing:
    async def test_no_refused_trigger_creates_a_run_or_spends_credits(
        self, client: httpx.AsyncClient, owner: User, app: FastAPI, workflow: str
    ) -> None:
        before = await balance(client, owner)
        hook = await make_webhook(client, owner, workflow)
        signed = await make_webhook(client, owner, workflow, secret=SECRET)
        off = await make_webhook(client, owner, workflow, active=False)
        refusals = [
            (await trigger(client, "x" * 43), 404),
            (await trigger(client, off["token"]), 403),
            (await trigger(client, hook["token"], headers={"Content-Type": "text/plain"}), 415),
            (await trigger(client, hook["token"], content=b"{"), 400),
            (await trigger(client, hook["token"], content=b"[]"), 400),
            (await trigger(client, hook["token"], content=body_of_size(LIMIT + 1)), 413),
            (await trigger(client, signed["token"]), 403),
        ]
        await set_credits(app, owner, 0)
        refusals.append((await trigger(client, hook["token"]), 402))
        await set_credits(app, owner, before)
        await set_plan(app, owner, "free")
        refusals.append((await trigger(client, hook["token"]), 403))
        await set_plan(app, owner, "enterprise")
        assert [r.status_code for r, _ in refusals] == [code for _, code in refusals]
        assert await runs_of(client, owner, workflow) == []
        assert await balance(client, owner) == before
        # Then one accepted trigger runs and costs exactly its estimate.
        r = await trigger(client, hook["token"])
        assert r.status_code == 202
        await wait_for_run(client, owner, workflow, r.json()["run_id"])
        assert await balance(client, owner) == before - 1


class TestSignatures:
    @pytest.fixture
    async def signed(self, client: httpx.AsyncClient, owner: User, workflow: str) -> dict[str, Any]:
        return await make_webhook(client, owner, workflow, secret=SECRET)

    async def test_signed_request_is_accepted(
        self, client: httpx.AsyncClient, signed: dict[str, Any]
    ) -> None:
        raw = orjson.dumps(SEED_BODY)
        header = sign(SECRET, raw, int(time.time()))
        r = await trigger(
            client, signed["token"], content=raw, headers={"X-Nodeloom-Signature": header}
        )
        assert r.status_code == 202, r.text

    async def test_documented_scheme(
        self, client: httpx.AsyncClient, signed: dict[str, Any]
    ) -> None:
        """The scheme of docs/webhooks.md, computed by hand."""
        import hashlib
        import hmac

        raw = b'{"text": "hello", "category": "demo"}'
        t = int(time.time())
        digest = hmac.new(SECRET.encode(), f"{t}.".encode() + raw, hashlib.sha256).hexdigest()
        r = await trigger(
            client,
            signed["token"],
            content=raw,
            headers={"X-Nodeloom-Signature": f"t={t},v1={digest}"},
        )
        assert r.status_code == 202, r.text

    @pytest.mark.parametrize(
        "make_header",
        [
            lambda raw: None,
            lambda raw: "garbage",
            lambda raw: f"t={int(time.time())}",
            lambda raw: sign("another-secret-of-length", raw, int(time.time())),
            lambda raw: sign(SECRET, raw + b" ", int(time.time())),
            # Well past the tolerance either way: a second past it would pass by the time a
            # slow machine's request reaches the clock check (the boundary is tested below).
            lambda raw: sign(SECRET, raw, int(time.time()) - TOLERANCE_SECONDS - 60),
            lambda raw: sign(SECRET, raw, int(time.time()) + TOLERANCE_SECONDS + 60),
            lambda raw: sign(SECRET, raw, int(time.time())).replace("v1=", "v1=ü"),
        ],
    )
    async def test_missing_bad_or_stale_signature_is_403(
        self,
        client: httpx.AsyncClient,
        owner: User,
        workflow: str,
        signed: dict[str, Any],
        make_header: Any,
    ) -> None:
        raw = orjson.dumps(SEED_BODY)
        header = make_header(raw)
        headers: dict[bytes, bytes] = {b"Content-Type": b"application/json"}
        if header is not None:  # bytes: the non-ASCII case must reach the server as sent
            headers[b"X-Nodeloom-Signature"] = header.encode()
        r = await client.post(f"/api/v1/webhooks/{signed['token']}", content=raw, headers=headers)
        assert_problem(r, 403, "forbidden")
        assert await runs_of(client, owner, workflow) == []

    @pytest.mark.parametrize("skew", [-TOLERANCE_SECONDS, TOLERANCE_SECONDS])
    def test_the_clock_tolerance_is_inclusive(self, skew: int) -> None:
        header = sign(SECRET, b"{}", 1_000_000)
        assert parse_header(header, now=1_000_000 + skew)[0] == 1_000_000
        with pytest.raises(BadSignature):
            parse_header(header, now=1_000_000 + skew + (0.5 if skew > 0 else -0.5))

    async def test_secret_can_be_removed_and_set(
        self, client: httpx.AsyncClient, owner: User, workflow: str, signed: dict[str, Any]
    ) -> None:
        path = f"/api/v1/workflows/{workflow}/webhooks/{signed['id']}"
        r = await client.patch(path, json={"secret": None}, headers=owner.headers)
        assert r.status_code == 200 and r.json()["signed"] is False
        assert (await trigger(client, signed["token"])).status_code == 202
        r = await client.patch(path, json={"secret": "n" * 20}, headers=owner.headers)
        assert r.json()["signed"] is True
        assert_problem(await trigger(client, signed["token"]), 403, "forbidden")
        raw = orjson.dumps(SEED_BODY)
        header = sign("n" * 20, raw, int(time.time()))
        r = await trigger(
            client, signed["token"], content=raw, headers={"X-Nodeloom-Signature": header}
        )
        assert r.status_code == 202
        # A PATCH without "secret" keeps it.
        r = await client.patch(path, json={"name": "kept"}, headers=owner.headers)
        assert r.json()["signed"] is True
