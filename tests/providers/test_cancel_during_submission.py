"""A run cancelled while its Replicate prediction or fal request is being created: the fake
provider makes the job but holds its answer until the run has been cancelled, then answers.
The node learns the job's id from that answer, stores it, cancels the job at the provider,
and the run ends cancelled at once rather than after the job's 30 s. Over HTTP, on SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import User
from tests.providers.fakes import FakeFal, FakeReplicate
from tests.providers.test_hosted import credential, image_graph, node_of
from tests.runs_helpers import create_workflow, execute, wait_for_run


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def fakes_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fakes")


@pytest.fixture(params=["replicate", "fal"])
def hosted(request: pytest.FixtureRequest, fakes_dir: Path) -> Iterator[FakeReplicate | FakeFal]:
    fake = FakeReplicate(fakes_dir) if request.param == "replicate" else FakeFal(fakes_dir)
    yield fake
    if fake.script.hold is not None:
        fake.script.hold.set()  # never leave a handler thread waiting
    fake.stop()


@pytest.fixture
def settings_overrides(hosted: FakeReplicate | FakeFal) -> dict[str, object]:
    url_setting = "replicate_api_url" if isinstance(hosted, FakeReplicate) else "fal_queue_url"
    url = hosted.url + "/v1" if isinstance(hosted, FakeReplicate) else hosted.url
    return {"http_allowlist": ["127.0.0.1/32"], url_setting: url}


async def test_a_cancel_during_the_create_call_cancels_the_job(
    client: httpx.AsyncClient, owner: User, hosted: FakeReplicate | FakeFal
) -> None:
    hosted.script.seconds = 30
    hosted.script.hold = threading.Event()
    if isinstance(hosted, FakeReplicate):
        graph = image_graph(await credential(client, owner, "replicate"))
    else:
        graph = image_graph(
            await credential(client, owner, "fal"), type="FalModel", model="fal-ai/flux/dev"
        )
    wf = await create_workflow(client, owner, graph)
    run_id = (await execute(client, owner, wf, {"cache": False})).json()["run_id"]
    for _ in range(400):  # the job exists at the provider; its answer is held
        if hosted.submissions:
            break
        await asyncio.sleep(0.025)
    assert hosted.submissions == 1
    started = time.monotonic()
    r = await client.post(f"/api/v1/workflows/{wf}/runs/{run_id}/cancel", headers=owner.headers)
    assert r.status_code == 202, r.text
    await asyncio.sleep(0.2)  # the engine stops the node mid-call (else just after: alike)
    assert hosted.cancels == []  # no id to cancel yet
    hosted.script.hold.set()
    run = await wait_for_run(client, owner, wf, run_id)
    assert run["status"] == "cancelled", run
    assert node_of(run, "gen")["status"] == "cancelled"
    assert node_of(run, "gen")["credits_used"] == 0
    assert time.monotonic() - started < 5  # not the job's 30 s
    (job_id,) = hosted.jobs
    assert hosted.cancels == [job_id]
    assert hosted.jobs[job_id].cancelled
