"""A trigger checks a webhook it remembers (store/webhooks.py, ``TriggerTargets``) without
reading it again, so every change made through another replica must still stop the very
next trigger: two app instances (replicas) on one database, on SQLite and PostgreSQL.
Replica A triggers once (and so remembers the webhook), replica B changes something, then
A's next trigger is answered as the webhook now is, and creates no run unless it may."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from nodeloom.api.app import create_app
from nodeloom.auth.signatures import sign
from nodeloom.db.models import Run
from nodeloom.settings import Settings
from nodeloom.store import accounts
from tests.api.test_auth import assert_problem
from tests.api.test_webhooks import SECRET, make_webhook, runs_of, set_plan, trigger
from tests.conftest import User, text_graph
from tests.runs_helpers import create_workflow, wait_for_run

RUNS = cast(sa.Table, Run.__table__)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000, "rate_limit_jwt": 100_000}


@pytest.fixture
async def app_b(settings: Settings, app: FastAPI) -> AsyncIterator[FastAPI]:
    """Replica B: another app instance on the same database."""
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client_b(app_b: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app_b)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


@pytest.fixture
async def workflow(client: httpx.AsyncClient, owner: User) -> str:
    return await create_workflow(client, owner, text_graph("{{ text }} / {{ input.category }}"))


@pytest.fixture
async def hook(client: httpx.AsyncClient, owner: User, workflow: str) -> dict[str, Any]:
    hook = await make_webhook(client, owner, workflow)
    r = await trigger(client, hook["token"])  # replica A remembers the webhook
    assert r.status_code == 202, r.text
    return hook


async def runs_in_database(app: FastAPI, workflow: str) -> int:
    query = sa.select(sa.func.count()).select_from(RUNS).where(RUNS.c.workflow_id == workflow)
    return int(await app.state.ctx.db.read(lambda conn: conn.execute(query).scalar_one()))


Change = Callable[[httpx.AsyncClient, FastAPI, User, str, dict[str, Any]], Awaitable[None]]


async def _patch(c: httpx.AsyncClient, u: User, wf: str, h: dict[str, Any], **body: Any) -> None:
    r = await c.patch(f"/api/v1/workflows/{wf}/webhooks/{h['id']}", json=body, headers=u.headers)
    assert r.status_code == 200, r.text


async def _switch_off(c: httpx.AsyncClient, _b: FastAPI, u: User, wf: str, h: Any) -> None:
    await _patch(c, u, wf, h, active=False)


async def _delete(c: httpx.AsyncClient, _b: FastAPI, u: User, wf: str, h: Any) -> None:
    r = await c.delete(f"/api/v1/workflows/{wf}/webhooks/{h['id']}", headers=u.headers)
    assert r.status_code == 204


async def _delete_workflow(c: httpx.AsyncClient, _b: FastAPI, u: User, wf: str, _h: Any) -> None:
    assert (await c.delete(f"/api/v1/workflows/{wf}", headers=u.headers)).status_code == 204


async def _free_plan(_c: httpx.AsyncClient, b: FastAPI, u: User, _wf: str, _h: Any) -> None:
    await set_plan(b, u, "free")


async def _disable(_c: httpx.AsyncClient, b: FastAPI, u: User, _wf: str, _h: Any) -> None:
    await b.state.ctx.db.write(lambda conn: accounts.set_disabled(conn, u.id, True))


async def _sign(c: httpx.AsyncClient, _b: FastAPI, u: User, wf: str, h: Any) -> None:
    await _patch(c, u, wf, h, secret=SECRET)


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        (_switch_off, 403, "webhook_inactive"),
        (_delete, 404, "not_found"),
        (_delete_workflow, 404, "not_found"),
        (_free_plan, 403, "plan_upgrade_required"),
        (_disable, 404, "not_found"),
        (_sign, 403, "forbidden"),  # unsigned now: the signature header is missing
    ],
    ids=["switched-off", "deleted", "workflow-deleted", "plan-free", "account-disabled", "signed"],
)
async def test_a_change_through_another_replica_stops_the_next_trigger(
    client: httpx.AsyncClient,
    client_b: httpx.AsyncClient,
    app_b: FastAPI,
    owner: User,
    workflow: str,
    hook: dict[str, Any],
    change: Change,
    status: int,
    code: str,
) -> None:
    await change(client_b, app_b, owner, workflow, hook)
    assert_problem(await trigger(client, hook["token"]), status, code)
    assert_problem(await trigger(client, hook["token"]), status, code)
    assert await runs_in_database(app_b, workflow) == 1  # the first trigger's only


async def test_a_refusal_is_that_of_the_webhook_as_it_now_is(
    client: httpx.AsyncClient, client_b: httpx.AsyncClient, owner: User, workflow: str, hook: Any
) -> None:
    """Deleted since replica A read it: 404 comes before everything, even a wrong media
    type that the remembered (active) webhook would have been refused for."""
    await _delete(client_b, FastAPI(), owner, workflow, hook)
    r = await client.post(
        f"/api/v1/webhooks/{hook['token']}", content=b"x", headers={"Content-Type": "text/plain"}
    )
    assert_problem(r, 404, "not_found")


async def test_switched_on_again_or_unsigned_again_it_triggers(
    client: httpx.AsyncClient,
    client_b: httpx.AsyncClient,
    app_b: FastAPI,
    owner: User,
    workflow: str,
    hook: dict[str, Any],
) -> None:
    await _switch_off(client_b, app_b, owner, workflow, hook)
    assert_problem(await trigger(client, hook["token"]), 403, "webhook_inactive")
    await _patch(client_b, owner, workflow, hook, active=True, secret=SECRET)
    body = b'{"text": "signed"}'
    assert_problem(await trigger(client, hook["token"], content=body), 403, "forbidden")
    signed = {"X-Nodeloom-Signature": sign(SECRET, body, int(time.time()))}
    assert (await trigger(client, hook["token"], content=body, headers=signed)).status_code == 202
    await _patch(client_b, owner, workflow, hook, secret=None)
    # Remembered as signed; the secret is gone: an unsigned trigger is accepted at once.
    assert (await trigger(client, hook["token"], content=body)).status_code == 202
    assert len(await runs_of(client, owner, workflow)) == 3


async def test_an_edited_workflow_runs_its_new_graph(
    client: httpx.AsyncClient,
    client_b: httpx.AsyncClient,
    owner: User,
    workflow: str,
    hook: dict[str, Any],
) -> None:
    r = await client_b.patch(
        f"/api/v1/workflows/{workflow}",
        json={"graph_json": text_graph("new: {{ text }}")},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    r = await trigger(client, hook["token"])
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, owner, workflow, r.json()["run_id"])
    art = run["node_runs"][1]["artifact_id"]
    text = (await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)).text
    assert text == "new: A sunset over the sea"
