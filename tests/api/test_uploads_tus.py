"""Resumable uploads (tus 1.0) over HTTP on a real app and database: the whole flow ends
in an asset, offsets are checked, another account's upload is unknown, limits and quota
(a race cannot pass it) are checked at creation, termination and expiry give the quota
back, two app instances sharing the database and data directory each take a part, and
the S3 path works against a real S3-protocol server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.api.app import create_app
from nodeloom.settings import Settings
from tests.api.test_assets import _noise_png
from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.s3 import S3Server
from tests.s3 import s3_server as s3_server  # the fixture

TUS = "/api/v1/uploads/tus"
V = {"Tus-Resumable": "1.0.0"}


def big_png(side: int, seed: int = 1) -> bytes:
    """A noise PNG (incompressible: about 3 bytes a pixel)."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, size=(side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def metadata(filename: str) -> str:
    return f"filename {base64.b64encode(filename.encode()).decode()},private"


async def create(
    client: httpx.AsyncClient, user: User, length: int, filename: str = "photo.png"
) -> httpx.Response:
    return await client.post(
        TUS,
        headers={
            **user.headers,
            **V,
            "Upload-Length": str(length),
            "Upload-Metadata": metadata(filename),
        },
    )


def path_of(r: httpx.Response) -> str:
    assert r.status_code == 201, r.text
    location = r.headers["location"]
    assert location.startswith("http://testserver/api/v1/uploads/tus/")
    return location.removeprefix("http://testserver")


async def patch(
    client: httpx.AsyncClient, user: User, path: str, offset: int, data: bytes
) -> httpx.Response:
    return await client.patch(
        path,
        content=data,
        headers={
            **user.headers,
            **V,
            "Upload-Offset": str(offset),
            "Content-Type": "application/offset+octet-stream",
        },
        timeout=120,
    )


async def head(client: httpx.AsyncClient, user: User, path: str) -> httpx.Response:
    return await client.head(path, headers={**user.headers, **V})


async def storage(client: httpx.AsyncClient, user: User) -> int:
    r = await client.get("/api/v1/storage", headers=user.headers)
    return int(r.json()["used_bytes"])


class TestFlow:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_options_create_patch_in_parts_and_the_asset(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.options(TUS, headers=owner.headers)
        assert r.status_code == 204
        assert r.headers["tus-resumable"] == "1.0.0"
        assert r.headers["tus-version"] == "1.0.0"
        assert set(r.headers["tus-extension"].split(",")) >= {"creation", "termination"}
        assert int(r.headers["tus-max-size"]) > 0

        data = big_png(300)
        r = await create(client, owner, len(data))
        path = path_of(r)
        assert r.headers["tus-resumable"] == "1.0.0" and r.headers["upload-offset"] == "0"
        assert "upload-expires" in r.headers
        # The declared length is held against the quota while it is received.
        assert await storage(client, owner) == len(data)

        r = await head(client, owner, path)
        assert r.status_code == 200
        assert r.headers["upload-offset"] == "0"
        assert r.headers["upload-length"] == str(len(data))
        assert r.headers["upload-metadata"] == metadata("photo.png")
        assert r.headers["cache-control"] == "no-store"

        third = len(data) // 3
        r = await patch(client, owner, path, 0, data[:third])
        assert r.status_code == 204, r.text
        assert r.headers["upload-offset"] == str(third)
        assert "nodeloom-asset-id" not in r.headers
        r = await patch(client, owner, path, third, data[third : 2 * third])
        assert r.status_code == 204 and r.headers["upload-offset"] == str(2 * third)
        r = await patch(client, owner, path, 2 * third, data[2 * third :])
        assert r.status_code == 204, r.text
        asset_id = r.headers["nodeloom-asset-id"]

        r = await head(client, owner, path)
        assert r.headers["upload-offset"] == str(len(data))
        assert r.headers["nodeloom-asset-id"] == asset_id
        upload = (await client.get(path, headers=owner.headers)).json()
        assert upload["asset_id"] == asset_id and upload["offset"] == len(data)
        asset = upload["asset"]
        assert asset["name"] == "photo.png" and asset["kind"] == "image"
        assert (asset["width"], asset["height"]) == (300, 300)
        r = await client.get(f"/api/v1/assets/{asset_id}", headers=owner.headers)
        assert r.status_code == 200
        # The hold is gone; the asset counts its own bytes.
        assert await storage(client, owner) == asset["size_bytes"]
        # A finished upload takes no more bytes.
        r = await patch(client, owner, path, len(data), b"x")
        assert_problem(r, 409, "conflict")

    async def test_offset_mismatch_is_409_and_nothing_is_stored(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        data = _noise_png(5)
        path = path_of(await create(client, owner, len(data)))
        r = await patch(client, owner, path, 10, data[10:])
        assert_problem(r, 409, "conflict")
        assert r.headers["tus-resumable"] == "1.0.0"
        assert r.headers["upload-offset"] == "0"
        r = await patch(client, owner, path, 0, data[:100])
        assert r.status_code == 204
        r = await patch(client, owner, path, 50, data[50:])
        assert_problem(r, 409, "conflict")
        assert (await head(client, owner, path)).headers["upload-offset"] == "100"

    async def test_another_accounts_upload_is_unknown(
        self, client: httpx.AsyncClient, owner: User, other: User
    ) -> None:
        data = _noise_png(6)
        path = path_of(await create(client, owner, len(data)))
        assert (await head(client, other, path)).status_code == 404
        assert_problem(await patch(client, other, path, 0, data), 404, "not_found")
        r = await client.delete(path, headers={**other.headers, **V})
        assert_problem(r, 404, "not_found")
        assert_problem(await client.get(path, headers=other.headers), 404, "not_found")
        assert (await head(client, owner, path)).headers["upload-offset"] == "0"
        r = await head(client, owner, f"{TUS}/00000000-0000-0000-0000-000000000000")
        assert r.status_code == 404

    async def test_termination_frees_the_hold(
        self, client: httpx.AsyncClient, owner: User, settings: Settings
    ) -> None:
        data = _noise_png(7)
        path = path_of(await create(client, owner, len(data)))
        assert (await patch(client, owner, path, 0, data[:200])).status_code == 204
        assert await storage(client, owner) == len(data)
        r = await client.delete(path, headers={**owner.headers, **V})
        assert r.status_code == 204 and r.headers["tus-resumable"] == "1.0.0"
        assert (await head(client, owner, path)).status_code == 404
        assert await storage(client, owner) == 0
        assert list((settings.data_dir / "uploads").iterdir()) == []

    async def test_malformed_requests_are_problems(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.post(TUS, headers={**owner.headers, "Upload-Length": "10"})
        assert_problem(r, 412, "precondition_failed")
        assert r.headers["tus-version"] == "1.0.0"
        for length in ("", "-1", "abc", "0", "1" * 30):
            r = await client.post(TUS, headers={**owner.headers, **V, "Upload-Length": length})
            assert_problem(r, 400, "invalid_request")
        r = await client.post(TUS, headers={**owner.headers, **V})
        assert_problem(r, 400, "invalid_request")
        for bad in ("filename !!!", "a b c", "filename x,filename y", " "):
            r = await client.post(
                TUS, headers={**owner.headers, **V, "Upload-Length": "5", "Upload-Metadata": bad}
            )
            assert_problem(r, 400, "invalid_request")
        path = path_of(await create(client, owner, 5))
        r = await client.patch(
            path,
            content=b"abc",
            headers={**owner.headers, **V, "Upload-Offset": "0", "Content-Type": "text/plain"},
        )
        assert_problem(r, 415, "unsupported_media_type")
        r = await client.patch(
            path,
            content=b"abc",
            headers={
                **owner.headers,
                **V,
                "Content-Type": "application/offset+octet-stream",
            },
        )
        assert_problem(r, 400, "invalid_request")
        # Past Upload-Length: refused before anything is stored.
        r = await patch(client, owner, path, 0, b"abc")
        assert r.status_code == 204
        r = await patch(client, owner, path, 3, b"0123456")
        assert_problem(r, 413, "payload_too_large")
        assert (await head(client, owner, path)).headers["upload-offset"] == "3"
        # Not a media file: the ingest's problem, and the upload says so.
        r = await patch(client, owner, path, 3, b"de")
        assert_problem(r, 415, "unsupported_media")
        r = await head(client, owner, path)
        assert r.headers["upload-offset"] == "5"
        assert r.headers["nodeloom-upload-problem"] == "unsupported_media"
        assert await storage(client, owner) == 0
        r = await client.head(path, headers=owner.headers)
        assert r.status_code == 412
        r = await client.options(TUS)
        assert r.status_code == 401

    async def test_a_complete_file_that_is_not_media_is_refused(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        data = b"just some text, not an image" * 10
        path = path_of(await create(client, owner, len(data), "notes.txt"))
        r = await patch(client, owner, path, 0, data)
        assert_problem(r, 415, "unsupported_media")
        upload = (await client.get(path, headers=owner.headers)).json()
        assert upload["problem"]["code"] == "unsupported_media" and upload["asset"] is None
        assert await storage(client, owner) == 0


class TestLimits:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"upload_limits": {"enterprise": {"storage_bytes": 10_000, "file_bytes": 6000}}}

    async def test_file_size_is_413_at_creation(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await create(client, owner, 6001)
        assert_problem(r, 413, "payload_too_large")
        assert r.headers["tus-resumable"] == "1.0.0"
        r = await client.options(TUS, headers=owner.headers)
        assert r.headers["tus-max-size"] == "6000"
        assert await storage(client, owner) == 0

    async def test_concurrent_creations_cannot_pass_the_quota(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        answers = await asyncio.gather(*(create(client, owner, 3000) for _ in range(8)))
        created = [r for r in answers if r.status_code == 201]
        for r in answers:
            if r.status_code != 201:
                assert_problem(r, 402, "storage_quota_exceeded")
        assert len(created) == 3
        assert await storage(client, owner) == 9000
        # A plain upload cannot take what the uploads hold either.
        r = await client.post(
            "/api/v1/uploads", content=_noise_png(8), headers=owner.headers, timeout=60
        )
        assert_problem(r, 402, "storage_quota_exceeded")
        # Ending one gives its hold back.
        r = await client.delete(path_of(created[0]), headers={**owner.headers, **V})
        assert r.status_code == 204
        assert await storage(client, owner) == 6000


class TestExpiry:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"tus_expiry_seconds": 1}

    async def test_an_abandoned_upload_expires_and_gives_its_hold_back(
        self, client: httpx.AsyncClient, owner: User, settings: Settings
    ) -> None:
        data = _noise_png(9)
        path = path_of(await create(client, owner, len(data)))
        assert (await patch(client, owner, path, 0, data[:300])).status_code == 204
        parts = settings.data_dir / "uploads"
        assert len(list(parts.iterdir())) == 1
        deadline = time.monotonic() + 30
        while (await head(client, owner, path)).status_code != 404:
            assert time.monotonic() < deadline, "the upload never expired"
            await asyncio.sleep(0.1)
        assert_problem(await patch(client, owner, path, 300, data[300:]), 404, "not_found")
        # The next creation sweeps it: its bytes and its hold are gone.
        fresh = path_of(await create(client, owner, 10))
        assert [p.name for p in parts.iterdir()] == [fresh.rsplit("/", 1)[-1]]
        assert await storage(client, owner) == 10


@pytest.fixture
async def second_app(settings: Settings, app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """Another instance of the server on the same database and data directory."""
    other = create_app(settings.model_copy())
    async with other.router.lifespan_context(other):
        transport = httpx.ASGITransport(app=other)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            yield c


class TestReplicas:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_each_instance_takes_a_part(
        self, client: httpx.AsyncClient, second_app: httpx.AsyncClient, owner: User
    ) -> None:
        data = big_png(200, seed=3)
        path = path_of(await create(client, owner, len(data)))
        half = len(data) // 2
        assert (await patch(client, owner, path, 0, data[:half])).status_code == 204
        r = await head(second_app, owner, path)
        assert r.headers["upload-offset"] == str(half)
        r = await patch(second_app, owner, path, half, data[half:])
        assert r.status_code == 204, r.text
        asset_id = r.headers["nodeloom-asset-id"]
        r = await head(client, owner, path)
        assert r.headers["nodeloom-asset-id"] == asset_id
        asset = (await client.get(f"/api/v1/assets/{asset_id}", headers=owner.headers)).json()
        assert (asset["width"], asset["height"]) == (200, 200)


class TestS3:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def settings_overrides(self, s3_server: S3Server) -> dict[str, object]:
        return {**s3_server.settings(s3_server.new_bucket()), "rate_limit_api_key": 10_000}

    async def test_parts_tails_and_two_instances_on_object_storage(
        self,
        client: httpx.AsyncClient,
        second_app: httpx.AsyncClient,
        owner: User,
        settings: Settings,
    ) -> None:
        data = big_png(1500, seed=4)  # about 6.5 MB: two S3 parts
        assert len(data) > 6 * 1024 * 1024
        path = path_of(await create(client, owner, len(data), "large.png"))
        mib = 1024 * 1024
        # 3 MiB: less than a part, kept as the tail; the offset says all 3 MiB.
        r = await patch(client, owner, path, 0, data[: 3 * mib])
        assert r.status_code == 204, r.text
        assert r.headers["upload-offset"] == str(3 * mib)
        # On the other instance: the tail and 3 MiB more make the first part.
        r = await patch(second_app, owner, path, 3 * mib, data[3 * mib : 6 * mib])
        assert r.status_code == 204, r.text
        assert r.headers["upload-offset"] == str(6 * mib)
        r = await patch(client, owner, path, 6 * mib, data[6 * mib :])
        assert r.status_code == 204, r.text
        asset_id = r.headers["nodeloom-asset-id"]
        asset = (await client.get(f"/api/v1/assets/{asset_id}", headers=owner.headers)).json()
        assert (asset["width"], asset["height"]) == (1500, 1500)
        content = await client.get(f"/api/v1/assets/{asset_id}/content", headers=owner.headers)
        assert content.status_code == 200 and content.content[:8] == b"\x89PNG\r\n\x1a\n"
        assert not (settings.data_dir / "uploads").exists()

    async def test_termination_aborts_the_multipart_upload(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        data = big_png(1500, seed=5)
        path = path_of(await create(client, owner, len(data)))
        r = await patch(client, owner, path, 0, data[: 6 * 1024 * 1024])
        assert r.status_code == 204
        r = await client.delete(path, headers={**owner.headers, **V})
        assert r.status_code == 204
        assert (await head(client, owner, path)).status_code == 404
        assert await storage(client, owner) == 0
