"""Run callbacks over HTTP on SQLite and PostgreSQL: the signing secret, execute's
``callback_url`` and its refusals, a signed POST verified here by an independent
implementation of the Standard Webhooks check, retries with back-off after 500s, giving
up, the delivery log, and callbacks of webhook and schedule runs. The receiver is a real
HTTP server on 127.0.0.1 (reachable because the tests allow-list that address)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.api.app import create_app
from nodeloom.settings import Settings
from tests.api.test_auth import assert_problem
from tests.api.test_webhooks import set_plan
from tests.conftest import User, make_user, text_graph
from tests.fakes import FakeServer, Recorded, serve
from tests.runs_helpers import create_workflow, execute, wait_for_run
from tests.server import free_port


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {
        "rate_limit_api_key": 100_000,
        "rate_limit_jwt": 100_000,
        "http_allowlist": ["127.0.0.1"],
        "callback_poll_seconds": 0.05,
        "callback_retry_delays": [0.4, 0.8],
        "schedule_tick_seconds": 0.2,
        "schedule_min_interval_seconds": 1,
    }


class Receiver:
    """Answers each POST with the next scripted status (then 200), recording it."""

    def __init__(self) -> None:
        self.script: list[int] = []
        self.requests: list[tuple[float, Recorded]] = []
        self.lock = threading.Lock()


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, FakeServer]]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            with state.lock:
                state.requests.append(
                    (
                        time.monotonic(),
                        Recorded("POST", self.path, dict(self.headers.items()), body),
                    )
                )
                status = state.script.pop(0) if state.script else 200
            answer = (b"x" * 5000) if status >= 500 else b'{"ok": true}'
            self.send_response(status)
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = serve(Handler)
    try:
        yield state, server
    finally:
        server.stop()


def verify_standard_webhook(secret: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """The receiver's side of the Standard Webhooks specification, written from the spec:
    the signed content is ``{id}.{timestamp}.{body}``, the key is the base64 part of the
    ``whsec_`` secret, the header lists space-separated ``v1,<base64>`` signatures, and a
    timestamp more than five minutes off is refused."""
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id, stamp = lower["webhook-id"], lower["webhook-timestamp"]
    assert abs(time.time() - int(stamp)) < 300
    assert secret.startswith("whsec_")
    key = base64.b64decode(secret[len("whsec_") :])
    content = msg_id.encode() + b"." + stamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    offered = [s.split(",", 1) for s in lower["webhook-signature"].split(" ")]
    assert any(v == "v1" and hmac.compare_digest(sig, expected) for v, sig in offered), offered
    payload: dict[str, Any] = json.loads(body)
    return payload


async def make_secret(client: httpx.AsyncClient, user: User) -> str:
    r = await client.post("/api/v1/callbacks/secret", headers=user.headers)
    assert r.status_code == 201, r.text
    return str(r.json()["secret"])


async def deliveries(
    client: httpx.AsyncClient, user: User, wf: str, run_id: str
) -> list[dict[str, Any]]:
    r = await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}/callbacks", headers=user.headers)
    assert r.status_code == 200, r.text
    body: list[dict[str, Any]] = r.json()
    return body


async def wait_delivery(
    client: httpx.AsyncClient, user: User, wf: str, run_id: str, timeout: float = 15.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = await deliveries(client, user, wf, run_id)
        if found and found[0]["state"] != "pending":
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"delivery still pending: {found}")
        await asyncio.sleep(0.1)


class TestSecret:
    async def test_shown_once_and_rotatable(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await client.get("/api/v1/callbacks/secret", headers=owner.headers)
        assert_problem(r, 404, "not_found")
        first = await make_secret(client, owner)
        assert first.startswith("whsec_") and len(base64.b64decode(first[6:])) == 32
        r = await client.get("/api/v1/callbacks/secret", headers=owner.headers)
        assert r.status_code == 200 and first not in r.text and "created_at" in r.json()
        second = await make_secret(client, owner)
        assert second != first

    async def test_stored_encrypted(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User
    ) -> None:
        secret = await make_secret(client, owner)
        import sqlalchemy as sa

        rows = await app.state.ctx.db.read(
            lambda c: c.execute(sa.text("SELECT callback_secret_encrypted FROM accounts")).all()
        )
        stored = [r[0] for r in rows if r[0]]
        assert stored and all(secret not in s and secret[6:] not in s for s in stored)


class TestRefusals:
    @pytest.mark.parametrize(
        "url",
        [
            "http://10.0.0.7/hook",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]:8080/",
            "http://localhost.:9/",
            "ftp://example.com/x",
            "not a url",
        ],
    )
    async def test_unusable_urls_are_400_with_a_pointer(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User, url: str
    ) -> None:
        app.state.ctx.settings.http_allowlist = []
        await make_secret(client, owner)
        wf = await create_workflow(client, owner, text_graph())
        r = await execute(client, owner, wf, {"callback_url": url})
        problem = assert_problem(r, 400, "invalid_request")
        assert problem["errors"] == [
            {"pointer": "/callback_url", "message": problem["errors"][0]["message"]}
        ]  # type: ignore[index]
        r = await client.get(f"/api/v1/workflows/{wf}/runs", headers=owner.headers)
        assert r.json() == []

    async def test_no_secret_yet_is_400(
        self, client: httpx.AsyncClient, owner: User, receiver: tuple[Receiver, FakeServer]
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        r = await execute(client, owner, wf, {"callback_url": receiver[1].url + "/cb"})
        problem = assert_problem(r, 400, "invalid_request")
        assert "POST /api/v1/callbacks/secret" in str(problem["detail"])

    async def test_another_accounts_run_log_is_404(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        wf = await create_workflow(client, owner, text_graph())
        run_id = (await execute(client, owner, wf, {})).json()["run_id"]
        assert await deliveries(client, owner, wf, run_id) == []  # started without one
        r = await client.get(
            f"/api/v1/workflows/{wf}/runs/{run_id}/callbacks", headers=other.headers
        )
        assert_problem(r, 404, "not_found")


class TestDelivery:
    async def test_signed_record_of_the_finished_run(
        self, client: httpx.AsyncClient, owner: User, receiver: tuple[Receiver, FakeServer]
    ) -> None:
        state, server = receiver
        secret = await make_secret(client, owner)
        wf = await create_workflow(client, owner, text_graph())
        r = await execute(
            client, owner, wf, {"input": {"text": "cb"}, "callback_url": server.url + "/cb?x=1"}
        )
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        run = await wait_for_run(client, owner, wf, run_id)
        delivery = await wait_delivery(client, owner, wf, run_id)
        assert delivery["state"] == "delivered" and delivery["attempt_count"] == 1
        assert delivery["next_attempt_at"] is None and delivery["finished_at"] is not None
        assert [a["status_code"] for a in delivery["attempts"]] == [200]
        assert delivery["attempts"][0]["response"] == '{"ok": true}'
        assert len(state.requests) == 1
        _, request = state.requests[0]
        assert request.path == "/cb?x=1"
        payload = verify_standard_webhook(secret, request.headers, request.body)
        assert request.headers["webhook-id"] == run_id == delivery["id"]
        assert payload["type"] == "run.completed"
        assert payload["data"] == run

    async def test_retries_with_back_off_after_500s(
        self, client: httpx.AsyncClient, owner: User, receiver: tuple[Receiver, FakeServer]
    ) -> None:
        state, server = receiver
        state.script = [500, 503]
        secret = await make_secret(client, owner)
        wf = await create_workflow(client, owner, text_graph())
        run_id = (await execute(client, owner, wf, {"callback_url": server.url})).json()["run_id"]
        delivery = await wait_delivery(client, owner, wf, run_id)
        assert delivery["state"] == "delivered"
        assert [a["status_code"] for a in delivery["attempts"]] == [500, 503, 200]
        assert [a["attempt"] for a in delivery["attempts"]] == [1, 2, 3]
        assert len(delivery["attempts"][0]["response"]) == 1000  # the answer, truncated
        times = [t for t, _ in state.requests]
        assert times[1] - times[0] >= 0.4 and times[2] - times[1] >= 0.8  # the delays
        ids = {r.headers["webhook-id"] for _, r in state.requests}
        assert ids == {run_id}  # the same message id on every attempt
        for _, request in state.requests:
            verify_standard_webhook(secret, request.headers, request.body)
        at = [datetime.fromisoformat(a["at"].replace("Z", "+00:00")) for a in delivery["attempts"]]
        assert at == sorted(at)

    async def test_gives_up_after_the_last_delay(
        self, client: httpx.AsyncClient, owner: User, receiver: tuple[Receiver, FakeServer]
    ) -> None:
        state, server = receiver
        state.script = [500, 500, 500]
        await make_secret(client, owner)
        wf = await create_workflow(client, owner, text_graph())
        body = {"callback_url": server.url + "/given-up"}
        run_id = (await execute(client, owner, wf, body)).json()["run_id"]
        delivery = await wait_delivery(client, owner, wf, run_id)
        assert delivery["state"] == "failed"
        assert [a["status_code"] for a in delivery["attempts"]] == [500, 500, 500]
        # A later run's callback delivered: the senders have looked for due deliveries
        # since, and sent nothing more to the one given up.
        body = {"callback_url": server.url + "/later"}
        later = (await execute(client, owner, wf, body)).json()["run_id"]
        assert (await wait_delivery(client, owner, wf, later))["state"] == "delivered"
        paths = [recorded.path for _, recorded in state.requests]
        assert paths == ["/given-up"] * 3 + ["/later"]

    async def test_unreachable_receiver_is_logged_as_an_error(
        self, client: httpx.AsyncClient, app: FastAPI, owner: User
    ) -> None:
        app.state.ctx.settings.callback_retry_delays = []
        await make_secret(client, owner)
        wf = await create_workflow(client, owner, text_graph())
        dead = receiver_port_closed()
        run_id = (await execute(client, owner, wf, {"callback_url": dead})).json()["run_id"]
        delivery = await wait_delivery(client, owner, wf, run_id)
        assert delivery["state"] == "failed"
        attempt = delivery["attempts"][0]
        assert attempt["status_code"] is None and attempt["error"]

    async def test_cancelled_run_reports_too(
        self, client: httpx.AsyncClient, owner: User, receiver: tuple[Receiver, FakeServer]
    ) -> None:
        state, server = receiver
        secret = await make_secret(client, owner)
        graph = text_graph()
        graph["nodes"].append(  # type: ignore[attr-defined]
            {
                "id": "slow",
                "type": "Delay",
                "position": {"x": 0, "y": 0},
                "data": {"seconds": 30},
            }
        )
        graph["edges"].append({"id": "e2", "source": "tpl", "target": "slow"})  # type: ignore[attr-defined]
        wf = await create_workflow(client, owner, graph)
        run_id = (await execute(client, owner, wf, {"callback_url": server.url})).json()["run_id"]
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202
        delivery = await wait_delivery(client, owner, wf, run_id)
        assert delivery["state"] == "delivered"
        payload = verify_standard_webhook(
            secret, state.requests[0][1].headers, state.requests[0][1].body
        )
        assert payload["type"] == "run.cancelled"
        assert payload["data"]["error"]["code"] == "cancelled"


def receiver_port_closed() -> str:
    return f"http://127.0.0.1:{free_port()}/gone"


class TestTriggers:
    async def test_webhook_runs_call_back(
        self,
        client: httpx.AsyncClient,
        app: FastAPI,
        owner: User,
        receiver: tuple[Receiver, FakeServer],
    ) -> None:
        state, server = receiver
        await set_plan(app, owner, "business")
        wf = await create_workflow(client, owner, text_graph())
        r = await client.post(
            f"/api/v1/workflows/{wf}/webhooks",
            json={"name": "h", "active": True, "callback_url": server.url},
            headers=owner.headers,
        )
        assert_problem(r, 400, "invalid_request")  # no secret yet
        secret = await make_secret(client, owner)
        r = await client.post(
            f"/api/v1/workflows/{wf}/webhooks",
            json={"name": "h", "active": True, "callback_url": server.url},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        assert r.json()["callback_url"] == server.url
        r = await client.post(f"/api/v1/webhooks/{r.json()['token']}", json={"text": "hook"})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
        delivery = await wait_delivery(client, owner, wf, run_id)
        assert delivery["state"] == "delivered"
        payload = verify_standard_webhook(
            secret, state.requests[0][1].headers, state.requests[0][1].body
        )
        assert payload["data"]["trigger"] == "webhook"

    async def test_schedule_runs_call_back(
        self,
        client: httpx.AsyncClient,
        app: FastAPI,
        owner: User,
        receiver: tuple[Receiver, FakeServer],
    ) -> None:
        state, server = receiver
        await set_plan(app, owner, "business")
        secret = await make_secret(client, owner)
        wf = await create_workflow(client, owner, text_graph())
        r = await client.post(
            f"/api/v1/workflows/{wf}/schedules",
            json={"name": "s", "cron": "* * * * * *", "callback_url": server.url},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 15
        while not state.requests:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        await client.delete(
            f"/api/v1/workflows/{wf}/schedules/{r.json()['id']}", headers=owner.headers
        )
        payload = verify_standard_webhook(
            secret, state.requests[0][1].headers, state.requests[0][1].body
        )
        assert payload["data"]["trigger"] == "schedule"


class TestDurability:
    async def test_a_pending_delivery_survives_a_restart(
        self, settings: Settings, receiver: tuple[Receiver, FakeServer]
    ) -> None:
        """The first attempt fails; the server stops before the retry; a new server on the
        same database makes the retry."""
        state, server = receiver
        state.script = [500]
        settings.callback_retry_delays = [1.0]
        first = create_app(settings)
        async with first.router.lifespan_context(first):
            transport = httpx.ASGITransport(app=first)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
                user = await make_user(c, "restart@example.com")
                secret = await make_secret(c, user)
                wf = await create_workflow(c, user, text_graph())
                run_id = (await execute(c, user, wf, {"callback_url": server.url})).json()["run_id"]
                deadline = time.monotonic() + 15
                while not (found := await deliveries(c, user, wf, run_id))[0]["attempts"]:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                assert found[0]["state"] == "pending" and found[0]["next_attempt_at"]
        assert len(state.requests) == 1
        second = create_app(settings)
        async with second.router.lifespan_context(second):
            transport = httpx.ASGITransport(app=second)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
                delivery = await wait_delivery(c, user, wf, run_id)
        assert delivery["state"] == "delivered"
        assert [a["status_code"] for a in delivery["attempts"]] == [500, 200]
        verify_standard_webhook(secret, state.requests[1][1].headers, state.requests[1][1].body)
