"""Shared media helpers for the node catalog.

Every node output is a real file a standard player opens: PNG, MP3 (libmp3lame), MP4 (H.264
``yuv420p`` + AAC or a copied MP3, ``faststart``). The guards live here so each node enforces
the same limits: pixels (decompression bombs, and sizes a node is *asked* to create), media
length and artifact size, each raised as a ``NodeFailure`` the user can read rather than a
crash or an OOM.

Decoding and encoding run in worker threads; ``run_with_progress`` keeps ``node.progress``
flowing from the event loop while they do, and lets a cancelled node stop its worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import math
import queue
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import av
import numpy as np
import numpy.typing as npt
from av.video.frame import PictureType
from PIL import Image, ImageFont

from nodeloom.sdk._node import ArtifactRef, InputValue, NodeContext, NodeFailure, Produced
from nodeloom.sdk.images import (
    IMAGE_FORMATS,
    check_bytes,
    check_pixels,
    color_validator,
    load_image,
    one,
    parse_color,
)
from nodeloom.sdk.images import png as png_bytes
from nodeloom.settings import Settings

# The image helpers are the SDK's (nodeloom.sdk.images); these names stay for our modules.
__all__ = [
    "IMAGE_FORMATS",
    "check_bytes",
    "check_pixels",
    "color_validator",
    "load_image",
    "one",
    "parse_color",
    "png_bytes",
]

T = TypeVar("T")
FloatArray = npt.NDArray[np.float32]

SAMPLE_RATE = 44_100  # every audio path works at this rate, stereo, float32 planar
CHANNELS = 2
# MP3 sample rates that are MPEG-1 Layer III, the kind of MP3 browsers play inside an MP4.
COPYABLE_MP3_RATES = (32_000, 44_100, 48_000)
# A picture that does not change is encoded once per second of video, each frame held for fps
# frame times (``VideoWriter.write``).
STILL_FRAME_SECONDS = 1
# Seconds of video between key frames, where seeking starts decoding; a still repeats itself,
# so its key frames can be further apart.
KEYFRAME_SECONDS = 2
STILL_KEYFRAME_SECONDS = 10
# LAME quality 7: 40% faster than the default at 128 kb/s, no audible loss for speech and
# synthetic tones.
MP3_OPTIONS = {"compression_level": "7"}
MP3_BIT_RATE = 128_000
# Decoders we accept for image inputs: what our own nodes and providers produce. A short list
# keeps Pillow's rarely used (and historically buggy) plugins out of reach of user data.
FONT_FILE = "SourceSansPro-Regular.ttf"  # Latin (incl. extended), Greek and Cyrillic


# ----------------------------------------------------------------------------- limits


def check_seconds(settings: Settings, seconds: float, what: str = "media") -> None:
    if seconds > settings.max_media_seconds:
        raise NodeFailure(
            f"{what} of {seconds:.1f} s exceeds the limit of {settings.max_media_seconds:g} s",
            code="limit_exceeded",
        )


def length_limit(ctx: NodeContext, max_seconds: float) -> float:
    """The longest media a node accepts: its ``max_seconds`` param, within the server's
    limit."""
    return min(max_seconds, ctx.settings.max_media_seconds)


def even(value: int) -> int:
    """H.264 in yuv420p needs even dimensions; round down, never below 2."""
    return max(2, value - value % 2)


# ----------------------------------------------------------------------------- inputs


def optional(inputs: Mapping[str, InputValue], name: str) -> ArtifactRef | None:
    value = inputs.get(name)
    if value is None or isinstance(value, ArtifactRef):
        return value
    return value[0] if value else None


def many(inputs: Mapping[str, InputValue], name: str) -> list[ArtifactRef]:
    value = inputs.get(name)
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def at_least_one(inputs: Mapping[str, InputValue], name: str, what: str) -> list[ArtifactRef]:
    """The artifacts of a ``multiple`` input that needs one: none fails the node."""
    refs = many(inputs, name)
    if not refs:
        raise NodeFailure(f"connect at least one {what}")
    return refs


# ----------------------------------------------------------------------------- images


@functools.lru_cache(maxsize=1)
def font_path() -> Path:
    files = resources.files("font_source_sans_pro") / "files" / FONT_FILE
    path = Path(str(files))
    if not path.is_file():  # pragma: no cover - a broken install
        raise NodeFailure(f"font {FONT_FILE} is missing; reinstall font-source-sans-pro")
    return path


@functools.lru_cache(maxsize=256)
def font(size: int) -> ImageFont.FreeTypeFont:
    """The bundled TTF. Pillow's default font is ASCII-only; this one covers accents and
    Cyrillic. Cached per size: RenderText's fitting search asks for the same sizes often."""
    return ImageFont.truetype(str(font_path()), size=size)


def fit_cover(image: Image.Image, width: int, height: int) -> Image.Image:
    """Scale to cover ``width`` x ``height`` and centre-crop (no distortion, no bars)."""
    scale = max(width / image.width, height / image.height)
    w, h = max(width, round(image.width * scale)), max(height, round(image.height * scale))
    resized = image.resize((w, h), Image.Resampling.LANCZOS)
    left, top = (w - width) // 2, (h - height) // 2
    return resized.crop((left, top, left + width, top + height))


def fit_contain(image: Image.Image, width: int, height: int, background: str) -> Image.Image:
    """Scale to fit inside ``width`` x ``height``, centred on ``background`` (letterbox)."""
    scale = min(width / image.width, height / image.height)
    w, h = max(1, round(image.width * scale)), max(1, round(image.height * scale))
    canvas = Image.new("RGB", (width, height), parse_color(background)[:3])
    resized = image.convert("RGBA").resize((w, h), Image.Resampling.LANCZOS)
    canvas.paste(resized, ((width - w) // 2, (height - h) // 2), resized)
    return canvas


# ----------------------------------------------------------------------------- audio


def decode_audio(path: Path, settings: Settings, max_seconds: float | None = None) -> FloatArray:
    """Decode any audio file to float32 planar stereo at ``SAMPLE_RATE``: shape (2, n).

    The length is checked from the container header first and again while decoding, so a
    file whose header lies cannot make us hold more than the limit in memory.
    """
    limit = settings.max_media_seconds if max_seconds is None else max_seconds
    with _open_audio(path, settings) as container:
        resampler = av.AudioResampler(format="fltp", layout="stereo", rate=SAMPLE_RATE)
        chunks: list[FloatArray] = []
        total = 0
        max_samples = math.ceil(limit * SAMPLE_RATE) + SAMPLE_RATE
        try:
            for frame in container.decode(audio=0):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().astype(np.float32, copy=False))
                    total += out.samples
                if total > max_samples:
                    check_seconds(settings, total / SAMPLE_RATE, "input audio")
                    raise NodeFailure(f"input audio is longer than {limit:g} s")
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().astype(np.float32, copy=False))
        except av.FFmpegError as exc:
            raise NodeFailure(f"input audio is damaged: {exc}") from exc
    if not chunks:
        return np.zeros((CHANNELS, 0), dtype=np.float32)
    samples = np.concatenate(chunks, axis=1)
    _check_decoded_length(samples.shape[1] / SAMPLE_RATE, limit)
    return samples


@contextlib.contextmanager
def _open_audio(path: Path, settings: Settings) -> Iterator[Any]:
    """An audio input opened for decoding, its header's length already checked."""
    try:
        container = av.open(str(path))
    except av.FFmpegError as exc:
        raise NodeFailure(f"input is not readable audio: {exc}") from exc
    with container:
        if not container.streams.audio:
            raise NodeFailure("input has no audio stream")
        if container.duration is not None:
            check_seconds(settings, container.duration / av.time_base, "input audio")
        yield container


def _check_decoded_length(seconds: float, limit: float) -> None:
    # Decoding loops allow a second of slack (codec padding); the limit itself is exact
    # to 50 ms.
    if seconds > limit + 0.05:
        raise NodeFailure(f"input audio of {seconds:.1f} s is longer than {limit:g} s")


def copyable_mp3_seconds(path: Path, settings: Settings, max_seconds: float) -> float | None:
    """The length of an MP3 input that can go into an MP4 as it is (``VideoWriter``'s
    ``audio_copy``), or None when it cannot and must be re-encoded.

    MP3 inside MP4 plays in every common browser when it is MPEG-1 Layer III (32, 44.1 or
    48 kHz, mono or stereo): our own nodes always write that. The whole stream is
    decoded (without resampling, so cheaply) to measure it exactly and to refuse a damaged
    one, as ``decode_audio`` would.
    """
    with _open_audio(path, settings) as container:
        stream = container.streams.audio[0]
        codec = stream.codec_context
        if (
            codec.codec.canonical_name != "mp3"
            or codec.sample_rate not in COPYABLE_MP3_RATES
            or codec.layout.nb_channels > CHANNELS
        ):
            return None
        rate: int = codec.sample_rate
        max_samples = math.ceil(max_seconds * rate) + rate
        total = 0
        try:
            for frame in container.decode(stream):
                total += frame.samples
                if total > max_samples:
                    check_seconds(settings, total / rate, "input audio")
                    raise NodeFailure(f"input audio is longer than {max_seconds:g} s")
        except av.FFmpegError as exc:
            raise NodeFailure(f"input audio is damaged: {exc}") from exc
    _check_decoded_length(total / rate, max_seconds)
    return total / rate


def _copied_packets(container: Any) -> Iterator[Any]:
    """The packets of an MP3's audio stream, retimed so its first decoded sample is at 0.

    The MP3 demuxer starts packets at 0 and reports the encoder delay (~25 ms) as the stream's
    start time; shifting the packets back makes the MP4 muxer write it as an edit list, which
    players honour, so the sound starts with the picture as it did when it was re-encoded.
    """
    stream = container.streams.audio[0]
    start = stream.start_time or 0
    for packet in container.demux(stream):
        if packet.pts is None or packet.size == 0:
            continue  # the demuxer's end-of-stream marker
        packet.pts -= start
        packet.dts = packet.pts  # audio has no reordering
        yield packet


def audio_frames(samples: FloatArray, frame_size: int, start_pts: int = 0) -> Iterator[Any]:
    """Cut float32 planar stereo into ``av.AudioFrame`` objects of ``frame_size`` samples."""
    n = samples.shape[1]
    for offset in range(0, n, frame_size):
        chunk = np.ascontiguousarray(samples[:, offset : offset + frame_size])
        frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout="stereo")
        frame.sample_rate = SAMPLE_RATE
        frame.pts = start_pts + offset
        yield frame


def encode_mp3(
    samples: FloatArray, path: Path, settings: Settings, cuts: Sequence[int] = ()
) -> Produced:
    """Write MP3 (libmp3lame, 44.1 kHz stereo, 128 kb/s) and measure what was written.

    With ``cuts`` (sample offsets) the pieces between them are encoded at the same time, each
    by its own LAME encoder on its own thread (LAME is sequential, and a minute of it costs
    about two seconds of CPU), and written one after the other. Every encoder starts its
    stream afresh, so the joined stream decodes straight through; each join adds the two
    encoders' padding (under 60 ms), silent when the cut is (``speech.quiet_cuts``).
    """
    seconds = samples.shape[1] / SAMPLE_RATE
    check_seconds(settings, seconds, "audio")
    np.clip(samples, -1.0, 1.0, out=samples)
    pieces = [piece for piece in np.split(samples, list(cuts), axis=1) if piece.shape[1]]
    with av.open(str(path), "w", format="mp3") as out:
        stream = out.add_stream(
            "libmp3lame", rate=SAMPLE_RATE, layout="stereo", options=dict(MP3_OPTIONS)
        )
        stream.bit_rate = MP3_BIT_RATE
        out.start_encoding()
        # Opened here, one after the other: FFmpeg does not promise that opening codecs of
        # an external library from several threads at once is safe; encoding with separate
        # LAME instances is.
        helpers = [_mp3_encoder() for _ in pieces[1:]]
        with ThreadPoolExecutor(max_workers=max(1, len(helpers))) as pool:
            later = [
                pool.submit(_encoded, encoder, piece)
                for encoder, piece in zip(helpers, pieces[1:], strict=True)
            ]
            first = _encoded(stream.codec_context, pieces[0]) if pieces else []
            _mux_one_after_another(out, stream, [first, *(f.result() for f in later)])
    check_bytes(settings, path.stat().st_size, "audio")
    return Produced(path=path, duration_ms=probe(path).duration_ms)


def _mp3_encoder() -> Any:
    encoder = av.CodecContext.create("libmp3lame", "w")
    encoder.sample_rate, encoder.layout, encoder.format = SAMPLE_RATE, "stereo", "fltp"
    encoder.bit_rate = MP3_BIT_RATE
    encoder.options = dict(MP3_OPTIONS)
    encoder.open()
    return encoder


def _encoded(encoder: Any, samples: FloatArray) -> list[Any]:
    packets: list[Any] = []
    for frame in audio_frames(samples, encoder.frame_size or 1152):
        packets.extend(encoder.encode(frame))
    packets.extend(encoder.encode(None))
    return packets


def _mux_one_after_another(out: Any, stream: Any, pieces: list[list[Any]]) -> None:
    """Mux the packets of separately encoded pieces into one stream, each piece's timestamps
    moved to start where the previous one ended (every encoder starts its own at 0)."""
    end: int | None = None
    for packets in pieces:
        if not packets:
            continue
        shift = 0 if end is None else end - packets[0].pts
        for packet in packets:
            packet.pts += shift
            packet.dts = packet.pts
            packet.stream = stream
            out.mux(packet)
        end = packets[-1].pts + packets[-1].duration


# ----------------------------------------------------------------------------- probing


@dataclass(frozen=True)
class Probe:
    width: int | None
    height: int | None
    duration_ms: int | None
    video_codec: str | None = None
    pix_fmt: str | None = None
    audio_codec: str | None = None


def probe(path: Path) -> Probe:
    """Dimensions and length read back from an encoded file (metadata is measured, not
    assumed from params)."""
    with av.open(str(path)) as container:
        width = height = None
        vcodec = pix_fmt = acodec = None
        if container.streams.video:
            v = container.streams.video[0]
            width, height = v.codec_context.width, v.codec_context.height
            vcodec, pix_fmt = v.codec_context.codec.canonical_name, v.codec_context.pix_fmt
        if container.streams.audio:
            acodec = container.streams.audio[0].codec_context.codec.canonical_name
        duration = None
        if container.duration is not None:
            duration = round(container.duration / av.time_base * 1000)
        return Probe(width, height, duration, vcodec, pix_fmt, acodec)


# ----------------------------------------------------------------------------- video


class VideoWriter:
    """H.264 (libx264, yuv420p, even size) + optional sound in an MP4 with ``faststart`` (the
    index up front, so browsers start playing before the whole file arrives).

    Time counts in frame times (1/fps). ``write(frame, ticks)`` shows a frame for ``ticks`` of
    them: an MP4 gives every frame its own duration and players show a frame until the next,
    so a picture that does not change needs one encode, not one per frame time. A writer that
    is given such frames says so (``still`` for a picture that never changes, ``held`` for
    frames of any kind that may last longer than one frame time).

    Sound is either samples (``audio``), encoded to AAC by a helper thread while the frames
    are encoded here (PyAV releases the GIL inside codecs, so the two use both cores), or an
    MP3 file (``audio_copy``, see ``copyable_mp3_seconds``) whose packets are copied as they
    are. Either way its packets are muxed in time order between the frames, so the file is
    interleaved.
    """

    def __init__(
        self,
        path: Path,
        width: int,
        height: int,
        fps: int,
        *,
        audio: FloatArray | None = None,
        audio_copy: Path | None = None,
        still: bool = False,
        held: bool = False,
    ) -> None:
        if width % 2 or height % 2:
            raise ValueError("H.264 yuv420p needs even dimensions")
        if audio is not None and audio_copy is not None:
            raise ValueError("give the sound as samples or as a file to copy, not both")
        self.path = path
        self.width, self.height, self.fps = width, height, fps
        self.frames = 0  # frame times written: a frame held for n of them counts n
        self._durations: dict[int, int] = {}  # pts -> ticks, for packets the encoder returns
        self._out = av.open(str(path), "w", format="mp4", options={"movflags": "+faststart"})
        # A still costs nearly nothing per P-frame, so "ultrafast" is 2x quicker than
        # "veryfast" for a slightly larger file, and one x264 thread is as fast as several
        # (leaving the other core to the audio); moving pictures get the better preset.
        options = {"preset": "ultrafast", "threads": "1"} if still else {"preset": "veryfast"}
        self._video = self._out.add_stream("libx264", rate=fps, options={**options, "crf": "23"})
        self._video.width, self._video.height = width, height
        self._video.pix_fmt = "yuv420p"
        self._held = still or held
        if self._held:
            # x264 gives a B-frame stream decode timestamps that trail the frames by a frame
            # count; with frames held for seconds the MP4's decoding timeline would then end
            # seconds before the last frame is due. Without B-frames decode order is display
            # order and every frame's duration is its own.
            self._video.codec_context.max_b_frames = 0
        # x264 counts key frame intervals in frames; ``write`` also forces one by time,
        # since a held frame can last many frame times.
        key_seconds = STILL_KEYFRAME_SECONDS if still else KEYFRAME_SECONDS
        self._key_ticks = fps * key_seconds
        self._next_key = 0
        self._video.codec_context.gop_size = self._key_ticks
        self._packets: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: Any = None
        self._audio_done = audio is None and audio_copy is None
        self._stop = threading.Event()
        self._audio_thread: threading.Thread | None = None
        if audio_copy is not None:
            self._queue_copied_audio(audio_copy)
        elif audio is not None:
            self._start_audio_encoder(audio)

    def _queue_copied_audio(self, source: Path) -> None:
        with av.open(str(source)) as container:
            self._audio = self._out.add_stream_from_template(container.streams.audio[0])
            for packet in _copied_packets(container):
                packet.stream = self._audio
                self._packets.put(packet)
        self._packets.put(None)

    def _start_audio_encoder(self, samples: FloatArray) -> None:
        self._audio = self._out.add_stream("aac", rate=SAMPLE_RATE, layout="stereo")
        self._audio.bit_rate = 128_000
        # Open every codec and write the header now, before the helper thread touches the
        # audio encoder, so the two threads never open anything concurrently.
        self._out.start_encoding()
        self._audio_thread = threading.Thread(
            target=self._encode_audio, args=(samples,), name="aac-encoder", daemon=True
        )
        self._audio_thread.start()

    def _encode_audio(self, samples: FloatArray) -> None:
        try:
            for frame in audio_frames(samples, self._audio.codec_context.frame_size or 1024):
                if self._stop.is_set():
                    return
                for packet in self._audio.encode(frame):
                    self._packets.put(packet)
            for packet in self._audio.encode(None):
                self._packets.put(packet)
        except Exception as exc:  # handed to the muxing thread, which raises it
            self._packets.put(exc)
        finally:
            self._packets.put(None)

    def frame_from_image(self, image: Image.Image) -> Any:
        """Convert once to yuv420p; a still can then be encoded many times cheaply."""
        if image.size != (self.width, self.height):
            image = image.resize((self.width, self.height), Image.Resampling.BILINEAR)
        frame = av.VideoFrame.from_image(image.convert("RGB"))  # type: ignore[no-untyped-call]
        return frame.reformat(format="yuv420p")

    def write(self, frame: Any, ticks: int = 1) -> None:
        """Encode ``frame`` to be shown for ``ticks`` frame times."""
        if ticks < 1:
            raise ValueError("a frame lasts at least one frame time")
        if ticks > 1 and not self._held:
            raise ValueError("frames held longer need VideoWriter(still=True) or (held=True)")
        frame.pts = self.frames
        frame.pict_type = PictureType.NONE  # a decoded frame's own type must not carry over
        if self.frames >= self._next_key:
            frame.pict_type = PictureType.I
            self._next_key = self.frames + self._key_ticks
        self._durations[self.frames] = ticks
        self.frames += ticks
        self._mux_video(self._video.encode(frame))
        self._push_audio(self.frames / self.fps)

    def write_image(self, image: Image.Image) -> None:
        self.write(self.frame_from_image(image))

    def _mux_video(self, packets: list[Any]) -> None:
        for packet in packets:
            # The encoder does not carry durations through; the MP4 needs the last one (the
            # track would end where the last frame starts) and players use them all.
            packet.duration = self._durations.pop(packet.pts, 1)
            self._out.mux(packet)

    def _push_audio(self, until_seconds: float | None) -> None:
        """Mux audio packets up to ``until_seconds`` (all of them for None)."""
        while not self._audio_done:
            if self._pending is None:
                item = self._packets.get()
                if item is None:
                    self._audio_done = True
                    return
                if isinstance(item, Exception):
                    raise NodeFailure(f"audio encoding failed: {item}") from item
                self._pending = item
            packet = self._pending
            if until_seconds is not None and packet.pts is not None:
                if float(packet.pts * packet.time_base) > until_seconds:
                    return
            self._out.mux(packet)
            self._pending = None

    def close(self) -> None:
        self._mux_video(self._video.encode(None))
        self._push_audio(None)
        if self._audio_thread is not None:
            self._audio_thread.join()
        self._out.close()

    def abort(self) -> None:
        self._stop.set()
        if self._audio_thread is not None:
            self._audio_thread.join()
        with contextlib.suppress(Exception):
            self._out.close()

    def produced(self, settings: Settings) -> Produced:
        check_bytes(settings, self.path.stat().st_size, "video")
        info = probe(self.path)
        return Produced(
            path=self.path, width=info.width, height=info.height, duration_ms=info.duration_ms
        )


def fit_audio(samples: FloatArray, n: int) -> FloatArray:
    """Trim or pad with silence to exactly ``n`` samples."""
    if samples.shape[1] >= n:
        return samples[:, :n]
    pad = np.zeros((CHANNELS, n - samples.shape[1]), dtype=np.float32)
    return np.concatenate([samples, pad], axis=1)


# ----------------------------------------------------------------------------- progress


class Cancelled(Exception):
    """Raised inside a worker thread when its node was cancelled."""


@dataclass
class Progress:
    """Shared between a worker thread (writes ``fraction``, reads ``cancelled``) and the event
    loop (reports ``fraction``). Plain attribute writes are atomic under the GIL."""

    fraction: float = 0.0
    cancelled: bool = False

    def update(self, fraction: float) -> None:
        if self.cancelled:
            raise Cancelled
        self.fraction = min(1.0, max(self.fraction, fraction))


PROGRESS_INTERVAL = 0.5  # seconds; the spec wants at least one report per second


async def run_with_progress(ctx: NodeContext, fn: Callable[..., T], /, *args: Any) -> T:
    """Run ``fn(progress, *args)`` via ``ctx.to_thread`` and report its progress every half
    second. If the node is cancelled the worker sees ``progress.cancelled`` at its next update
    and stops, so an abandoned encode does not keep a core busy."""
    progress = Progress()
    work = asyncio.ensure_future(ctx.to_thread(fn, progress, *args))
    try:
        while True:
            done, _ = await asyncio.wait({work}, timeout=PROGRESS_INTERVAL)
            if done:
                break
            await ctx.progress(progress.fraction)
        result = work.result()
    except BaseException:
        progress.cancelled = True  # the worker stops at its next progress update
        work.cancel()  # and its eventual result is not reported as never retrieved
        raise
    await ctx.progress(1.0)
    return result


def scratch_file(ctx: NodeContext, suffix: str) -> Path:
    ctx.scratch_dir.mkdir(parents=True, exist_ok=True)
    return ctx.scratch_dir / f"{uuid.uuid4().hex}{suffix}"


# ----------------------------------------------------------------------------- local running


@dataclass
class LocalContext:
    """A real, minimal ``NodeContext`` for running nodes outside the executor (tests, bench,
    scripts): progress is recorded, blocking work goes to ``asyncio.to_thread``."""

    settings: Settings
    scratch_dir: Path
    input: Mapping[str, Any] | None = None
    run_id: str = "local-run"
    node_id: str = "local-node"
    account_id: str = "local-account"
    credential_kind: str | None = None
    reports: list[float] = field(default_factory=list)

    async def progress(self, fraction: float) -> None:
        self.reports.append(fraction)

    async def to_thread(self, fn: Callable[..., T], /, *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)


def store_locally(produced: Produced, content_type: str, directory: Path) -> ArtifactRef:
    """Turn a node's ``Produced`` into an ``ArtifactRef`` as the executor would (a file with a
    hash), so outputs can feed the next node outside the real artifact store."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / uuid.uuid4().hex
    if produced.path is not None:
        produced.path.replace(target)
    else:
        assert produced.data is not None
        target.write_bytes(produced.data)
    data = target.read_bytes()
    return ArtifactRef(
        artifact_id=target.name,
        content_type=content_type,
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        path=target,
        width=produced.width,
        height=produced.height,
        duration_ms=produced.duration_ms,
    )
