"""Webhook triggers that bring media (issue 33): the JSON body names an ImageInput's file
by an asset id or an https URL. A URL is fetched through the same guard as an execute's (an
allow-listed test server on 127.0.0.1 stands for the public host; 127.0.0.2 stays refused)
and made an asset before the run exists; a refusal is problem+json, creates no run and
gives the trigger's rate-limit slot back. On both databases."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api import test_media_by_reference
from tests.api.test_assets import _noise_png, upload
from tests.api.test_auth import assert_problem
from tests.api.test_media_by_reference import PHOTO, _Files
from tests.api.test_media_inputs import artifacts_of, resize_graph
from tests.api.test_webhooks import make_webhook, runs_of, trigger
from tests.conftest import User
from tests.fakes import FakeServer
from tests.runs_helpers import create_workflow, wait_for_run

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgres"])


# The files: /photo.png (a PNG sent as text/plain), /moved (a redirect to 127.0.0.2, a
# refused address), anything else 404.
site = test_media_by_reference.site


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {
        "http_allowlist": ["127.0.0.1/32"],
        "rate_limit_api_key": 100_000,
        "rate_limit_jwt": 100_000,
    }


async def _hooked(client: httpx.AsyncClient, owner: User) -> tuple[str, str]:
    workflow_id = await create_workflow(client, owner, resize_graph(key="photo"))
    hook = await make_webhook(client, owner, workflow_id)
    return workflow_id, str(hook["token"])


async def _completed(
    client: httpx.AsyncClient, owner: User, workflow_id: str, r: httpx.Response
) -> dict[str, Any]:
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, owner, workflow_id, r.json()["run_id"], timeout=60)
    assert run["status"] == "completed", run
    return run


async def test_a_url_in_the_body_becomes_an_asset_of_the_owner(
    client: httpx.AsyncClient, owner: User, site: FakeServer
) -> None:
    workflow_id, token = await _hooked(client, owner)
    r = await trigger(client, token, {"photo": f"{site.url}/photo.png", "note": "hi"})
    run = await _completed(client, owner, workflow_id, r)
    asset_id = run["input"]["photo"]
    assert run["input"]["note"] == "hi"
    asset = (await client.get(f"/api/v1/assets/{asset_id}", headers=owner.headers)).json()
    assert asset["name"] == "photo.png" and asset["kind"] == "image"
    meta = await client.get(
        f"/api/v1/artifacts/{artifacts_of(run)['photo']}/metadata", headers=owner.headers
    )
    assert meta.json()["sha256"] == asset["sha256"]
    assert _Files.fetched == ["/photo.png"]


async def test_an_asset_id_in_the_body_feeds_the_run(
    client: httpx.AsyncClient, owner: User, other: User, site: FakeServer
) -> None:
    asset = (await upload(client, owner, PHOTO, "cat.png")).json()
    workflow_id, token = await _hooked(client, owner)
    run = await _completed(
        client, owner, workflow_id, await trigger(client, token, {"photo": asset["id"]})
    )
    assert run["input"]["photo"] == asset["id"]
    small = artifacts_of(run)["small"]
    meta = (await client.get(f"/api/v1/artifacts/{small}/metadata", headers=owner.headers)).json()
    assert (meta["width"], meta["height"]) == (8, 6)

    # Another account's asset reads like an unknown id: the run fails at the input node.
    theirs = (await upload(client, other, _noise_png(54), "dog.png")).json()
    r = await trigger(client, token, {"photo": theirs["id"]})
    assert r.status_code == 202, r.text
    failed = await wait_for_run(client, owner, workflow_id, r.json()["run_id"], timeout=60)
    assert failed["status"] == "failed"
    assert _Files.fetched == []


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [("/moved", 422, "media_fetch_failed"), ("/missing", 422, "media_fetch_failed")],
)
async def test_a_refused_url_creates_no_run_and_gives_the_slot_back(
    client: httpx.AsyncClient, owner: User, site: FakeServer, path: str, status: int, code: str
) -> None:
    workflow_id, token = await _hooked(client, owner)
    for _ in range(3):
        r = await trigger(client, token, {"photo": f"{site.url}{path}"})
        assert_problem(r, status, code)
    assert await runs_of(client, owner, workflow_id) == []
    r = await trigger(client, token, {"photo": "http://8.8.8.8/x.png"})
    assert_problem(r, 400, "invalid_request")
    assert r.json()["errors"][0]["pointer"] == "/input/photo"
    # Only accepted triggers count: this is the first of the minute.
    accepted = await trigger(client, token, {"photo": f"{site.url}/photo.png"})
    assert accepted.status_code == 202, accepted.text
    assert accepted.headers["ratelimit-remaining"] == str(
        int(accepted.headers["ratelimit-limit"]) - 1
    )
