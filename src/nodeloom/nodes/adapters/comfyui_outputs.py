"""Which file of a finished ComfyUI prompt a ``ComfyUIWorkflow*`` node keeps, by the kind of
its output, and fetching it.

A prompt's history entry lists, per output node, the files it saved as ``{filename,
subfolder, type}`` under a key that says what they are:

- ``images``: ``SaveImage``, ``PreviewImage`` — and the animated outputs of core nodes,
  flagged ``animated: [true]`` beside them: ``SaveAnimatedWEBP``, ``SaveAnimatedPNG``,
  ``SaveWEBM`` and the newer ``SaveVideo`` (an MP4 listed under ``images``);
- ``gifs``: VideoHelperSuite's ``VHS_VideoCombine`` (whatever its ``format``:
  ``video/h264-mp4``, ``image/gif``, ``image/webp``...); ``videos`` for nodes that say so;
- ``audio``: ``SaveAudio`` (FLAC), ``SaveAudioMP3``, ``SaveAudioOpus``, ``PreviewAudio``.

An image node keeps still images only; a video node the animated ones, the files of a video
extension under ``images``, and ``gifs``/``videos``; an audio node ``audio``. The file is
fetched from ``/view`` (guarded, size-limited) and made one of our types in a sandbox
process (adapters/media.py: WebP/JPEG -> PNG, FLAC/WAV/Opus -> MP3, WebM/GIF/animated WebP
-> H.264 MP4).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeloom.nodes.adapters import policy
from nodeloom.nodes.adapters.comfyui_protocol import ComfyUIClient
from nodeloom.nodes.adapters.policy import ProviderError
from nodeloom.sdk._node import Kind, Produced

VIDEO_SUFFIXES = (".mp4", ".webm", ".mov", ".mkv", ".m4v", ".avi")
NOUNS = {Kind.IMAGE: "image", Kind.VIDEO: "video", Kind.AUDIO: "audio"}
NODE_TYPES = {
    Kind.IMAGE: "ComfyUIWorkflow",
    Kind.VIDEO: "ComfyUIWorkflowVideo",
    Kind.AUDIO: "ComfyUIWorkflowAudio",
}


def _refs(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [ref for ref in value if isinstance(ref, dict) and isinstance(ref.get("filename"), str)]


def _moving(output: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
    """Whether an ``images`` entry is an animation or a video rather than a still."""
    animated = output.get("animated")
    if isinstance(animated, list) and any(value is True for value in animated):
        return True
    return str(ref["filename"]).lower().endswith(VIDEO_SUFFIXES)


def files_of(output: Any, kind: Kind) -> list[Mapping[str, Any]]:
    """The files of ``kind`` one output node of the history saved, in its order."""
    if not isinstance(output, dict):
        return []
    images = _refs(output.get("images"))
    if kind == Kind.IMAGE:
        return [ref for ref in images if not _moving(output, ref)]
    if kind == Kind.VIDEO:
        moving = [ref for ref in images if _moving(output, ref)]
        return [*_refs(output.get("gifs")), *_refs(output.get("videos")), *moving]
    if kind == Kind.AUDIO:
        return _refs(output.get("audio"))
    return []


def _order(node_id: str) -> tuple[int, str]:
    return (len(node_id), node_id)


def _elsewhere(outputs: Mapping[str, Any], kind: Kind, node_id: str | None = None) -> str:
    """A hint naming the node type that keeps what the workflow (or one node) made instead."""
    made = [
        other
        for other in NOUNS
        if other != kind
        and any(files_of(outputs[n], other) for n in outputs if node_id is None or n == node_id)
    ]
    if not made:
        return ""
    return f" (it made {' and '.join(NOUNS[m] for m in made)}: use {NODE_TYPES[made[0]]})"


def chosen_file(
    outputs: Mapping[str, Any], kind: Kind, node_id: str | None, index: int
) -> Mapping[str, Any]:
    """The ``index``-th file of ``kind`` saved by output node ``node_id`` (None: the first
    file of ``kind`` of any output node, in node order); ProviderError saying what is there
    instead when there is none."""
    noun = NOUNS[kind]
    if node_id is None:
        for candidate in sorted(outputs, key=_order):
            found = files_of(outputs[candidate], kind)
            if found:
                return found[0]
        raise ProviderError(f"ComfyUI's workflow produced no {noun}{_elsewhere(outputs, kind)}")
    found = files_of(outputs.get(node_id), kind)
    if not found:
        hint = _elsewhere(outputs, kind, node_id) if node_id in outputs else ""
        raise ProviderError(f"ComfyUI's node {node_id} produced no {noun}{hint}")
    if index >= len(found):
        raise ProviderError(
            f"ComfyUI's node {node_id} produced {len(found)} {noun} file(s); "
            f"{noun} {index} was asked for"
        )
    return found[index]


async def fetch_output(
    ctx: policy.ProviderContext,
    client: ComfyUIClient,
    entry: Mapping[str, Any],
    kind: Kind,
    node_id: str | None,
    index: int,
) -> Produced:
    """The chosen file of a finished prompt's history ``entry``, downloaded from ``/view``
    and made an artifact of ``kind`` in a sandbox process."""
    outputs = entry.get("outputs")
    ref = chosen_file(outputs if isinstance(outputs, dict) else {}, kind, node_id, index)
    produced = await client.api.download(ctx, client.view_url(ref), kind)
    await policy.report(ctx, 1.0)
    return produced
