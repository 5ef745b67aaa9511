"""Video nodes: still + audio, slideshow, Ken Burns, concat, add audio, burnt-in caption.

All output is MP4 with H.264 (libx264, yuv420p, even size, faststart) and, when there is
sound, AAC or an MP3 input copied as it is (``ImageAudioToVideo``), written to a file in the
node's scratch directory (``Produced(path=...)``). Encoding runs in a worker thread through
``media.run_with_progress``; loops update the fraction.
Lengths that depend on upstream media are bounded for pricing by the ``max_seconds`` param.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import av
import numpy as np
from PIL import Image
from pydantic import Field

from nodeloom.nodes import media
from nodeloom.nodes.image import Color, Side, caption_overlay
from nodeloom.sdk._node import (
    ArtifactRef,
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeType,
    Params,
    Produced,
    input_text,
    spec_family,
)
from nodeloom.settings import Settings

Fps = Annotated[int, Field(ge=1, le=60)]
MaxSeconds = Annotated[float, Field(gt=0, le=600)]
SR = media.SAMPLE_RATE


_spec = spec_family("video", Kind.VIDEO, Cost(credits=2, per_second=1))


def _even_image(image: Image.Image) -> Image.Image:
    """Drop a trailing odd row/column: H.264 in yuv420p needs even dimensions."""
    w, h = media.even(image.width), media.even(image.height)
    return image if (w, h) == image.size else image.crop((0, 0, w, h))


def _frames_needed(seconds: float, fps: int) -> int:
    return max(1, math.ceil(seconds * fps - 1e-6))


def _still_frames(total: int, fps: int) -> Iterator[tuple[int, int]]:
    """(first frame time, frame times held) of a still shown for ``total`` frame times: one
    encoded frame per ``media.STILL_FRAME_SECONDS`` instead of ``fps`` a second. Seeking
    lands on a frame at most that far back, which shows the same picture."""
    step = fps * media.STILL_FRAME_SECONDS
    for start in range(0, total, step):
        yield start, min(step, total - start)


class _Repeats:
    """A frame repeated on consecutive frame times, written once it changes as one held
    frame (``_still_frames``: a frame a second) instead of one encode per frame time."""

    def __init__(self, out: media.VideoWriter) -> None:
        self.out = out
        self.frame: Any = None
        self.ticks = 0

    def add(self, frame: Any) -> None:
        if frame is not self.frame:
            self.flush()
            self.frame = frame
        self.ticks += 1

    def flush(self) -> None:
        if self.frame is not None:
            for _, ticks in _still_frames(self.ticks, self.out.fps):
                self.out.write(self.frame, ticks)
        self.frame, self.ticks = None, 0


@dataclass
class _Soundtrack:
    """The audio input of a video: an MP3 copied into the MP4 as it is when it fits (no
    decode/re-encode round trip: AAC encoding a minute of speech costs seconds of CPU),
    else its samples, to be encoded to AAC."""

    seconds: float
    copy: Path | None = None
    samples: media.FloatArray | None = None

    @classmethod
    def read(cls, ref: ArtifactRef, settings: Settings, limit: float) -> _Soundtrack:
        seconds = media.copyable_mp3_seconds(ref.path, settings, limit)
        if seconds is not None:
            sound = cls(seconds, copy=ref.path)
        else:
            samples = media.decode_audio(ref.path, settings, limit)
            sound = cls(samples.shape[1] / SR, samples=samples)
        if sound.seconds <= 0:
            raise NodeFailure("the audio input is empty")
        return sound

    def writer_args(self) -> dict[str, Any]:
        return {"audio": self.samples, "audio_copy": self.copy}


@contextmanager
def _writing(path: Path, *args: Any, **kwargs: Any) -> Iterator[media.VideoWriter]:
    writer = media.VideoWriter(path, *args, **kwargs)
    try:
        yield writer
    except BaseException:
        writer.abort()
        raise
    writer.close()


# ----------------------------------------------------------------------------- decoding


@dataclass
class VideoSource:
    """A checked video input: size, length and sound are known up front; frames are decoded
    one at a time by ``frames`` so a long input never sits in memory whole."""

    ref: ArtifactRef
    width: int
    height: int
    seconds: float
    audio: media.FloatArray | None

    def frame_count(self, fps: int) -> int:
        return _frames_needed(self.seconds, fps)

    def held_frames(self, fps: int, size: tuple[int, int]) -> Iterator[tuple[Image.Image, int]]:
        """The clip's frames fitted to ``size``, each with the frame times (1/fps) it stays on
        screen, for ``VideoWriter.write``. Any source rate works: a frame shows from the
        first frame time at or after its timestamp; one replaced before that time is dropped.
        A held still stays one frame, so a still clip is not re-encoded ``fps`` times a
        second."""
        total = self.frame_count(fps)
        current: Image.Image | None = None
        shown_at = 0  # the frame time from which ``current`` shows
        with av.open(str(self.ref.path)) as container:
            try:
                for frame in container.decode(video=0):
                    starts = max(0, math.ceil(float(frame.time or 0.0) * fps - 1e-6))
                    if starts >= total:
                        break
                    if current is not None and starts > shown_at:
                        yield current, starts - shown_at
                        shown_at = starts
                    image = frame.to_image()  # type: ignore[no-untyped-call]
                    current = (
                        image if image.size == size else media.fit_contain(image, *size, "#000")
                    )
            except av.FFmpegError as exc:
                raise NodeFailure(f"input video is damaged: {exc}") from exc
        if current is None:
            raise NodeFailure("input video has no frames")
        yield current, total - shown_at


def open_video(ref: ArtifactRef, settings: Settings, limit: float) -> VideoSource:
    """Check a video input's frame size and length from its headers before decoding it."""
    try:
        container = av.open(str(ref.path))
    except av.FFmpegError as exc:
        raise NodeFailure(f"input is not a readable video: {exc}") from exc
    with container:
        if not container.streams.video:
            raise NodeFailure("input has no video stream")
        context = container.streams.video[0].codec_context
        width, height = context.width, context.height
        media.check_pixels(settings, width, height, "input video frame")
        if container.duration is None:
            raise NodeFailure("input video has no known duration")
        seconds = container.duration / av.time_base
        has_audio = bool(container.streams.audio)
    media.check_seconds(settings, seconds, "input video")
    if seconds > limit:
        raise NodeFailure(f"the input video is longer than max_seconds ({limit:g} s)")
    audio = None
    if has_audio:
        audio = media.fit_audio(media.decode_audio(ref.path, settings), round(seconds * SR))
    return VideoSource(ref, media.even(width), media.even(height), seconds, audio)


# ----------------------------------------------------------------------------- nodes


class ImageAudioToVideoParams(Params):
    fps: Fps = Field(default=25, description="Frames per second.")
    max_seconds: MaxSeconds = Field(
        default=120, description="Longest audio accepted (bounds the price)."
    )


class ImageAudioToVideo(NodeType):
    spec = _spec(
        "ImageAudioToVideo",
        "Image + audio to video",
        "Show a still image for the length of the audio: an MP4 (H.264 + the MP3 copied "
        "as it is, or AAC).",
        ImageAudioToVideoParams,
        Input("image", Kind.IMAGE),
        Input("audio", Kind.AUDIO),
    )

    async def run(
        self, ctx: NodeContext, params: ImageAudioToVideoParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        image_ref, audio_ref = media.one(inputs, "image"), media.one(inputs, "audio")
        limit = media.length_limit(ctx, params.max_seconds)
        path = media.scratch_file(ctx, ".mp4")

        def work(progress: media.Progress) -> Produced:
            image = _even_image(media.load_image(image_ref, ctx.settings).convert("RGB"))
            sound = _Soundtrack.read(audio_ref, ctx.settings, limit)
            progress.update(0.1)
            total = _frames_needed(sound.seconds, params.fps)
            size = (image.width, image.height)
            with _writing(path, *size, params.fps, **sound.writer_args(), still=True) as out:
                frame = out.frame_from_image(image)
                for start, ticks in _still_frames(total, params.fps):
                    out.write(frame, ticks)
                    progress.update(0.1 + 0.85 * start / total)
            return out.produced(ctx.settings)

        return await media.run_with_progress(ctx, work)


class SlideshowParams(Params):
    seconds_per_slide: Annotated[float, Field(gt=0, le=60)] = Field(
        default=3, description="How long each image shows."
    )
    durations: list[Annotated[float, Field(gt=0, le=60)]] = Field(
        default_factory=list,
        max_length=500,
        description="Per-slide durations in edge order; slides beyond the list use "
        "seconds_per_slide.",
    )
    width: Side = Field(default=1280, description="Video width (rounded down to even).")
    height: Side = Field(default=720, description="Video height (rounded down to even).")
    fps: Fps = Field(default=25, description="Frames per second.")
    fit: Literal["cover", "contain"] = Field(default="cover", description="How images fill.")
    crossfade: Annotated[float, Field(ge=0, le=5)] = Field(
        default=0.5, description="Cross-fade between slides, seconds (0: hard cut)."
    )
    max_seconds: MaxSeconds = Field(default=120, description="Longest video (bounds the price).")


class Slideshow(NodeType):
    spec = _spec(
        "Slideshow",
        "Slideshow",
        "Images in edge order, each for its duration, with cross-fades and an optional "
        "soundtrack (trimmed or padded to the slides).",
        SlideshowParams,
        Input("images", Kind.IMAGE, multiple=True),
        Input("audio", Kind.AUDIO, required=False),
    )

    async def run(
        self, ctx: NodeContext, params: SlideshowParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        refs = media.at_least_one(inputs, "images", "image")
        durations = [
            params.durations[i] if i < len(params.durations) else params.seconds_per_slide
            for i in range(len(refs))
        ]
        seconds = sum(durations)
        if seconds > media.length_limit(ctx, params.max_seconds):
            raise NodeFailure(f"the slideshow lasts {seconds:g} s, more than max_seconds")
        width, height = media.even(params.width), media.even(params.height)
        media.check_pixels(ctx.settings, width, height, "video frame")
        audio_ref = media.optional(inputs, "audio")
        path = media.scratch_file(ctx, ".mp4")

        def slide(ref: ArtifactRef) -> Image.Image:
            image = media.load_image(ref, ctx.settings)
            if params.fit == "cover":
                return media.fit_cover(image.convert("RGB"), width, height)
            return media.fit_contain(image, width, height, "#000000")

        def work(progress: media.Progress) -> Produced:
            audio = None
            if audio_ref is not None:
                clip = media.decode_audio(audio_ref.path, ctx.settings)
                audio = media.fit_audio(clip, round(seconds * SR))
            fps = params.fps
            total = _frames_needed(seconds, fps)
            with _writing(path, width, height, fps, audio=audio, held=True) as out:
                current, nxt = slide(refs[0]), None
                start, index = 0.0, 0
                frame = out.frame_from_image(current)
                repeats = _Repeats(out)
                for n in range(total):
                    t = n / fps
                    while index < len(refs) - 1 and t >= start + durations[index]:
                        start += durations[index]
                        index += 1
                        current, nxt = nxt or slide(refs[index]), None
                        frame = out.frame_from_image(current)
                    fade_at = start + durations[index] - params.crossfade
                    if index < len(refs) - 1 and params.crossfade > 0 and t >= fade_at:
                        nxt = nxt or slide(refs[index + 1])
                        alpha = min(1.0, (t - fade_at) / params.crossfade)
                        repeats.flush()
                        out.write_image(Image.blend(current, nxt, alpha))
                    else:
                        repeats.add(frame)
                    if n % fps == 0:
                        progress.update(n / total)
                repeats.flush()
            return out.produced(ctx.settings)

        return await media.run_with_progress(ctx, work)


class KenBurnsParams(Params):
    seconds: Annotated[float, Field(gt=0, le=600)] = Field(default=5, description="Length.")
    width: Side = Field(default=1280, description="Video width (rounded down to even).")
    height: Side = Field(default=720, description="Video height (rounded down to even).")
    fps: Fps = Field(default=25, description="Frames per second.")
    zoom_start: Annotated[float, Field(ge=1, le=4)] = Field(default=1.0, description="Zoom at 0 s.")
    zoom_end: Annotated[float, Field(ge=1, le=4)] = Field(default=1.25, description="Zoom at end.")
    pan: Literal["none", "left", "right", "up", "down"] = Field(
        default="none", description="Direction the view drifts."
    )


def ken_burns_box(
    size: tuple[int, int], zoom: float, pan: str, t: float
) -> tuple[float, float, float, float]:
    """The source window for one frame: ``1/zoom`` of the image, drifting across the slack."""
    sw, sh = size
    w, h = sw / zoom, sh / zoom
    fx = {"left": 1 - t, "right": t}.get(pan, 0.5)
    fy = {"up": 1 - t, "down": t}.get(pan, 0.5)
    left, top = (sw - w) * fx, (sh - h) * fy
    return (left, top, left + w, top + h)


class KenBurns(NodeType):
    spec = _spec(
        "KenBurns",
        "Ken Burns pan and zoom",
        "Animate a still image with a slow zoom and optional pan.",
        KenBurnsParams,
        Input("image", Kind.IMAGE),
    )

    def estimate_seconds(self, params: KenBurnsParams) -> float:
        return params.seconds

    async def run(
        self, ctx: NodeContext, params: KenBurnsParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        media.check_seconds(ctx.settings, params.seconds, "video")
        width, height = media.even(params.width), media.even(params.height)
        media.check_pixels(ctx.settings, width, height, "video frame")
        ref = media.one(inputs, "image")
        path = media.scratch_file(ctx, ".mp4")

        def work(progress: media.Progress) -> Produced:
            image = media.load_image(ref, ctx.settings).convert("RGB")
            # Crop the source to the output's aspect once; frames are windows into it.
            scale = min(image.width / width, image.height / height)
            source = media.fit_cover(image, round(width * scale), round(height * scale))
            total = _frames_needed(params.seconds, params.fps)
            with _writing(path, width, height, params.fps) as out:
                for n in range(total):
                    t = n / max(1, total - 1)
                    zoom = params.zoom_start + (params.zoom_end - params.zoom_start) * t
                    box = ken_burns_box(source.size, zoom, params.pan, t)
                    frame = source.resize((width, height), Image.Resampling.BILINEAR, box=box)
                    out.write_image(frame)
                    if n % params.fps == 0:
                        progress.update(n / total)
            return out.produced(ctx.settings)

        return await media.run_with_progress(ctx, work)


class VideoConcatParams(Params):
    fps: Fps = Field(default=25, description="Frames per second of the result.")
    max_seconds: MaxSeconds = Field(default=120, description="Longest result (bounds the price).")


class VideoConcat(NodeType):
    spec = _spec(
        "VideoConcat",
        "Concatenate videos",
        "Join videos end to end in edge order; later clips are fitted to the first one's size. "
        "Sound is kept (silence where a clip has none).",
        VideoConcatParams,
        Input("videos", Kind.VIDEO, multiple=True),
    )

    async def run(
        self, ctx: NodeContext, params: VideoConcatParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        refs = media.at_least_one(inputs, "videos", "video")
        limit = media.length_limit(ctx, params.max_seconds)
        path = media.scratch_file(ctx, ".mp4")

        def work(progress: media.Progress) -> Produced:
            clips = [open_video(ref, ctx.settings, limit) for ref in refs]
            size = (clips[0].width, clips[0].height)
            counts = [c.frame_count(params.fps) for c in clips]
            total = sum(counts)
            if total / params.fps > limit:
                raise NodeFailure(f"the joined video is longer than max_seconds ({limit:g} s)")
            audio = None
            if any(c.audio is not None for c in clips):
                silent = np.zeros((media.CHANNELS, 0), np.float32)
                audio = np.concatenate(
                    [
                        media.fit_audio(
                            c.audio if c.audio is not None else silent, round(n / params.fps * SR)
                        )
                        for c, n in zip(clips, counts, strict=True)
                    ],
                    axis=1,
                )
            progress.update(0.1)
            with _writing(path, *size, params.fps, audio=audio, held=True) as out:
                for clip in clips:
                    for image, ticks in clip.held_frames(params.fps, size):
                        out.write(out.frame_from_image(image), ticks)
                        progress.update(0.1 + 0.9 * out.frames / total)
            return out.produced(ctx.settings)

        return await media.run_with_progress(ctx, work)


class VideoAudioParams(Params):
    mode: Literal["replace", "mix"] = Field(
        default="replace", description="replace the video's sound, or mix the new audio in."
    )
    volume: Annotated[float, Field(ge=0, le=4)] = Field(default=1.0, description="New audio gain.")
    fps: Fps = Field(default=25, description="Frames per second of the result.")
    max_seconds: MaxSeconds = Field(default=120, description="Longest video (bounds the price).")


class VideoAddAudio(NodeType):
    spec = _spec(
        "VideoAddAudio",
        "Add or replace audio",
        "Put an audio track on a video (replace or mix), trimmed or padded to the video.",
        VideoAudioParams,
        Input("video", Kind.VIDEO),
        Input("audio", Kind.AUDIO),
    )

    async def run(
        self, ctx: NodeContext, params: VideoAudioParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        video_ref, audio_ref = media.one(inputs, "video"), media.one(inputs, "audio")
        limit = media.length_limit(ctx, params.max_seconds)
        path = media.scratch_file(ctx, ".mp4")

        def work(progress: media.Progress) -> Produced:
            clip = open_video(video_ref, ctx.settings, limit)
            count = clip.frame_count(params.fps)
            n = round(count / params.fps * SR)
            audio = media.fit_audio(media.decode_audio(audio_ref.path, ctx.settings), n)
            audio = audio * np.float32(params.volume)
            if params.mode == "mix" and clip.audio is not None:
                audio = audio + media.fit_audio(clip.audio, n)
            size = (clip.width, clip.height)
            with _writing(path, *size, params.fps, audio=audio, held=True) as out:
                for image, ticks in clip.held_frames(params.fps, size):
                    out.write(out.frame_from_image(image), ticks)
                    progress.update(out.frames / count)
            return out.produced(ctx.settings)

        return await media.run_with_progress(ctx, work)


class VideoCaptionParams(Params):
    position: Literal["top", "center", "bottom"] = Field(default="bottom", description="Where.")
    color: Color = Field(default="#ffffff", description="Text colour.")
    band: Color = Field(default="#000000a0", description="Colour of the bar behind the text.")
    fps: Fps = Field(default=25, description="Frames per second of the result.")
    max_seconds: MaxSeconds = Field(default=120, description="Longest video (bounds the price).")


CAPTION_HEIGHT = 0.3  # of the frame, at most, for one caption's band


def _write_captioned(
    out: media.VideoWriter,
    image: Image.Image,
    ticks: int,
    shown_at: Callable[[float], int | None],
    layer: Callable[[int], Image.Image],
) -> None:
    """A source frame held for ``ticks`` frame times, with the caption shown at each one
    (``shown_at``: its index, or None), written in pieces where the caption changes so a
    caption appears and disappears on its frame time."""
    base = image.convert("RGBA")
    shown: dict[int | None, Image.Image] = {}
    tick, end = out.frames, out.frames + ticks
    while tick < end:
        caption = shown_at(tick / out.fps)
        run = 1  # frame times in a row that show the same caption
        while tick + run < end and shown_at((tick + run) / out.fps) == caption:
            run += 1
        if caption not in shown:
            shown[caption] = (
                base if caption is None else Image.alpha_composite(base, layer(caption))
            )
        out.write(out.frame_from_image(shown[caption]), run)
        tick += run


async def burn_captions(
    ctx: NodeContext,
    params: VideoCaptionParams,
    ref: ArtifactRef,
    texts: Sequence[str],
    shown_at: Callable[[float], int | None],
) -> Produced:
    """The video ``ref`` with captions burnt in: at each time (seconds from its start) the
    text of ``texts`` that ``shown_at`` names by its index, if any, on a band placed and
    coloured by ``params``; sound is kept. Each band is rendered once on a transparent
    layer, when first shown."""
    limit = media.length_limit(ctx, params.max_seconds)
    path = media.scratch_file(ctx, ".mp4")

    def work(progress: media.Progress) -> Produced:
        clip = open_video(ref, ctx.settings, limit)
        size = (clip.width, clip.height)
        count = clip.frame_count(params.fps)
        blank = Image.new("RGBA", size, (0, 0, 0, 0))
        layers: dict[int, Image.Image] = {}

        def layer(index: int) -> Image.Image:
            if index not in layers:
                layers[index] = caption_overlay(
                    blank, texts[index], params.position, params.color, params.band, CAPTION_HEIGHT
                )
            return layers[index]

        with _writing(path, *size, params.fps, audio=clip.audio, held=True) as out:
            for image, ticks in clip.held_frames(params.fps, size):
                _write_captioned(out, image, ticks, shown_at, layer)
                progress.update(out.frames / count)
        return out.produced(ctx.settings)

    return await media.run_with_progress(ctx, work)


class VideoCaption(NodeType):
    length_input = "video"  # priced by the length of its input
    spec = _spec(
        "VideoCaption",
        "Burn in caption",
        "Draw text on every frame of a video (a burnt-in caption); sound is kept.",
        VideoCaptionParams,
        Input("video", Kind.VIDEO),
        Input("text", Kind.TEXT),
    )

    async def run(
        self, ctx: NodeContext, params: VideoCaptionParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        ref = media.one(inputs, "video")
        text = input_text(inputs) or ""
        return await burn_captions(ctx, params, ref, [text], lambda _seconds: 0)  # throughout


NODES: list[NodeType] = [
    ImageAudioToVideo(),
    Slideshow(),
    KenBurns(),
    VideoConcat(),
    VideoAddAudio(),
    VideoCaption(),
]
