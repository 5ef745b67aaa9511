"""Replicate's webhooks, end to end: the app served by uvicorn on 127.0.0.1 (its base URL,
allow-listed), the fake Replicate POSTing signed deliveries to the URL each prediction names.
A run completes on the webhook long before the fallback poll; a delivery with a bad
signature or an old timestamp is refused (401) and the node keeps waiting; a lost webhook
still completes by polling; a cancelled run cancels the prediction and the final delivery
is acknowledged and ignored. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from nodeloom.nodes.adapters import hooks
from nodeloom.settings import Settings
from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.providers.fakes import FakeReplicate, Job, sign_delivery
from tests.providers.test_hosted import credential, image_graph, node_of
from tests.runs_helpers import create_workflow, execute, wait_for_run
from tests.server import free_port

FALLBACK_POLL = 60.0  # seconds: far longer than any of these runs may take


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def replicate_fake(replicate_fake: FakeReplicate) -> FakeReplicate:
    """The shared fake, sending webhooks."""
    replicate_fake.script.webhooks = True
    return replicate_fake


@pytest.fixture
def api_port() -> int:
    return free_port()


@pytest.fixture
def settings_overrides(replicate_fake: FakeReplicate, api_port: int) -> dict[str, object]:
    return {
        "base_url": f"http://127.0.0.1:{api_port}",
        "http_allowlist": ["127.0.0.1/32"],
        "replicate_api_url": replicate_fake.url + "/v1",
        "replicate_webhook_poll_seconds": FALLBACK_POLL,
        "rate_limit_api_key": 10_000,
    }


@pytest.fixture
async def served(app: FastAPI, api_port: int) -> AsyncIterator[None]:
    """The test's app, also listening on 127.0.0.1 for the fake's webhooks."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=api_port, lifespan="off", log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.02)
    assert server.started
    yield
    server.should_exit = True
    await asyncio.wait_for(task, 10)


def predictions_polled(fake: FakeReplicate) -> int:
    return sum(1 for r in fake.requests if r[0] == "GET" and "/v1/predictions/" in r[1])


async def start(client: httpx.AsyncClient, owner: User) -> tuple[str, str]:
    cred = await credential(client, owner, "replicate")
    wf = await create_workflow(client, owner, image_graph(cred))
    r = await execute(client, owner, wf, {"cache": False})
    assert r.status_code == 202, r.text
    return wf, str(r.json()["run_id"])


async def until(condition: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def waiting_prediction(
    client: httpx.AsyncClient, owner: User, fake: FakeReplicate
) -> tuple[str, str, Job, str]:
    """A run whose node waits on a long prediction that sends no webhook of its own (the
    test delivers by hand): its workflow, run, the fake's job and the webhook URL's path."""
    fake.script.seconds = 60
    fake.script.webhooks_lost = True
    wf, run_id = await start(client, owner)
    await until(lambda: bool(fake.jobs) and predictions_polled(fake) > 0)
    (job,) = fake.jobs.values()
    assert job.webhook is not None
    return wf, run_id, job, httpx.URL(job.webhook).path


def signed(secret: str, body: bytes, *, age: int = 0) -> dict[str, str]:
    webhook_id, stamp = "msg_test", int(time.time()) - age
    return {
        "Content-Type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign_delivery(secret, webhook_id, stamp, body),
    }


@pytest.mark.usefixtures("served")
class TestReplicateWebhooks:
    async def test_a_run_completes_on_the_webhook_not_the_poll(
        self,
        client: httpx.AsyncClient,
        owner: User,
        replicate_fake: FakeReplicate,
        settings: Settings,
    ) -> None:
        replicate_fake.script.seconds = 2.0
        started = time.monotonic()
        wf, run_id = await start(client, owner)
        # A live stream of the run, open while the webhooks wake the node (it ends with the
        # run): the wake signals travel on the same bus and must never reach it.
        live = asyncio.create_task(
            client.get(f"/api/v1/workflows/{wf}/runs/{run_id}/events", headers=owner.headers)
        )
        run = await wait_for_run(client, owner, wf, run_id, timeout=30)
        took = time.monotonic() - started
        assert run["status"] == "completed", run
        assert took < FALLBACK_POLL / 4, took
        body = await client.get(
            f"/api/v1/artifacts/{node_of(run, 'gen')['artifact_id']}", headers=owner.headers
        )
        assert body.content == replicate_fake.files["image"][1]
        # What was sent: this node run's URL on our public base, and every event.
        sent = next(r[3] for r in replicate_fake.requests if r[0] == "POST")
        (job,) = replicate_fake.jobs.values()
        base = f"{settings.base_url}/api/v1/provider-hooks/replicate/"
        assert sent["webhook"] == job.webhook and job.webhook.startswith(base)
        assert sent["webhook_events_filter"] == ["start", "output", "logs", "completed"]
        # One poll right after the job was stored, none after: the webhook ended the wait.
        assert predictions_polled(replicate_fake) == 1
        await until(lambda: any(d[0] == "completed" for d in replicate_fake.deliveries))
        assert ("completed", "succeeded", 200) in replicate_fake.deliveries
        # The logs' progress reached the run's events as node.progress; the stream shows
        # the run's events 1..N and nothing else.
        events = await asyncio.wait_for(live, 10)
        shown = [
            json.loads(line[6:]) for line in events.text.splitlines() if line.startswith("data: ")
        ]
        assert [e["seq"] for e in shown] == list(range(1, len(shown) + 1))
        assert "provider.delivered" not in events.text
        progress = [e for e in shown if e["type"] == "node.progress"]
        assert any(0 < p["data"]["progress"] < 1 for p in progress), progress

    async def test_a_bad_signature_is_refused_and_the_node_keeps_waiting(
        self,
        client: httpx.AsyncClient,
        owner: User,
        replicate_fake: FakeReplicate,
        app: FastAPI,
    ) -> None:
        app.state.ctx.settings.replicate_webhook_poll_seconds = 4.0
        replicate_fake.script.seconds = 0.3
        replicate_fake.script.webhook_signing = "whsec_" + "QUJD" * 8  # not the account's
        wf, run_id = await start(client, owner)
        await until(lambda: any(d[0] == "completed" for d in replicate_fake.deliveries))
        # (A "start" sent before the job was stored finds no node waiting: acknowledged.)
        assert ("completed", "succeeded", 401) in replicate_fake.deliveries
        r = await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}", headers=owner.headers)
        assert r.json()["status"] == "running"  # the refused delivery changed nothing
        run = await wait_for_run(client, owner, wf, run_id, timeout=30)
        assert run["status"] == "completed", run  # by the fallback poll
        assert predictions_polled(replicate_fake) == 2

    async def test_old_replayed_and_malformed_deliveries(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        wf, run_id, job, path = await waiting_prediction(client, owner, replicate_fake)
        secret = replicate_fake.signing_secret
        done = {**replicate_fake.prediction(job), "status": "succeeded"}
        done["output"] = [replicate_fake.output_url(job)]
        body = json.dumps(done).encode()

        r = await client.post(path, content=body, headers=signed(secret, body, age=600))
        problem = assert_problem(r, 401, "invalid_signature")
        assert "300 s" in problem["detail"]
        r = await client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert_problem(r, 401, "invalid_signature")
        wrong = signed("whsec_" + "QUJD" * 8, body)
        assert_problem(
            await client.post(path, content=body, headers=wrong), 401, "invalid_signature"
        )
        r = await client.post(
            path, content=body, headers={**signed(secret, body), "Content-Type": "text/plain"}
        )
        assert_problem(r, 415, "unsupported_media_type")
        assert_problem(
            await client.post(path[:-3] + "AAA", content=body, headers=signed(secret, body)),
            404,
            "not_found",
        )
        assert_problem(
            await client.post(path + "x", content=body, headers=signed(secret, body)),
            404,
            "not_found",
        )
        big = b" " * (16 * 1024 * 1024 + 1)
        assert_problem(
            await client.post(path, content=big, headers=signed(secret, big)),
            413,
            "payload_too_large",
        )
        no_status = json.dumps({**done, "status": "exploded"}).encode()
        for bad in (b"not json", b"[1, 2]", b'{"status": "succeeded"}', no_status):
            r = await client.post(path, content=bad, headers=signed(secret, bad))
            assert_problem(r, 400, "invalid_request")
        other = json.dumps({**done, "id": "someotherprediction"}).encode()
        r = await client.post(path, content=other, headers=signed(secret, other))
        assert r.status_code == 200 and r.json() == {"kept": False}
        r = await client.get(f"/api/v1/workflows/{wf}/runs/{run_id}", headers=owner.headers)
        assert r.json()["status"] == "running"  # nothing refused or foreign was kept

        # The genuine delivery: kept, and the node finishes on it (the fake still says
        # "processing" to polls, so only the webhook can have ended it).
        started = time.monotonic()
        headers = signed(secret, body)
        r = await client.post(path, content=body, headers=headers)
        assert r.status_code == 200 and r.json() == {"kept": True}, r.text
        run = await wait_for_run(client, owner, wf, run_id, timeout=20)
        assert run["status"] == "completed", run
        assert time.monotonic() - started < 10
        # Delivered again (Replicate retries): the node no longer waits; acknowledged.
        r = await client.post(path, content=body, headers=headers)
        assert r.status_code == 200 and r.json() == {"kept": False}
        # A caller without the signing secret learns nothing of the finished node: its
        # delivery is refused as before, not acknowledged.
        assert_problem(
            await client.post(path, content=body, headers=wrong), 401, "invalid_signature"
        )
        r = await client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert_problem(r, 401, "invalid_signature")

    async def test_an_aborted_prediction_is_kept_and_fails_the_node(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        # Replicate ends a prediction it never started (a deadline passed) as "aborted": a
        # final state, to acknowledge (else Replicate retries the delivery) and fail on.
        wf, run_id, job, path = await waiting_prediction(client, owner, replicate_fake)
        aborted = {**replicate_fake.prediction(job), "status": "aborted"}
        body = json.dumps(aborted).encode()
        r = await client.post(
            path, content=body, headers=signed(replicate_fake.signing_secret, body)
        )
        assert r.status_code == 200 and r.json() == {"kept": True}, r.text
        run = await wait_for_run(client, owner, wf, run_id, timeout=20)
        assert run["status"] == "failed", run
        node = node_of(run, "gen")
        assert node["status"] == "failed" and node["credits_used"] == 0
        assert node["error"]["code"] == "provider_error"
        assert f"aborted the prediction {job.id}" in node["error"]["message"]

    async def test_a_lost_webhook_still_completes_by_polling(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate, app: FastAPI
    ) -> None:
        app.state.ctx.settings.replicate_webhook_poll_seconds = 1.5
        replicate_fake.script.seconds = 0.5
        replicate_fake.script.webhooks_lost = True
        wf, run_id = await start(client, owner)
        run = await wait_for_run(client, owner, wf, run_id, timeout=30)
        assert run["status"] == "completed", run
        assert replicate_fake.deliveries == []
        assert predictions_polled(replicate_fake) >= 2

    async def test_cancelling_the_run_cancels_the_prediction(
        self, client: httpx.AsyncClient, owner: User, replicate_fake: FakeReplicate
    ) -> None:
        replicate_fake.script.seconds = 60
        wf, run_id = await start(client, owner)
        await until(lambda: predictions_polled(replicate_fake) > 0)
        r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
        assert r.status_code == 202, r.text
        run = await wait_for_run(client, owner, wf, run_id)
        assert run["status"] == "cancelled"
        await until(lambda: bool(replicate_fake.cancels))
        assert replicate_fake.cancels == list(replicate_fake.jobs)
        # Replicate's final delivery (canceled) finds no node waiting: acknowledged, ignored.
        await until(lambda: any(d[0] == "completed" for d in replicate_fake.deliveries))
        assert ("completed", "canceled", 200) in replicate_fake.deliveries
        assert node_of(run, "gen")["credits_used"] == 0


class TestWebhookUrls:
    """Which base URLs a provider is given, and the token that names a node run."""

    def test_only_a_reachable_base_url_is_handed_out(self, tmp_path: Path) -> None:
        def base(url: str | None, allow: list[str] | None = None) -> str | None:
            settings = Settings(
                data_dir=tmp_path, secret_key="s" * 40, base_url=url, http_allowlist=allow or []
            )
            return hooks.reachable_base(settings)

        assert base(None) is None
        assert base("https://nodeloom.example.com") == "https://nodeloom.example.com"
        assert base("http://localhost:8000") is None
        assert base("http://nodeloom:8000") is None  # a container's name
        assert base("http://nodeloom:8000", ["nodeloom"]) == "http://nodeloom:8000"
        assert base("http://127.0.0.1:8000") is None
        assert base("http://10.1.2.3") is None
        assert base("http://[::1]:8000") is None
        assert base("http://127.0.0.1:8000", ["127.0.0.1/32"]) == "http://127.0.0.1:8000"
        assert base("http://93.184.216.34") == "http://93.184.216.34"

    def test_tokens_name_one_node_run_and_cannot_be_made_up(self) -> None:
        secret = b"k" * 40
        token = hooks.token_for(secret, "replicate", "run-1", "gen")
        assert hooks.node_run_of(secret, "replicate", token) == ("run-1", "gen")
        assert hooks.node_run_of(b"other" * 8, "replicate", token) is None
        assert hooks.node_run_of(secret, "fal", token) is None
        forged = hooks.token_for(secret, "replicate", "run-2", "gen").split(".")[0]
        assert hooks.node_run_of(secret, "replicate", forged + "." + token.split(".")[1]) is None
        for junk in ("", ".", "abc", "!!!." + "a" * 43, "a" * 500):
            assert hooks.node_run_of(secret, "replicate", junk) is None
