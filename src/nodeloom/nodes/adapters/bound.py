"""Files bound to a hosted model's input (Replicate, fal): inline when small, uploaded first
when not, as the official clients do.

A node's payload carries a ``BoundFile`` where a field is bound to an image, audio or video
input. Right before the submission (inside ``submit_once``'s ``submit``, so a node attaching
to its job after a crash uploads nothing) ``resolve`` makes each one a string: a ``data:``
URI while the files inlined so far stay within ``provider_inline_max_bytes`` (Replicate's
documentation recommends data URIs below 1 MB), else the URL of a copy uploaded to the
provider (replicate-python and replicate-javascript upload every file through ``POST
/v1/files`` and send its ``urls.get``; fal_client puts it in fal's storage and sends its
``file_url``). The request is then bounded by the setting, whatever the files weigh, and so
is every webhook delivery that echoes it.

The job's fingerprint (``policy.request_fingerprint``) sees a file as its sha256, not as
the URL of one upload, so the same request after a crash is still recognised.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nodeloom.sdk import ArtifactRef

Upload = Callable[[ArtifactRef], Awaitable[str]]


@dataclass(frozen=True)
class BoundFile:
    """An input artifact a model's input field is bound to, not yet encoded."""

    ref: ArtifactRef

    def __str__(self) -> str:  # what a job's fingerprint sees (json.dumps default=str)
        return f"sha256:{self.ref.sha256}"


async def data_uri(ref: ArtifactRef) -> str:
    """An input artifact as a ``data:`` URI."""

    def encode() -> str:
        return f"data:{ref.content_type};base64," + base64.b64encode(ref.read_bytes()).decode()

    return await asyncio.to_thread(encode)


async def resolve(value: Any, inline_max: int, upload: Upload) -> Any:
    """``value`` with each ``BoundFile`` (in dicts and lists, in order) replaced by a data:
    URI while the bytes inlined stay within ``inline_max``, else by ``upload``'s URL."""
    inlined = 0

    async def walk(item: Any) -> Any:
        nonlocal inlined
        if isinstance(item, BoundFile):
            size = item.ref.size_bytes
            if inlined + size <= inline_max:
                inlined += size
                return await data_uri(item.ref)
            return await upload(item.ref)
        if isinstance(item, dict):
            return {key: await walk(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [await walk(inner) for inner in item]
        return item

    return await walk(value)


def file_name(ref: ArtifactRef) -> str:
    """The name an upload is given: the artifact id and the extension of its type."""
    extension = {
        "image/png": "png",
        "image/jpeg": "jpg",
        "image/webp": "webp",
        "audio/mpeg": "mp3",
        "audio/wav": "wav",
        "video/mp4": "mp4",
        "text/plain": "txt",
    }.get(ref.content_type.split(";")[0].strip(), "bin")
    return f"{ref.artifact_id}.{extension}"
