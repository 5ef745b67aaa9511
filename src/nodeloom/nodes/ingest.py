"""An uploaded (or fetched) file decoded for real and made into one of our four types, in a
sandbox process under a budget (sandbox/worker.py runs ``ingest``; never the event loop).

- image: decoded whole with Pillow (JPEG, PNG, WebP, GIF's first frame, TIFF, BMP); turned
  upright by its EXIF orientation and written anew as PNG, which keeps no EXIF (GPS
  included), no text chunks and nothing appended after the image. A PNG that holds only
  image chunks and nothing after its end is kept byte for byte (a 16-bit PNG stays 16-bit);
- audio: MP3 kept when it decodes whole; WAV, FLAC, OGG, M4A, AAC and anything else FFmpeg
  decodes are re-encoded as MP3;
- video: an MP4 of H.264 ``yuv420p`` with AAC or MP3 sound is kept; MOV, WebM, MKV, AVI...
  are re-encoded as H.264/AAC MP4.

Size limits are checked from the header before anything is decoded (pixels, length), and
again while decoding, so a file whose header lies (a decompression bomb) is stopped by the
limit, and the budget's memory and time stop the rest. Images and videos get a thumbnail
(a PNG of at most ``THUMBNAIL_SIZE`` pixels a side; a video's first frame).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import av
from PIL import Image, ImageOps, UnidentifiedImageError

from nodeloom.nodes import media
from nodeloom.nodes.adapters.media import KEPT_VIDEO_AUDIO, transcode
from nodeloom.sdk._node import NodeFailure
from nodeloom.settings import Settings

THUMBNAIL_SIZE = 256
DECODED_IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "TIFF", "BMP")
# PNG chunks that describe pixels only; a PNG with any other (eXIf, tEXt, iTXt, zTXt, tIME,
# private chunks) or with bytes after IEND is written anew.
_PNG_KEPT_CHUNKS = frozenset(
    {b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"iCCP", b"sBIT"}
    | {b"pHYs", b"bKGD"}
)
CONTENT_TYPES = {"image": "image/png", "audio": "audio/mpeg", "video": "video/mp4"}

# Failure codes the server turns into answers (uploads/accept.py).
UNSUPPORTED = "unsupported_media"
UNREADABLE = "media_unreadable"
TOO_LARGE = "media_limit_exceeded"


@dataclass
class Ingested:
    kind: str
    content_type: str
    path: str
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
    video_codec: str | None = None
    audio_codec: str | None = None
    thumbnail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ingest(kind: str, fmt: str, src: Path, out_dir: Path, settings: Settings) -> Ingested:
    """``src`` (sniffed as ``kind``/``fmt``) made into an artifact file in ``out_dir``.
    ``settings`` carries the account's limits as ``max_image_pixels``, ``max_media_seconds``
    and ``max_artifact_bytes``. Raises NodeFailure with one of the codes above."""
    try:
        if kind == "image":
            return _image(fmt, src, out_dir, settings)
        if kind == "audio":
            return _audio(src, out_dir, settings)
        if kind == "video":
            return _video(src, out_dir, settings)
    except NodeFailure as exc:
        if exc.code in (UNSUPPORTED, UNREADABLE, TOO_LARGE):
            raise
        code = TOO_LARGE if exc.code == "limit_exceeded" else UNREADABLE
        raise NodeFailure(exc.message, code) from exc
    raise NodeFailure(f"unknown kind {kind!r}", UNSUPPORTED)


def _out(out_dir: Path, suffix: str) -> Path:
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    return out_dir / f"ingest-{uuid.uuid4().hex}{suffix}"


# ----------------------------------------------------------------------------- images


def _image(fmt: str, src: Path, out_dir: Path, settings: Settings) -> Ingested:
    if fmt == "heif":
        raise NodeFailure("HEIC/HEIF/AVIF images have no decoder on this server", UNSUPPORTED)
    try:
        image = Image.open(src, formats=DECODED_IMAGE_FORMATS)
    except Image.DecompressionBombError as exc:
        raise NodeFailure(f"the image is too large: {exc}", TOO_LARGE) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise NodeFailure("the file is not a readable image", UNREADABLE) from exc
    with image:
        media.check_pixels(settings, *image.size, what="the image")
        try:
            image.load()
        except Image.DecompressionBombError as exc:
            raise NodeFailure(f"the image is too large: {exc}", TOO_LARGE) from exc
        except (OSError, SyntaxError, ValueError) as exc:
            raise NodeFailure(f"the image is damaged or truncated: {exc}", UNREADABLE) from exc
        thumbnail = _thumbnail(image, out_dir)
        if image.format == "PNG" and _only_image_chunks(src):
            return Ingested(
                "image", "image/png", str(src), image.width, image.height, thumbnail=thumbnail
            )
        upright = ImageOps.exif_transpose(image) or image
        produced = media.png_bytes(_displayable(upright), settings)
    path = _out(out_dir, ".png")
    assert produced.data is not None
    path.write_bytes(produced.data)
    return Ingested(
        "image", "image/png", str(path), produced.width, produced.height, thumbnail=thumbnail
    )


def _displayable(image: Image.Image) -> Image.Image:
    """RGB, or RGBA when the image has transparency (CMYK, palette, 16-bit grey... too)."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        image = image.point(lambda v: v / 256).convert("L")
    has_alpha = "A" in image.getbands() or "transparency" in image.info
    return image.convert("RGBA" if has_alpha else "RGB")


def _only_image_chunks(path: Path) -> bool:
    """Whether a PNG holds pixel chunks only and ends at its IEND."""
    with path.open("rb") as handle:
        handle.seek(8)
        while header := handle.read(8):
            if len(header) < 8:
                return False
            length = int.from_bytes(header[:4], "big")
            name = header[4:]
            if name not in _PNG_KEPT_CHUNKS:
                return False
            handle.seek(length + 4, 1)  # data and CRC
            if name == b"IEND":
                return handle.read(1) == b""
    return False


def _thumbnail(image: Image.Image, out_dir: Path) -> str:
    small = _displayable(ImageOps.exif_transpose(image) or image)
    small.thumbnail((THUMBNAIL_SIZE, THUMBNAIL_SIZE))
    path = _out(out_dir, ".png")
    small.save(path, format="PNG", compress_level=6)
    return str(path)


# ----------------------------------------------------------------------------- audio


def _audio(src: Path, out_dir: Path, settings: Settings) -> Ingested:
    format_name, codec, has_video = _streams(src)
    if codec is None:
        if has_video:  # an Ogg with Theora video, say
            return _video(src, out_dir, settings)
        raise NodeFailure("the file has no audio stream", UNREADABLE)
    if format_name == "mp3" and codec == "mp3":
        seconds = media.copyable_mp3_seconds(src, settings, settings.max_media_seconds)
        if seconds is not None:
            return Ingested(
                "audio",
                "audio/mpeg",
                str(src),
                duration_ms=round(seconds * 1000),
                audio_codec="mp3",
            )
    samples = media.decode_audio(src, settings)
    produced = media.encode_mp3(samples, _out(out_dir, ".mp3"), settings)
    assert produced.path is not None
    return Ingested(
        "audio",
        "audio/mpeg",
        str(produced.path),
        duration_ms=produced.duration_ms,
        audio_codec="mp3",
    )


def _streams(src: Path) -> tuple[str, str | None, bool]:
    """(container format, first audio codec or None, whether a video stream is there)."""
    try:
        with av.open(str(src)) as container:
            audio = container.streams.audio
            codec = audio[0].codec_context.codec.canonical_name if audio else None
            video = [
                s
                for s in container.streams.video
                if not s.disposition & av.stream.Disposition.attached_pic
            ]
            return str(container.format.name), codec, bool(video)
    except av.FFmpegError as exc:
        raise NodeFailure(f"the file is not readable media: {exc}", UNREADABLE) from exc


# ----------------------------------------------------------------------------- video


def _video(src: Path, out_dir: Path, settings: Settings) -> Ingested:
    try:
        info = media.probe(src)
        with av.open(str(src)) as container:
            format_names = set(str(container.format.name).split(","))
    except av.FFmpegError as exc:
        raise NodeFailure(f"the file is not readable video: {exc}", UNREADABLE) from exc
    if info.width is None or info.height is None:
        if info.audio_codec is not None:
            return _audio(src, out_dir, settings)  # an M4A sent as MP4, say
        raise NodeFailure("the file has no video stream", UNREADABLE)
    media.check_pixels(settings, info.width, info.height, what="the video")
    if info.duration_ms is not None:
        media.check_seconds(settings, info.duration_ms / 1000, "the video")
    kept = (
        "mp4" in format_names
        and info.video_codec == "h264"
        and info.pix_fmt == "yuv420p"
        and (info.audio_codec is None or info.audio_codec in KEPT_VIDEO_AUDIO)
    )
    path = src
    if not kept:
        produced = transcode(src, _out(out_dir, ".mp4"), settings)
        assert produced.path is not None
        path = produced.path
        info = media.probe(path)
    return Ingested(
        "video",
        "video/mp4",
        str(path),
        info.width,
        info.height,
        info.duration_ms,
        video_codec=info.video_codec,
        audio_codec=info.audio_codec,
        thumbnail=_poster(path, out_dir),
    )


def _poster(path: Path, out_dir: Path) -> str | None:
    """The first frame, as a thumbnail; None when no frame decodes."""
    try:
        with av.open(str(path)) as container:
            for frame in container.decode(video=0):
                return _thumbnail(frame.to_image(), out_dir)  # type: ignore[no-untyped-call]
    except av.FFmpegError as exc:
        raise NodeFailure(f"the video does not decode: {exc}", UNREADABLE) from exc
    raise NodeFailure("the video has no frame that decodes", UNREADABLE)
