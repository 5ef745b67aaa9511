"""Artifact downloads with ETag, Range and signed URLs; metadata. Each against both places
an artifact's bytes may be: its database row (a small text) and a file of the store."""

from __future__ import annotations

import hashlib
import time
from urllib.parse import urlsplit

import httpx
import pytest

from nodeloom.auth.tokens import sign_url
from tests.api.test_auth import assert_problem
from tests.conftest import TEST_SECRET, User
from tests.runs_helpers import create_workflow, execute, g, n, wait_for_run

SMALL = "0123456789abcdefghij"  # 20 bytes: kept in the artifact's row
LARGE = SMALL * 3500  # 70,000 bytes, over INLINE_TEXT_BYTES: a file of the store


@pytest.fixture(params=["row", "file"])
def content(request: pytest.FixtureRequest) -> str:
    return SMALL if request.param == "row" else LARGE


@pytest.fixture
async def artifact_id(client: httpx.AsyncClient, owner: User, content: str) -> str:
    wf = await create_workflow(client, owner, g([n("in", "TextInput", text=content)], []))
    run = await wait_for_run(client, owner, wf, (await execute(client, owner, wf)).json()["run_id"])
    return str(run["node_runs"][0]["artifact_id"])


class TestDownload:
    async def test_full_download_headers(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str, content: str
    ) -> None:
        r = await client.get(f"/api/v1/artifacts/{artifact_id}", headers=owner.headers)
        assert r.status_code == 200 and r.text == content
        assert r.headers["content-length"] == str(len(content))
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
        ("range_", "first", "last"),
        [
            ("bytes=0-3", 0, 3),
            ("bytes=10-", 10, -1),
            ("bytes=-5", -5, -1),
            ("bytes=18-100000", 18, -1),
            ("bytes=-100000", 0, -1),
            ("bytes=5-5", 5, 5),
        ],
    )
    async def test_range_gives_206(
        self,
        client: httpx.AsyncClient,
        owner: User,
        artifact_id: str,
        content: str,
        range_: str,
        first: int,
        last: int,
    ) -> None:
        size = len(content)
        first, last = first % size, last % size
        r = await client.get(
            f"/api/v1/artifacts/{artifact_id}", headers={**owner.headers, "Range": range_}
        )
        assert r.status_code == 206
        assert r.text == content[first : last + 1]
        assert r.headers["content-range"] == f"bytes {first}-{last}/{size}"
        assert r.headers["content-length"] == str(last - first + 1)

    @pytest.mark.parametrize("range_", ["bytes={size}-", "bytes=200000-200005", "bytes=5-2"])
    async def test_unsatisfiable_range_is_416(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str, content: str, range_: str
    ) -> None:
        r = await client.get(
            f"/api/v1/artifacts/{artifact_id}",
            headers={**owner.headers, "Range": range_.format(size=len(content))},
        )
        assert_problem(r, 416, "range_not_satisfiable")
        assert r.headers["content-range"] == f"bytes */{len(content)}"

    async def test_a_range_of_nothing_is_416(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str, content: str
    ) -> None:
        r = await client.get(
            f"/api/v1/artifacts/{artifact_id}", headers={**owner.headers, "Range": "bytes=-0"}
        )
        assert_problem(r, 416, "range_not_satisfiable")

    async def test_malformed_range_is_ignored(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str, content: str
    ) -> None:
        r = await client.get(
            f"/api/v1/artifacts/{artifact_id}", headers={**owner.headers, "Range": "pages=1-2"}
        )
        assert r.status_code == 200 and r.text == content

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
        self, client: httpx.AsyncClient, owner: User, artifact_id: str, content: str
    ) -> None:
        r = await client.get(f"/api/v1/artifacts/{artifact_id}/metadata", headers=owner.headers)
        assert r.status_code == 200
        meta = r.json()
        assert meta["id"] == artifact_id and meta["content_type"] == "text/plain"
        assert meta["size_bytes"] == len(content) and meta["node_id"] == "in"
        assert meta["sha256"] == hashlib.sha256(content.encode()).hexdigest()
        url = urlsplit(meta["download_url"])
        assert url.netloc == "testserver"
        r = await client.get(f"{url.path}?{url.query}")  # no Authorization header
        assert r.status_code == 200 and r.text == content

    async def test_wrong_or_expired_signature_is_401(
        self, client: httpx.AsyncClient, owner: User, artifact_id: str
    ) -> None:
        path = f"/api/v1/artifacts/{artifact_id}"
        good = sign_url(TEST_SECRET.encode(), path, 60)
        tampered = good[:-1] + ("0" if good[-1] != "0" else "1")
        assert_problem(await client.get(f"{path}?{tampered}"), 401, "unauthorized")
        expired = sign_url(TEST_SECRET.encode(), path, 60, now=time.time() - 3600)
        assert_problem(await client.get(f"{path}?{expired}"), 401, "unauthorized")
        other_path = sign_url(TEST_SECRET.encode(), "/api/v1/artifacts/other", 60)
        assert_problem(await client.get(f"{path}?{other_path}"), 401, "unauthorized")
        assert_problem(await client.get(f"{path}?sig=abc"), 401, "unauthorized")
