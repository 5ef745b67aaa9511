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
