"""Artifacts in S3-compatible storage, end to end over the API: nodes read their inputs from
it and write their outputs to it; downloads keep ETag, Range and signed URLs. On SQLite and on
PostgreSQL (queue workers), against a real S3-protocol server on 127.0.0.1."""

from __future__ import annotations

import io

import httpx
import pytest
from PIL import Image

from tests.conftest import User
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run
from tests.s3 import S3Server
from tests.s3 import s3_server as s3_server  # the fixture


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings_overrides(s3_server: S3Server) -> dict[str, object]:
    return {**s3_server.settings(s3_server.new_bucket()), "rate_limit_api_key": 10_000}


async def test_a_run_reads_and_writes_artifacts_in_object_storage(
    client: httpx.AsyncClient, owner: User
) -> None:
    graph = g(
        [
            n("in", "TextInput", text="Object storage"),
            n("img", "RenderText", width=320, height=180),
            n("small", "ImageResize", width=160, height=90),
        ],
        [e("in", "img"), e("img", "small")],
    )
    wf = await create_workflow(client, owner, graph)
    r = await execute(client, owner, wf)
    run = await wait_for_run(client, owner, wf, r.json()["run_id"])
    assert run["status"] == "completed", run
    small = next(x for x in run["node_runs"] if x["node_id"] == "small")["artifact_id"]

    r = await client.get(f"/api/v1/artifacts/{small}", headers=owner.headers)
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(r.content)).size == (160, 90)
    etag = r.headers["etag"]
    r = await client.get(
        f"/api/v1/artifacts/{small}", headers={**owner.headers, "If-None-Match": etag}
    )
    assert r.status_code == 304
    whole = (await client.get(f"/api/v1/artifacts/{small}", headers=owner.headers)).content
    r = await client.get(
        f"/api/v1/artifacts/{small}", headers={**owner.headers, "Range": "bytes=8-15"}
    )
    assert r.status_code == 206 and r.content == whole[8:16]
    assert r.headers["content-range"] == f"bytes 8-15/{len(whole)}"
    meta = (await client.get(f"/api/v1/artifacts/{small}/metadata", headers=owner.headers)).json()
    signed = meta["download_url"].replace("http://testserver", "")
    r = await client.get(signed)
    assert r.status_code == 200 and r.content == whole
