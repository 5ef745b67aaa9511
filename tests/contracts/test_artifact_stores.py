"""The artifact-store contract: files on disk and S3 (a real S3-protocol server, moto) behave
alike: content-addressed, readable by range, as local files for nodes, shared by every
process on the same directory or bucket, and collected only when nothing references a blob
and it was not written again."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from nodeloom.artifacts.s3 import S3ArtifactStore
from nodeloom.artifacts.store import ArtifactStore, LocalArtifactStore
from nodeloom.settings import Settings
from tests.conftest import TEST_SECRET
from tests.s3 import S3Server
from tests.s3 import s3_server as s3_server  # the fixture


@pytest.fixture(params=["local", "s3"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[ArtifactStore, ArtifactStore]:
    """Two stores on one directory or bucket, standing for two processes (each S3 one with
    its own local cache)."""
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "artifacts"), LocalArtifactStore(
            tmp_path / "artifacts"
        )
    server: S3Server = request.getfixturevalue("s3_server")
    bucket = server.new_bucket()

    def one(name: str) -> ArtifactStore:
        settings = Settings(
            data_dir=tmp_path / name,
            secret_key=TEST_SECRET,
            **server.settings(bucket),  # type: ignore[arg-type]
        )
        return S3ArtifactStore(settings)

    return one("a"), one("b")


@pytest.fixture
def store(stores: tuple[ArtifactStore, ArtifactStore]) -> ArtifactStore:
    return stores[0]


async def _read(store: ArtifactStore, sha: str, first: int, length: int) -> bytes:
    return b"".join([chunk async for chunk in store.read(sha, first, length)])


async def test_content_addressed_and_read_by_range(store: ArtifactStore, tmp_path: Path) -> None:
    first = await store.put_bytes(b"hello world")
    again = await store.put_bytes(b"hello world")
    assert first == again and first.size_bytes == 11
    assert await store.exists(first.sha256)
    assert not await store.exists("0" * 64)
    assert await _read(store, first.sha256, 0, 11) == b"hello world"
    assert await _read(store, first.sha256, 6, 5) == b"world"
    assert (await store.local_path(first.sha256)).read_bytes() == b"hello world"
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * 40_000)  # 10 MB: uploaded in parts to S3
    blob = await store.put_file(big)
    assert not big.exists()  # the store took the file over
    assert blob.size_bytes == 10_240_000
    assert await _read(store, blob.sha256, 10_239_998, 2) == bytes([254, 255])


async def test_collect_removes_only_unreferenced_blobs(store: ArtifactStore) -> None:
    kept = await store.put_bytes(b"still shown by a run")
    gone = await store.put_bytes(b"nobody wants this")

    async def referenced(shas: list[str]) -> set[str]:
        return {kept.sha256} & set(shas)

    # Nothing older than an hour ago: nothing goes.
    assert await store.collect(time.time() - 3600, referenced) == (0, 0)
    removed, freed = await store.collect(time.time() + 5, referenced)
    assert (removed, freed) == (1, gone.size_bytes)
    assert await store.exists(kept.sha256)
    assert not await store.exists(gone.sha256)


async def test_a_blob_one_process_stored_is_read_by_another(
    stores: tuple[ArtifactStore, ArtifactStore],
) -> None:
    a, b = stores
    blob = await a.put_bytes(b"made by process a")
    assert await b.exists(blob.sha256)
    assert await _read(b, blob.sha256, 8, 9) == b"process a"
    assert (await b.local_path(blob.sha256)).read_bytes() == b"made by process a"
    same = await b.put_bytes(b"made by process a")
    assert same == blob  # the same content is the same blob, whoever stores it


async def test_a_blob_written_again_is_not_collected(store: ArtifactStore) -> None:
    blob = await store.put_bytes(b"wanted once more")
    await asyncio.sleep(1.1)  # S3's Last-Modified counts whole seconds
    older_than = time.time()
    await asyncio.sleep(1.1)
    assert await store.put_bytes(b"wanted once more") == blob  # a node produced it again

    async def nothing(shas: list[str]) -> set[str]:
        return set()

    assert await store.collect(older_than, nothing) == (0, 0)
    assert await store.exists(blob.sha256)
    assert await store.collect(time.time() + 5, nothing) == (1, blob.size_bytes)
    assert not await store.exists(blob.sha256)
