"""Artifact downloads with ETag, Range and signed URLs; metadata."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
import pytest

from nodeloom.auth.tokens import sign_url
from tests.api.test_auth import assert_problem
from tests.conftest import TEST_SECRET, User
from tests.runs_helpers import create_workflow, execute, g, n, wait_for_run

CONTENT = "0123456789abcdefghij"  # 20 bytes


@pytest.fixture
async def artifact_id(client: httpx.AsyncClient, owner: User) -> str:
    wf = await create_workflow(client, owner, g([n("in", "TextInput", text=CONTENT)], []))
    run = await wait_for_run(client, owner, wf, (await execute(client, owner, wf)).json()["run_id"])
    return str(run["node_runs"][0]["artifact_id"])


class TestDownload:
    async def test_full_download_headers(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str
    ) -> None:
        r = await client.get(f"/api/v1/artifacts/{artifact_id}", headers=owner.headers)
        assert r.status_code == 200 and r.text == CONTENT
        assert r.headers["content-length"] == "20"
        assert r.headers["accept-ranges"] == "bytes"
        assert r.headers["etag"].startswith('"') and len(r.headers["etag"]) == 66
        assert r.headers["content-type"] == "text/plain; charset=utf-8"

    async def test_if_none_match_gives_304(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str
    ) -> None:
        etag = (
            await client.get(f"/api/v1/artifacts/{artifact_id}", headers=owner.headers)
        ).headers["etag"]
        r = await client.get(
            f"/api/v1/artifacts/{artifact_id}", headers={**owner.headers, "If-None-Match": etag}
        )
        assert r.status_code == 304 and r.content == b"" and r.headers["etag"] == etag
        r = await client.get(
            f"/api/v1/artifacts/{artifact_id}",
            headers={**owner.headers, "If-None-Match": '"other"'},
        )
        assert r.status_code == 200

    @pytest.mark.parametrize(
        ("range_", "body", "content_range"),
        [
            ("bytes=0-3", "0123", "bytes 0-3/20"),
            ("bytes=10-", "abcdefghij", "bytes 10-19/20"),
            ("bytes=-5", "fghij", "bytes 15-19/20"),
            ("bytes=18-100", "ij", "bytes 18-19/20"),
            ("bytes=-100", CONTENT, "bytes 0-19/20"),
        ],
    )
    async def test_range_gives_206(
        self,
        client: httpx.AsyncClient,
        owner: User,
        artifact_id: str,
        range_: str,
        body: str,
        content_range: str,
    ) -> None:
        r = await client.get(
            f"/api/v1/artifacts/{artifact_id}", headers={**owner.headers, "Range": range_}
        )
        assert r.status_code == 206
        assert r.text == body
        assert r.headers["content-range"] == content_range
        assert r.headers["content-length"] == str(len(body))

    @pytest.mark.parametrize("range_", ["bytes=20-", "bytes=25-30", "bytes=5-2", "bytes=-0"])
    async def test_unsatisfiable_range_is_416(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str, range_: str
    ) -> None:
        r = await client.get(
            f"/api/v1/artifacts/{artifact_id}", headers={**owner.headers, "Range": range_}
        )
        assert_problem(r, 416, "range_not_satisfiable")
        assert r.headers["content-range"] == "bytes */20"

    async def test_malformed_range_is_ignored(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str
    ) -> None:
        r = await client.get(
            f"/api/v1/artifacts/{artifact_id}", headers={**owner.headers, "Range": "pages=1-2"}
        )
        assert r.status_code == 200 and r.text == CONTENT

    async def test_needs_credentials_and_ownership(
        self, client: httpx.AsyncClient, owner: User, other: User, artifact_id: str
    ) -> None:
        assert_problem(await client.get(f"/api/v1/artifacts/{artifact_id}"), 401, "unauthorized")
        assert_problem(
            await client.get(f"/api/v1/artifacts/{artifact_id}", headers=other.headers),
            404,
            "not_found",
        )
        assert_problem(
            await client.get(f"/api/v1/artifacts/{artifact_id}/metadata", headers=other.headers),
            404,
            "not_found",
        )
        assert_problem(
            await client.get("/api/v1/artifacts/nope", headers=owner.headers), 404, "not_found"
        )


class TestMetadataAndSignedUrls:
    async def test_metadata_and_signed_download(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str
    ) -> None:
        r = await client.get(f"/api/v1/artifacts/{artifact_id}/metadata", headers=owner.headers)
        assert r.status_code == 200
        meta = r.json()
        assert meta["id"] == artifact_id and meta["content_type"] == "text/plain"
        assert meta["size_bytes"] == 20 and len(meta["sha256"]) == 64 and meta["node_id"] == "in"
        url = urlsplit(meta["download_url"])
        assert url.netloc == "testserver"
        r = await client.get(f"{url.path}?{url.query}")  # no Authorization header
        assert r.status_code == 200 and r.text == CONTENT

    async def test_wrong_or_expired_signature_is_403(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str
    ) -> None:
        path = f"/api/v1/artifacts/{artifact_id}"
        good = sign_url(TEST_SECRET.encode(), path, 60)
        tampered = good[:-1] + ("0" if good[-1] != "0" else "1")
        assert_problem(await client.get(f"{path}?{tampered}"), 403, "forbidden")
        expired = sign_url(TEST_SECRET.encode(), path, 60, now=time.time() - 3600)
        assert_problem(await client.get(f"{path}?{expired}"), 403, "forbidden")
        other_path = sign_url(TEST_SECRET.encode(), "/api/v1/artifacts/other", 60)
        assert_problem(await client.get(f"{path}?{other_path}"), 403, "forbidden")
        assert_problem(await client.get(f"{path}?sig=abc"), 403, "forbidden")
