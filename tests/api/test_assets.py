"""Uploads and assets, over HTTP on a real app and database: the kind read from the content
and converted (PNG, MP3, MP4), EXIF gone, dedupe, limits and quotas (a race cannot pass a
quota, on both databases), list/get/rename/tag/delete, and another account's asset is 404."""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import av
import httpx
import pytest
from PIL import Image

from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.media_files import (
    GPS_IFD,
    SVG,
    animated_gif,
    audio_file,
    image_bytes,
    jpeg_with_gps,
    video_file,
)
from tests.runs_helpers import create_workflow, g, n

UPLOADS = "/api/v1/uploads"


async def upload(
    client: httpx.AsyncClient,
    user: User,
    data: bytes,
    filename: str = "file.bin",
    content_type: str = "application/octet-stream",
    name: str | None = None,
) -> httpx.Response:
    fields = {"name": name} if name else None
    return await client.post(
        UPLOADS,
        files={"file": (filename, data, content_type)},
        data=fields,
        headers=user.headers,
        timeout=120,
    )


async def download(client: httpx.AsyncClient, url: str) -> httpx.Response:
    r = await client.get(url)  # signed: no credential
    assert r.status_code == 200, r.text
    return r


class TestImages:
    async def test_jpeg_with_gps_becomes_png_without_exif(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        source = jpeg_with_gps(64, 48)
        r = await upload(client, owner, source, "holiday.jpg", "image/jpeg")
        assert r.status_code == 201, r.text
        asset = r.json()
        assert r.headers["location"] == f"/api/v1/assets/{asset['id']}"
        assert asset["kind"] == "image" and asset["content_type"] == "image/png"
        assert (asset["width"], asset["height"]) == (64, 48)
        assert asset["source_format"] == "jpeg" and asset["name"] == "holiday.jpg"
        assert asset["source_sha256"] == hashlib.sha256(source).hexdigest()
        body = (await download(client, asset["download_url"])).content
        assert hashlib.sha256(body).hexdigest() == asset["sha256"]
        assert len(body) == asset["size_bytes"]
        assert b"SecretCam" not in body and b"Exif" not in body
        with Image.open(io.BytesIO(body)) as image:
            assert image.format == "PNG" and image.size == (64, 48)
            assert not image.getexif() and not image.getexif().get_ifd(GPS_IFD)
        thumb = (await download(client, asset["thumbnail_url"])).content
        with Image.open(io.BytesIO(thumb)) as image:
            assert image.format == "PNG" and max(image.size) <= 256

    @pytest.mark.parametrize(
        ("made", "fmt"),
        [
            (lambda: image_bytes("JPEG", mode="CMYK"), "jpeg"),
            (lambda: image_bytes("WEBP"), "webp"),
            (lambda: image_bytes("TIFF"), "tiff"),
            (animated_gif, "gif"),
        ],
        ids=["cmyk-jpeg", "webp", "tiff", "animated-gif"],
    )
    async def test_other_formats_become_png(
        self, client: httpx.AsyncClient, owner: User, made: Any, fmt: str
    ) -> None:
        r = await upload(client, owner, made(), "picture.png", "image/png")  # the name lies
        assert r.status_code == 201, r.text
        asset = r.json()
        assert asset["source_format"] == fmt and asset["content_type"] == "image/png"
        body = (await download(client, asset["download_url"])).content
        with Image.open(io.BytesIO(body)) as image:
            assert image.format == "PNG" and image.mode in ("RGB", "RGBA")

    async def test_clean_16_bit_png_is_kept_as_sent(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        source = image_bytes("PNG", mode="I;16")
        r = await upload(client, owner, source, "depth.png", "image/png")
        assert r.status_code == 201, r.text
        assert r.json()["sha256"] == hashlib.sha256(source).hexdigest()

    async def test_png_with_appended_archive_is_written_anew(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        """A polyglot (a PNG that is also a ZIP) keeps its picture and loses the rest."""
        source = image_bytes("PNG") + b"PK\x03\x04" + b"payload" * 100
        r = await upload(client, owner, source, "a.png", "image/png")
        assert r.status_code == 201, r.text
        body = (await download(client, r.json()["download_url"])).content
        assert b"PK\x03\x04" not in body and b"payload" not in body
        assert body.endswith(b"IEND\xaeB`\x82")


class TestAudioAndVideo:
    @pytest.mark.parametrize(
        ("name", "fmt", "codec"),
        [
            ("tone.wav", "wav", "pcm_s16le"),
            ("tone.flac", "flac", "flac"),
            ("tone.ogg", "ogg", "libopus"),
            ("tone.m4a", "ipod", "aac"),
        ],
    )
    async def test_audio_becomes_mp3(
        self,
        client: httpx.AsyncClient,
        owner: User,
        tmp_path: Path,
        name: str,
        fmt: str,
        codec: str,
    ) -> None:
        source = audio_file(tmp_path / name, fmt, codec, seconds=1.0)
        r = await upload(client, owner, source, name)
        assert r.status_code == 201, r.text
        asset = r.json()
        assert asset["kind"] == "audio" and asset["content_type"] == "audio/mpeg"
        assert 900 <= asset["duration_ms"] <= 1200
        body = (await download(client, asset["download_url"])).content
        path = tmp_path / "back.mp3"
        path.write_bytes(body)
        with av.open(str(path)) as container:
            assert container.streams.audio[0].codec_context.codec.name in ("mp3", "mp3float")

    @pytest.mark.parametrize(
        ("name", "fmt", "codec"),
        [
            ("clip.mov", "mov", "libx264"),
            ("clip.webm", "webm", "libvpx"),
            ("clip.mkv", "matroska", "mpeg4"),
        ],
    )
    async def test_video_becomes_h264_mp4_with_poster(
        self,
        client: httpx.AsyncClient,
        owner: User,
        tmp_path: Path,
        name: str,
        fmt: str,
        codec: str,
    ) -> None:
        source = video_file(tmp_path / name, fmt, codec, seconds=1.0, size=(64, 48))
        r = await upload(client, owner, source, name)
        assert r.status_code == 201, r.text
        asset = r.json()
        assert asset["kind"] == "video" and asset["content_type"] == "video/mp4"
        assert (asset["width"], asset["height"]) == (64, 48)
        assert asset["video_codec"] == "h264"
        body = (await download(client, asset["download_url"])).content
        path = tmp_path / "back.mp4"
        path.write_bytes(body)
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            assert stream.codec_context.codec.name == "h264"
            assert stream.codec_context.pix_fmt == "yuv420p"
        thumb = (await download(client, asset["thumbnail_url"])).content
        assert thumb.startswith(b"\x89PNG")


class TestRefused:
    async def test_svg_named_png_is_refused(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await upload(client, owner, SVG, "logo.png", "image/png")
        assert_problem(r, 415, "unsupported_media")

    async def test_archive_is_refused(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await upload(client, owner, b"PK\x03\x04" + b"\x00" * 100, "a.jpg", "image/jpeg")
        assert_problem(r, 415, "unsupported_media")

    async def test_truncated_jpeg_is_unreadable(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        source = image_bytes("JPEG", size=(200, 200), quality=95)
        r = await upload(client, owner, source[: len(source) // 3], "cut.jpg")
        assert_problem(r, 422, "media_unreadable")

    async def test_gif_header_with_markup_is_unreadable(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await upload(client, owner, b"GIF89a<script>alert(1)</script>", "x.gif")
        assert_problem(r, 422, "media_unreadable")

    async def test_truncated_video_is_unreadable(
        self, client: httpx.AsyncClient, owner: User, tmp_path: Path
    ) -> None:
        source = video_file(tmp_path / "v.mkv", "matroska", "mpeg4")
        r = await upload(client, owner, source[:200], "v.mkv")
        assert_problem(r, 422, "media_unreadable")

    async def test_empty_body(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await client.post(UPLOADS, content=b"", headers=owner.headers)
        assert_problem(r, 400, "invalid_request")

    async def test_multipart_without_file(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await client.post(UPLOADS, data={"name": "x"}, files={}, headers=owner.headers)
        assert r.status_code in (400, 415), r.text
        assert r.headers["content-type"] == "application/problem+json"

    async def test_malformed_multipart(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await client.post(
            UPLOADS,
            content=b"--xyz\r\nnot headers at all",
            headers={**owner.headers, "Content-Type": "multipart/form-data; boundary=xyz"},
        )
        assert_problem(r, 400, "invalid_request")


class TestLimits:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {
            "upload_limits": {"enterprise": {"file_bytes": 40_000, "pixels": 10_000, "seconds": 2}}
        }

    async def test_raw_body_over_the_cap_is_refused_while_streaming(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        sent = 0

        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            for _ in range(100):
                sent += 4096
                yield b"\x89PNG\r\n\x1a\n" + b"\x00" * 4088

        r = await client.post(UPLOADS, content=body(), headers=owner.headers)
        body_json = assert_problem(r, 413, "payload_too_large")
        assert body_json["limit"] == 40_000
        assert sent < 100 * 4096  # refused before the client had sent it all

    async def test_declared_length_over_the_cap(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.post(UPLOADS, content=b"x" * 50_000, headers=owner.headers)
        assert_problem(r, 413, "payload_too_large")

    async def test_pixels_checked_before_decoding(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # 1000 x 1000 of one colour: a few kB on the wire, a million pixels decoded.
        source = image_bytes("PNG", size=(1000, 1000), mode="L")
        assert len(source) < 40_000
        r = await upload(client, owner, source, "big.png")
        assert_problem(r, 413, "media_limit_exceeded")

    async def test_length_checked(
        self, client: httpx.AsyncClient, owner: User, tmp_path: Path
    ) -> None:
        source = audio_file(tmp_path / "long.flac", "flac", "flac", seconds=3.0, rate=8000)
        assert len(source) < 40_000
        r = await upload(client, owner, source, "long.flac")
        assert_problem(r, 413, "media_limit_exceeded")


class TestQuota:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"upload_limits": {"enterprise": {"storage_bytes": 4000}}}

    async def test_concurrent_uploads_cannot_pass_the_quota(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        # Distinct PNGs kept as sent (clean PNGs): each about 1 kB.
        files = [
            image_bytes("PNG", size=(40, 40), mode="RGB", compress_level=0)[:0] or _noise_png(seed)
            for seed in range(8)
        ]
        sizes = {len(f) for f in files}
        assert all(900 < s < 2100 for s in sizes), sizes
        answers = await asyncio.gather(
            *(upload(client, owner, data, f"n{i}.png") for i, data in enumerate(files))
        )
        created = [r for r in answers if r.status_code == 201]
        refused = [r for r in answers if r.status_code != 201]
        for r in refused:
            assert_problem(r, 402, "storage_quota_exceeded")
        assert created and refused
        total = sum(r.json()["size_bytes"] for r in created)
        assert total <= 4000
        storage = (await client.get("/api/v1/storage", headers=owner.headers)).json()
        assert storage == {
            "used_bytes": total,
            "quota_bytes": 4000,
            "file_bytes": storage["file_bytes"],
        }
        # Deleting gives the bytes back.
        victim = created[0].json()
        r = await client.delete(f"/api/v1/assets/{victim['id']}", headers=owner.headers)
        assert r.status_code == 204
        storage = (await client.get("/api/v1/storage", headers=owner.headers)).json()
        assert storage["used_bytes"] == total - victim["size_bytes"]

    async def test_same_content_twice_is_one_asset_and_costs_once(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        data = _noise_png(99)
        first, second = await asyncio.gather(
            upload(client, owner, data, "a.png"), upload(client, owner, data, "b.png")
        )
        assert sorted([first.status_code, second.status_code]) in ([200, 201], [201, 201])
        assert first.json()["id"] == second.json()["id"]
        storage = (await client.get("/api/v1/storage", headers=owner.headers)).json()
        assert storage["used_bytes"] == first.json()["size_bytes"]
        again = await upload(client, owner, data, "c.png")
        assert again.status_code == 200 and again.json()["id"] == first.json()["id"]


def _noise_png(seed: int) -> bytes:
    import numpy as np

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, size=(18, 18, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


class TestAssets:
    @pytest.fixture(params=["sqlite", "postgres"])
    def backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    async def test_list_search_rename_tag_delete_and_isolation(
        self, client: httpx.AsyncClient, owner: User, other: User, tmp_path: Path
    ) -> None:
        image = (await upload(client, owner, _noise_png(1), "cat.png")).json()
        sound = (
            await upload(
                client, owner, audio_file(tmp_path / "a.wav", "wav", "pcm_s16le"), "purr.wav"
            )
        ).json()
        for seed in range(3):
            r = await upload(client, owner, _noise_png(10 + seed), f"dog-{seed}.png")
            assert r.status_code == 201
        r = await client.get("/api/v1/assets", params={"kind": "audio"}, headers=owner.headers)
        assert [a["id"] for a in r.json()] == [sound["id"]]
        r = await client.get("/api/v1/assets", params={"q": "CAT"}, headers=owner.headers)
        assert [a["id"] for a in r.json()] == [image["id"]]
        r = await client.get("/api/v1/assets", params={"limit": 2}, headers=owner.headers)
        assert len(r.json()) == 2 and 'rel="next"' in r.headers["link"]
        seen = [a["id"] for a in r.json()]
        next_url = r.headers["link"].split(";")[0].strip("<>")
        r = await client.get(next_url, headers=owner.headers)
        seen += [a["id"] for a in r.json()]
        r = await client.get(r.headers["link"].split(";")[0].strip("<>"), headers=owner.headers)
        seen += [a["id"] for a in r.json()]
        assert len(seen) == len(set(seen)) == 5 and "link" not in r.headers

        r = await client.patch(
            f"/api/v1/assets/{image['id']}",
            json={"name": "Tom", "tags": ["pets", " pets ", "grey"]},
            headers=owner.headers,
        )
        assert r.status_code == 200 and r.json()["name"] == "Tom"
        assert r.json()["tags"] == ["pets", "grey"]
        r = await client.get("/api/v1/assets", params={"q": "grey"}, headers=owner.headers)
        assert [a["id"] for a in r.json()] == [image["id"]]
        r = await client.patch(
            f"/api/v1/assets/{image['id']}", json={"name": ""}, headers=owner.headers
        )
        assert_problem(r, 400, "invalid_request")

        # Another account: exactly like an unknown id, everywhere.
        unknown = "00000000-0000-4000-8000-000000000000"
        for asset_id in (image["id"], unknown):
            assert_problem(
                await client.get(f"/api/v1/assets/{asset_id}", headers=other.headers),
                404,
                "not_found",
            )
            assert_problem(
                await client.patch(
                    f"/api/v1/assets/{asset_id}", json={"name": "x"}, headers=other.headers
                ),
                404,
                "not_found",
            )
            assert_problem(
                await client.delete(f"/api/v1/assets/{asset_id}", headers=other.headers),
                404,
                "not_found",
            )
            assert_problem(
                await client.get(f"/api/v1/assets/{asset_id}/content", headers=other.headers),
                404,
                "not_found",
            )
        assert (await client.get("/api/v1/assets", headers=other.headers)).json() == []
        # The other account uploading the same bytes gets an asset of its own.
        mine = await upload(client, other, _noise_png(1), "cat.png")
        assert mine.status_code == 201 and mine.json()["id"] != image["id"]

        r = await client.delete(f"/api/v1/assets/{image['id']}", headers=owner.headers)
        assert r.status_code == 204
        assert_problem(
            await client.get(f"/api/v1/assets/{image['id']}", headers=owner.headers),
            404,
            "not_found",
        )

    async def test_delete_refused_while_a_workflow_names_it(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        asset = (await upload(client, owner, _noise_png(5), "in-use.png")).json()
        workflow_id = await create_workflow(
            client, owner, g([n("in", "TextInput", key="x", text=asset["id"])], [])
        )
        r = await client.delete(f"/api/v1/assets/{asset['id']}", headers=owner.headers)
        body = assert_problem(r, 409, "asset_in_use")
        assert body["workflows"] == [workflow_id]
        assert (
            await client.get(f"/api/v1/assets/{asset['id']}", headers=owner.headers)
        ).status_code == 200
        r = await client.delete(
            f"/api/v1/assets/{asset['id']}", params={"force": "true"}, headers=owner.headers
        )
        assert r.status_code == 204
