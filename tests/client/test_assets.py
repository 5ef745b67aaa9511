"""The client's assets against the real app (its ASGI transport: the client tests' shared
server takes longer to start than a busy machine gives it): an upload streamed from a file,
dedupe, list with filters, rename and tag, a refused delete while a workflow names the
asset, and a refused upload raised as the code's class."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.client import AsyncClient, Client, errors
from tests.client.conftest import Account, Live, cli
from tests.conftest import User
from tests.media_files import SVG, audio_file, jpeg_with_gps
from tests.runs_helpers import e, g, n


@pytest.fixture
async def nl(app: FastAPI, owner: User) -> AsyncIterator[AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with AsyncClient("http://testserver", owner.api_key, transport=transport) as client:
        yield client


async def test_upload_list_update_delete(nl: AsyncClient, tmp_path: Path) -> None:
    photo = tmp_path / "holiday.jpg"
    photo.write_bytes(jpeg_with_gps(80, 60))
    sound = tmp_path / "tone.wav"
    audio_file(sound, "wav", "pcm_s16le")

    image = await nl.assets.upload(photo)
    assert image.name == "holiday.jpg" and image.content_type == "image/png"
    assert (image.width, image.height) == (80, 60)
    assert image.source_sha256 == hashlib.sha256(photo.read_bytes()).hexdigest()
    assert (await nl.assets.upload(photo, name="again")).id == image.id  # the same content
    audio = await nl.assets.upload(sound)
    assert audio.kind == "audio" and audio.content_type == "audio/mpeg"

    assert [a.id async for a in nl.assets.list()] == [audio.id, image.id]
    assert [a.id async for a in nl.assets.list(kind="image")] == [image.id]
    renamed = await nl.assets.update(image.id, name="Beach", tags=["summer"])
    assert (renamed.name, renamed.tags) == ("Beach", ["summer"])
    assert [a.id async for a in nl.assets.list(search="summer")] == [image.id]

    await nl.workflows.create(g([n("p", "ImageInput", asset=image.id)], []), name="uses it")
    with pytest.raises(errors.AssetInUse):
        await nl.assets.delete(image.id)
    await nl.assets.delete(image.id, force=True)
    with pytest.raises(errors.NotFound):
        await nl.assets.get(image.id)


async def test_refused_upload_raises_the_codes_class(nl: AsyncClient, tmp_path: Path) -> None:
    logo = tmp_path / "logo.png"
    logo.write_bytes(SVG)
    with pytest.raises(errors.UnsupportedMedia):
        await nl.assets.upload(logo)


class TestCommands:
    def test_upload_list_rm(self, live: Live, account: Account, tmp_path: Path) -> None:
        photo = tmp_path / "cat.jpg"
        photo.write_bytes(jpeg_with_gps(40, 30))
        env: dict[str, str | None] = {"NODELOOM_URL": live.url, "NODELOOM_API_KEY": account.api_key}
        done = cli("assets", "upload", str(photo), env=env)
        assert done.returncode == 0, done.stderr
        asset_id = done.stdout.strip()
        assert f"cat.jpg: image {asset_id}" in done.stderr
        done = cli("assets", "list", "--kind", "image", "--json", env=env)
        assert done.returncode == 0, done.stderr
        listed = json.loads(done.stdout)
        assert [(a["id"], a["name"], a["content_type"]) for a in listed] == [
            (asset_id, "cat.jpg", "image/png")
        ]
        done = cli("assets", "rm", asset_id, env=env)
        assert done.returncode == 0, done.stderr
        done = cli("assets", "rm", asset_id, env=env)
        assert done.returncode != 0 and "not_found" in done.stderr

    def test_a_large_file_goes_resumable_with_its_progress_bar(
        self, live: Live, account: Account, tmp_path: Path
    ) -> None:
        from tests.api.test_uploads_tus import big_png

        photo = tmp_path / "poster.png"
        photo.write_bytes(big_png(1700, seed=23))
        assert photo.stat().st_size > 8 * 1024 * 1024
        env: dict[str, str | None] = {"NODELOOM_URL": live.url, "NODELOOM_API_KEY": account.api_key}
        done = cli("assets", "upload", str(photo), "--json", env=env)
        assert done.returncode == 0, done.stderr
        (asset,) = json.loads(done.stdout)
        assert (asset["name"], asset["width"]) == ("poster.png", 1700)
        with httpx.Client(base_url=live.url) as http:
            # It came through tus: the database has the finished upload of it.
            r = http.get("/api/v1/storage", headers={"Authorization": f"Bearer {account.api_key}"})
            assert r.json()["used_bytes"] == asset["size_bytes"]
        import sqlite3

        with sqlite3.connect(live.data_dir / "nodeloom.db") as db:
            rows = db.execute("SELECT asset_id FROM tus_uploads").fetchall()
        assert (asset["id"],) in rows

    def test_run_uploads_an_input_file(self, live: Live, account: Account, tmp_path: Path) -> None:
        photo = tmp_path / "cat.jpg"
        photo.write_bytes(jpeg_with_gps(40, 30))
        env: dict[str, str | None] = {"NODELOOM_URL": live.url, "NODELOOM_API_KEY": account.api_key}
        graph = g(
            [n("p", "ImageInput", key="photo"), n("s", "ImageResize", width=8, height=8)],
            [e("p", "s")],
        )
        with Client(live.url, account.api_key) as nl:
            nl.workflows.create(graph, name="portrait")
        done = cli("run", "portrait", "-i", f"photo=@{photo}", "--wait", "--json", env=env)
        assert done.returncode == 0, done.stderr
        assert "uploaded cat.jpg: image " in done.stderr
        run = json.loads(done.stdout)
        assert run["run"]["status"] == "completed"
        done = cli("run", "portrait", "-i", f"photo=@{tmp_path / 'missing.jpg'}", env=env)
        assert done.returncode == 1 and "no such file" in done.stderr


class _CutFirstPatch(httpx.AsyncBaseTransport):
    """The app's transport, but the first PATCH delivers only half its body and then the
    connection 'drops' (the client sees a transport error, the server what arrived)."""

    def __init__(self, app: FastAPI) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.patches: list[tuple[str, int]] = []  # (Upload-Offset, bytes sent)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method != "PATCH":
            return await self.inner.handle_async_request(request)
        body = b"".join([chunk async for chunk in request.stream])  # type: ignore[union-attr]
        self.patches.append((request.headers["upload-offset"], len(body)))
        if len(self.patches) > 1:
            resent = httpx.Request(
                request.method, request.url, headers=request.headers, content=body
            )
            return await self.inner.handle_async_request(resent)
        half = body[: len(body) // 2]
        headers = {k: v for k, v in request.headers.items() if k != "content-length"}
        cut = httpx.Request(request.method, request.url, headers=headers, content=half)
        response = await self.inner.handle_async_request(cut)
        await response.aread()
        raise httpx.ReadError("connection reset by peer")


async def test_a_resumable_upload_continues_after_a_lost_connection(
    app: FastAPI, owner: User, tmp_path: Path
) -> None:
    from tests.api.test_uploads_tus import big_png

    photo = tmp_path / "large.png"
    photo.write_bytes(big_png(400, seed=21))
    size = photo.stat().st_size
    transport = _CutFirstPatch(app)
    seen: list[int] = []
    async with AsyncClient("http://testserver", owner.api_key, transport=transport) as client:
        asset = await client.assets.upload(photo, resumable=True, on_progress=seen.append)
    assert asset.name == "large.png" and (asset.width, asset.height) == (400, 400)
    assert asset.source_sha256 == hashlib.sha256(photo.read_bytes()).hexdigest()
    # The second PATCH sent only what the server did not have.
    assert transport.patches == [("0", size), (str(size // 2), size - size // 2)]
    assert seen[-1] == size


async def test_files_above_the_threshold_go_resumable(
    app: FastAPI, owner: User, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nodeloom.client import _resources
    from tests.api.test_uploads_tus import big_png

    monkeypatch.setattr(_resources, "RESUMABLE_ABOVE", 1000)
    photo = tmp_path / "p.png"
    photo.write_bytes(big_png(60, seed=22))
    transport = _CutFirstPatch(app)
    async with AsyncClient("http://testserver", owner.api_key, transport=transport) as client:
        asset = await client.assets.upload(photo)
    assert asset.kind == "image" and len(transport.patches) == 2
