"""Every answer carries ``X-Content-Type-Options: nosniff``, and a download is a sandboxed
document that a browser can only show: the API, problem bodies, the answers api/hot.py builds
itself, artifact downloads (200, 206, 304, signed), the web app and the drain's 503."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.api.routes.artifacts import served_as
from tests.conftest import User
from tests.runs_helpers import create_workflow, execute, g, n, wait_for_run

TEXT = "<html><script>alert(1)</script></html>"  # markup: it must stay text


def _nosniff(r: httpx.Response) -> None:
    assert r.headers.get("x-content-type-options") == "nosniff", (r.status_code, r.headers)


def _download_headers(r: httpx.Response, artifact_id: str) -> None:
    _nosniff(r)
    policy = r.headers["content-security-policy"]
    assert policy.startswith("sandbox;"), policy
    assert "default-src 'none'" in policy
    assert "img-src 'self'" in policy and "media-src 'self'" in policy
    assert "script-src" not in policy and "allow-scripts" not in policy
    assert r.headers["content-disposition"] == f'inline; filename="{artifact_id}.txt"'


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"rate_limit_api_key": 100_000}


@pytest.fixture
async def text_artifact(client: httpx.AsyncClient, owner: User) -> tuple[str, str]:
    """(workflow id, artifact id) of a text output that looks like HTML."""
    wf = await create_workflow(client, owner, g([n("in", "TextInput", text=TEXT)], []))
    run = await wait_for_run(client, owner, wf, (await execute(client, owner, wf)).json()["run_id"])
    return wf, str(run["node_runs"][0]["artifact_id"])


class TestArtifactDownloads:
    async def test_full_download(
        self, client: httpx.AsyncClient, owner: User, text_artifact: tuple[str, str]
    ) -> None:
        _, artifact_id = text_artifact
        r = await client.get(f"/api/v1/artifacts/{artifact_id}", headers=owner.headers)
        assert r.status_code == 200 and r.text == TEXT
        assert r.headers["content-type"] == "text/plain; charset=utf-8"
        _download_headers(r, artifact_id)

    async def test_range_and_not_modified(
        self, client: httpx.AsyncClient, owner: User, text_artifact: tuple[str, str]
    ) -> None:
        _, artifact_id = text_artifact
        url = f"/api/v1/artifacts/{artifact_id}"
        r = await client.get(url, headers={**owner.headers, "Range": "bytes=0-5"})
        assert r.status_code == 206 and r.text == TEXT[:6]
        assert r.headers["content-type"] == "text/plain; charset=utf-8"
        _download_headers(r, artifact_id)
        etag = r.headers["etag"]
        r = await client.get(url, headers={**owner.headers, "If-None-Match": etag})
        assert r.status_code == 304
        _download_headers(r, artifact_id)

    async def test_signed_url(
        self, client: httpx.AsyncClient, owner: User, text_artifact: tuple[str, str]
    ) -> None:
        _, artifact_id = text_artifact
        meta = await client.get(f"/api/v1/artifacts/{artifact_id}/metadata", headers=owner.headers)
        _nosniff(meta)
        r = await client.get(meta.json()["download_url"])
        assert r.status_code == 200 and r.headers["content-type"] == "text/plain; charset=utf-8"
        _download_headers(r, artifact_id)
        bad = await client.get(f"/api/v1/artifacts/{artifact_id}?exp=1&sig=00")
        assert bad.status_code == 401
        _nosniff(bad)

    @pytest.mark.parametrize(
        ("stored", "served", "disposition"),
        [
            ("image/png", "image/png", 'inline; filename="a1.png"'),
            ("audio/mpeg", "audio/mpeg", 'inline; filename="a1.mp3"'),
            ("video/mp4", "video/mp4", 'inline; filename="a1.mp4"'),
            ("text/plain", "text/plain; charset=utf-8", 'inline; filename="a1.txt"'),
            ("text/html", "text/plain; charset=utf-8", 'inline; filename="a1.txt"'),
            ("image/svg+xml", "application/octet-stream", 'attachment; filename="a1"'),
            ("application/json", "application/octet-stream", 'attachment; filename="a1"'),
        ],
    )
    def test_what_each_stored_type_is_served_as(
        self, stored: str, served: str, disposition: str
    ) -> None:
        assert served_as("a1", stored) == (served, disposition)


class TestEveryAnswer:
    async def test_api_and_problem_bodies(self, client: httpx.AsyncClient, owner: User) -> None:
        for r in (
            await client.get("/api/v1/workflows", headers=owner.headers),
            await client.get("/api/v1/workflows"),  # 401
            await client.get("/api/v1/workflows/nope", headers=owner.headers),  # 404
            await client.delete("/api/v1/node-types"),  # 405
            await client.post("/api/v1/workflows", json={}, headers=owner.headers),  # 400
            await client.get("/api/v1/workflows?cursor=%00"),  # 400 before routing
            await client.get("/healthz"),
            await client.get("/api/v1/openapi.json"),
        ):
            _nosniff(r)

    async def test_hot_paths(
        self, client: httpx.AsyncClient, owner: User, text_artifact: tuple[str, str]
    ) -> None:
        """Execute, status poll and trigger are answered by api/hot.py, outside FastAPI."""
        wf, _ = text_artifact
        r = await execute(client, owner, wf)
        assert r.status_code == 202
        _nosniff(r)
        r = await client.get(f"/api/v1/workflows/{wf}/runs/{r.json()['run_id']}")
        assert r.status_code == 401
        _nosniff(r)
        r = await client.get(f"/api/v1/workflows/{wf}/runs/none", headers=owner.headers)
        assert r.status_code == 404
        _nosniff(r)
        r = await client.post(
            f"/api/v1/workflows/{wf}/webhooks", json={"name": "h"}, headers=owner.headers
        )
        _nosniff(r)
        r = await client.post(r.json()["url"], json={"text": "x"})
        assert r.status_code == 202, r.text
        _nosniff(r)
        r = await client.post("/api/v1/webhooks/" + "x" * 43, json={})
        assert r.status_code == 404
        _nosniff(r)

    async def test_web_app_and_docs(self, client: httpx.AsyncClient) -> None:
        for path in ("/", "/workflows/some-client-route", "/api/v1/docs", "/api/nothing"):
            _nosniff(await client.get(path))

    async def test_drain_answer(self, client: httpx.AsyncClient, app: FastAPI) -> None:
        app.state.ctx.draining = True
        try:
            r = await client.get("/api/v1/workflows")
        finally:
            app.state.ctx.draining = False
        assert r.status_code == 503
        _nosniff(r)
