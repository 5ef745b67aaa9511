"""What a provider handed back, made into one of our four artifact types: CPU work, run in a
sandbox process (``ProviderNodeContext.convert`` sends it there; sandbox/worker.py runs
``to_artifact``), never on the event loop.

- text: must be UTF-8;
- image: PNG kept as it is, JPEG, WebP and GIF (first frame) re-encoded as PNG;
- audio: MP3 kept as it is (measured by decoding it), anything FFmpeg reads (WAV, FLAC, OGG,
  M4A...) re-encoded as MP3 44.1 kHz stereo;
- video: an MP4 of H.264 yuv420p (with AAC or MP3 sound or none) kept as it is, anything
  else (WebM, MOV, GIF, animated PNG...) re-encoded as H.264 MP4 with its sound; an animated
  WebP (which FFmpeg does not decode) is read frame by frame with Pillow, each frame kept
  for its own duration.

Every file is checked like any untrusted input: pixels, length and size limits.

One more kind prepares an input rather than an output: ``mask:WxH`` (``MASK_KIND``) makes of
any image the mask OpenAI's image edits take, a PNG of W x H pixels whose transparent pixels
mark where to edit (``ImageToImage``): decoding and resizing it is CPU work too.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import av
from PIL import Image, ImageSequence, UnidentifiedImageError

from nodeloom.nodes import media
from nodeloom.sdk._node import Kind, NodeFailure, Produced
from nodeloom.settings import Settings

MASK_KIND = "mask:"
KEPT_VIDEO_AUDIO = frozenset({"aac", "mp3", "mp3float"})
MAX_FPS = 60
WEBP_FRAME_MS = 100  # a WebP frame that gives no duration lasts this long


def to_artifact(kind: str, src: Path, out_dir: Path, settings: Settings) -> Produced:
    """The artifact of ``kind`` (a ``Kind`` value) made of the file ``src``; a new file is
    written in ``out_dir``."""
    media.check_bytes(settings, src.stat().st_size, "the provider's output")
    if kind == Kind.TEXT:
        return _text(src)
    if kind == Kind.IMAGE:
        return _image(src, out_dir, settings)
    if kind == Kind.AUDIO:
        return _audio(src, out_dir, settings)
    if kind == Kind.VIDEO:
        return _video(src, out_dir, settings)
    if kind.startswith(MASK_KIND):
        return _mask(src, kind.removeprefix(MASK_KIND), out_dir, settings)
    raise NodeFailure(f"unknown artifact kind {kind!r}", "internal_error")


def _out(out_dir: Path, suffix: str) -> Path:
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    return out_dir / f"output-{uuid.uuid4().hex}{suffix}"


def _text(src: Path) -> Produced:
    data = src.read_bytes()
    try:
        return Produced.text(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise NodeFailure("the provider's text output is not UTF-8", "provider_error") from exc


def _image(src: Path, out_dir: Path, settings: Settings) -> Produced:
    try:
        image = Image.open(src, formats=media.IMAGE_FORMATS)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
        raise NodeFailure(
            "the provider's output is not a readable image (PNG, JPEG, WebP or GIF)",
            "provider_error",
        ) from exc
    with image:
        media.check_pixels(settings, *image.size, what="the provider's image")
        try:
            image.load()
        except (OSError, Image.DecompressionBombError) as exc:
            raise NodeFailure("the provider's image is damaged", "provider_error") from exc
        if image.format == "PNG":
            return Produced(path=src, width=image.width, height=image.height)
        mode = "RGBA" if "A" in image.getbands() or "transparency" in image.info else "RGB"
        produced = media.png_bytes(image.convert(mode), settings)
    path = _out(out_dir, ".png")
    assert produced.data is not None
    path.write_bytes(produced.data)
    return Produced(path=path, width=produced.width, height=produced.height)


def _mask(src: Path, size: str, out_dir: Path, settings: Settings) -> Produced:
    """The mask as OpenAI takes it: a PNG of ``size`` ("WxH", the image's) whose transparent
    pixels mark where to edit. A mask with transparency is used as it is (resized if
    needed); one without is read as grey levels, white marking what to edit (the inpainting
    convention)."""
    try:
        width, height = (int(v) for v in size.split("x"))
    except ValueError as exc:
        raise NodeFailure(f"bad mask size {size!r}", "internal_error") from exc
    media.check_pixels(settings, width, height)
    try:
        image = Image.open(src, formats=media.IMAGE_FORMATS)
        image.load()
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
        raise NodeFailure("the mask is not a readable image") from exc
    with image:
        media.check_pixels(settings, *image.size, what="mask")
        if "A" in image.getbands() or image.info.get("transparency") is not None:
            rgba = image.convert("RGBA")
        else:
            grey = image.convert("L")
            rgba = Image.new("RGBA", grey.size, (0, 0, 0, 255))
            rgba.putalpha(grey.point(lambda v: 255 - v))
    if rgba.size != (width, height):
        rgba = rgba.resize((width, height), Image.Resampling.NEAREST)
    produced = media.png_bytes(rgba, settings)
    path = _out(out_dir, ".png")
    assert produced.data is not None
    path.write_bytes(produced.data)
    return Produced(path=path, width=produced.width, height=produced.height)


def _audio(src: Path, out_dir: Path, settings: Settings) -> Produced:
    try:
        with av.open(str(src)) as container:
            format_name = str(container.format.name)
            streams = container.streams.audio
            codec = streams[0].codec_context.codec.canonical_name if streams else None
    except av.FFmpegError as exc:
        raise NodeFailure(
            f"the provider's output is not readable audio: {exc}", "provider_error"
        ) from exc
    if codec is None:
        raise NodeFailure("the provider's output has no audio stream", "provider_error")
    if format_name == "mp3" and codec == "mp3":
        seconds = media.copyable_mp3_seconds(src, settings, settings.max_media_seconds)
        if seconds is not None:
            return Produced(path=src, duration_ms=round(seconds * 1000))
    samples = media.decode_audio(src, settings)
    return media.encode_mp3(samples, _out(out_dir, ".mp3"), settings)


def _video(src: Path, out_dir: Path, settings: Settings) -> Produced:
    if _is_webp(src):
        return _webp_video(src, _out(out_dir, ".mp4"), settings)
    try:
        with av.open(str(src)) as container:
            format_names = set(str(container.format.name).split(","))
    except av.FFmpegError as exc:
        raise NodeFailure(
            f"the provider's output is not readable video: {exc}", "provider_error"
        ) from exc
    info = _probe(src)
    if info.width is None or info.height is None:
        raise NodeFailure("the provider's output has no video stream", "provider_error")
    media.check_pixels(settings, info.width, info.height, what="the provider's video")
    if info.duration_ms is not None:
        media.check_seconds(settings, info.duration_ms / 1000, "the provider's video")
    if (
        "mp4" in format_names
        and info.video_codec == "h264"
        and info.pix_fmt == "yuv420p"
        and (info.audio_codec is None or info.audio_codec in KEPT_VIDEO_AUDIO)
    ):
        return Produced(
            path=src, width=info.width, height=info.height, duration_ms=info.duration_ms
        )
    return transcode(src, _out(out_dir, ".mp4"), settings)


def _probe(src: Path) -> media.Probe:
    try:
        return media.probe(src)
    except av.FFmpegError as exc:
        raise NodeFailure(
            f"the provider's output is not readable video: {exc}", "provider_error"
        ) from exc


def transcode(src: Path, path: Path, settings: Settings) -> Produced:
    """Re-encode as H.264 MP4 (even size, at most MAX_FPS), its sound as AAC."""
    samples: Any = None
    try:
        with av.open(str(src)) as probe_container:
            has_audio = bool(probe_container.streams.audio)
        if has_audio:
            samples = media.decode_audio(src, settings)
        with av.open(str(src)) as container:
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate or 25
            fps = max(1, min(MAX_FPS, round(float(rate))))
            width = media.even(stream.codec_context.width)
            height = media.even(stream.codec_context.height)
            writer = media.VideoWriter(path, width, height, fps, audio=samples)
            limit = settings.max_media_seconds * fps + fps
            try:
                for frame in container.decode(stream):
                    writer.write_image(frame.to_image())  # type: ignore[no-untyped-call]
                    if writer.frames > limit:
                        raise NodeFailure(
                            f"the provider's video is longer than {settings.max_media_seconds:g} s"
                        )
                writer.close()
            except BaseException:
                writer.abort()
                raise
    except av.FFmpegError as exc:
        raise NodeFailure(f"the provider's video is damaged: {exc}", "provider_error") from exc
    return writer.produced(settings)


def _is_webp(src: Path) -> bool:
    with src.open("rb") as f:
        head = f.read(12)
    return head[:4] == b"RIFF" and head[8:12] == b"WEBP"


def _webp_video(src: Path, path: Path, settings: Settings) -> Produced:
    """An animated WebP (ComfyUI's ``SaveAnimatedWEBP``, VideoHelperSuite's ``image/webp``)
    as H.264 MP4: frames decoded by Pillow, each shown for its own duration at a frame rate
    that fits the shortest one."""
    try:
        image = Image.open(src, formats=["WEBP"])
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
        raise NodeFailure("the provider's WebP is not readable", "provider_error") from exc
    with image:
        media.check_pixels(settings, *image.size, what="the provider's video")
        frames = getattr(image, "n_frames", 1)
        durations = []
        for index in range(frames):
            image.seek(index)
            image.load()  # a frame's duration is known once it is read
            durations.append(int(image.info.get("duration") or WEBP_FRAME_MS))
        total = sum(durations) / 1000
        media.check_seconds(settings, total, "the provider's video")
        fps = max(1, min(MAX_FPS, round(1000 / max(1, min(durations)))))
        width, height = media.even(image.width), media.even(image.height)
        writer = media.VideoWriter(path, width, height, fps, held=True)
        try:
            shown = 0  # frame times written, to keep rounding from adding up
            elapsed = 0.0
            for frame, duration in zip(ImageSequence.Iterator(image), durations, strict=False):
                elapsed += duration / 1000
                ticks = max(1, round(elapsed * fps) - shown)
                writer.write(writer.frame_from_image(frame.convert("RGB")), ticks)
                shown += ticks
            writer.close()
        except (OSError, ValueError) as exc:
            writer.abort()
            raise NodeFailure(f"the provider's WebP is damaged: {exc}", "provider_error") from exc
        except BaseException:
            writer.abort()
            raise
    return writer.produced(settings)
