"""Audio nodes: concat, trim, volume/fade, tone/silence. MP3 out, float32 in between.

Every node decodes its inputs to float32 stereo 44.1 kHz (``media.decode_audio``, bounded by
``max_media_seconds``), works on numpy arrays and encodes MP3. Lengths that depend on upstream
audio are bounded for pricing by the ``max_seconds`` param.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from nodeloom.nodes import media
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
    spec_family,
)

Seconds = Annotated[float, Field(ge=0, le=600)]
MaxSeconds = Annotated[float, Field(gt=0, le=600)]
SR = media.SAMPLE_RATE


_spec = spec_family("audio", Kind.AUDIO, Cost(credits=1, per_second=1))


async def _sound_as_mp3(
    ctx: NodeContext,
    ref: ArtifactRef,
    max_seconds: float,
    change: Callable[[media.FloatArray], media.FloatArray],
) -> Produced:
    """The sound of ``ref`` (audio or video, at most ``max_seconds``), changed by
    ``change``, as MP3."""
    path = media.scratch_file(ctx, ".mp3")

    def work(progress: media.Progress) -> Produced:
        clip = media.decode_audio(ref.path, ctx.settings, media.length_limit(ctx, max_seconds))
        progress.update(0.4)
        return media.encode_mp3(change(clip), path, ctx.settings)

    return await media.run_with_progress(ctx, work)


class AudioConcatParams(Params):
    gap_seconds: Annotated[float, Field(ge=0, le=60)] = Field(
        default=0, description="Silence between clips."
    )
    max_seconds: MaxSeconds = Field(
        default=300, description="Longest result allowed (bounds the price)."
    )


class AudioConcat(NodeType):
    spec = _spec(
        "AudioConcat",
        "Concatenate audio",
        "Join several audio clips end to end, in edge order, with optional gaps.",
        AudioConcatParams,
        Input("audio", Kind.AUDIO, multiple=True),
    )

    async def run(
        self, ctx: NodeContext, params: AudioConcatParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        refs = media.at_least_one(inputs, "audio", "audio clip")
        limit = media.length_limit(ctx, params.max_seconds)
        path = media.scratch_file(ctx, ".mp3")

        def work(progress: media.Progress) -> Produced:
            parts: list[media.FloatArray] = []
            gap = np.zeros((media.CHANNELS, round(params.gap_seconds * SR)), np.float32)
            total = 0
            for index, ref in enumerate(refs):
                if index:
                    parts.append(gap)
                clip = media.decode_audio(ref.path, ctx.settings, limit)
                parts.append(clip)
                total += clip.shape[1] + (gap.shape[1] if index else 0)
                if total > limit * SR:
                    raise NodeFailure(f"the joined audio is longer than max_seconds ({limit:g} s)")
                progress.update(0.5 * (index + 1) / len(refs))
            return media.encode_mp3(np.concatenate(parts, axis=1), path, ctx.settings)

        return await media.run_with_progress(ctx, work)


class AudioTrimParams(Params):
    start: Seconds = Field(default=0, description="Where to start, in seconds.")
    duration: Annotated[float, Field(gt=0, le=600)] = Field(
        default=10, description="How much to keep, in seconds (less if the clip ends first)."
    )


class AudioTrim(NodeType):
    spec = _spec(
        "AudioTrim",
        "Trim audio",
        "Keep `duration` seconds of a clip starting at `start`.",
        AudioTrimParams,
        Input("audio", Kind.AUDIO),
    )

    def estimate_seconds(self, params: AudioTrimParams) -> float:
        return params.duration

    async def run(
        self, ctx: NodeContext, params: AudioTrimParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        ref = media.one(inputs, "audio")
        path = media.scratch_file(ctx, ".mp3")

        def work(progress: media.Progress) -> Produced:
            clip = media.decode_audio(ref.path, ctx.settings)
            first = round(params.start * SR)
            if first >= clip.shape[1]:
                length = clip.shape[1] / SR
                raise NodeFailure(f"start {params.start:g} s is past the end ({length:.1f} s)")
            progress.update(0.5)
            part = np.ascontiguousarray(clip[:, first : first + round(params.duration * SR)])
            return media.encode_mp3(part, path, ctx.settings)

        return await media.run_with_progress(ctx, work)


class AudioVolumeParams(Params):
    gain_db: Annotated[float, Field(ge=-60, le=30)] = Field(
        default=0, description="Gain in decibels (negative is quieter)."
    )
    normalize: bool = Field(default=False, description="First scale the peak to -1 dBFS.")
    fade_in: Seconds = Field(default=0, description="Fade-in length, seconds.")
    fade_out: Seconds = Field(default=0, description="Fade-out length, seconds.")
    max_seconds: MaxSeconds = Field(default=300, description="Longest input accepted.")


def shape_volume(clip: media.FloatArray, params: AudioVolumeParams) -> media.FloatArray:
    out = clip.copy()
    if params.normalize:
        peak = float(np.max(np.abs(out))) if out.size else 0.0
        if peak > 0:
            out *= 10 ** (-1 / 20) / peak
    out *= 10 ** (params.gain_db / 20)
    n = out.shape[1]
    fade_in = min(n, round(params.fade_in * SR))
    if fade_in:
        out[:, :fade_in] *= np.linspace(0, 1, fade_in, dtype=np.float32)
    fade_out = min(n, round(params.fade_out * SR))
    if fade_out:
        out[:, n - fade_out :] *= np.linspace(1, 0, fade_out, dtype=np.float32)
    return out


class AudioVolume(NodeType):
    length_input = "audio"  # priced by the length of its input
    spec = _spec(
        "AudioVolume",
        "Volume and fades",
        "Change loudness (gain in dB, optional peak normalisation) and fade in/out.",
        AudioVolumeParams,
        Input("audio", Kind.AUDIO),
    )

    async def run(
        self, ctx: NodeContext, params: AudioVolumeParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        ref = media.one(inputs, "audio")
        return await _sound_as_mp3(
            ctx, ref, params.max_seconds, lambda clip: shape_volume(clip, params)
        )


class ToneParams(Params):
    waveform: Literal["sine", "square", "sawtooth", "triangle", "noise", "silence"] = Field(
        default="sine", description="Shape of the sound; silence for a pause."
    )
    frequency: Annotated[float, Field(ge=20, le=20_000)] = Field(default=440, description="Hz.")
    seconds: Annotated[float, Field(gt=0, le=600)] = Field(default=1, description="Length.")
    volume: Annotated[float, Field(ge=0, le=1)] = Field(default=0.5, description="Amplitude 0..1.")


def tone(params: ToneParams) -> media.FloatArray:
    n = round(params.seconds * SR)
    phase = (np.arange(n, dtype=np.float64) * params.frequency / SR) % 1.0
    if params.waveform == "sine":
        wave = np.sin(2 * np.pi * phase)
    elif params.waveform == "square":
        wave = np.where(phase < 0.5, 1.0, -1.0)
    elif params.waveform == "sawtooth":
        wave = 2 * phase - 1
    elif params.waveform == "triangle":
        wave = 1 - 4 * np.abs(phase - 0.5)
    elif params.waveform == "noise":
        wave = np.random.default_rng(0).uniform(-1, 1, n)  # seeded: same params, same bytes
    else:
        wave = np.zeros(n)
    mono = (wave * params.volume).astype(np.float32)
    return np.stack([mono, mono])


class ToneGenerator(NodeType):
    spec = _spec(
        "ToneGenerator",
        "Tone or silence",
        "Generate a tone (sine, square, sawtooth, triangle), noise, or silence.",
        ToneParams,
    )

    def estimate_seconds(self, params: ToneParams) -> float:
        return params.seconds

    async def run(
        self, ctx: NodeContext, params: ToneParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        media.check_seconds(ctx.settings, params.seconds, "tone")
        path = media.scratch_file(ctx, ".mp3")

        def work(progress: media.Progress) -> Produced:
            return media.encode_mp3(tone(params), path, ctx.settings)

        return await media.run_with_progress(ctx, work)


class VideoSoundParams(Params):
    max_seconds: MaxSeconds = Field(default=600, description="Longest video accepted.")


class VideoSound(NodeType):
    """A video's sound track as audio: what a transcription or an audio edit of a video
    starts from."""

    length_input = "video"  # priced by the length of its input
    spec = _spec(
        "VideoSound",
        "Sound of a video",
        "The sound track of a video as MP3 (to transcribe it, edit it or put it elsewhere).",
        VideoSoundParams,
        Input("video", Kind.VIDEO),
    )

    async def run(
        self, ctx: NodeContext, params: VideoSoundParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        ref = media.one(inputs, "video")
        return await _sound_as_mp3(ctx, ref, params.max_seconds, lambda clip: clip)


NODES: list[NodeType] = [AudioConcat(), AudioTrim(), AudioVolume(), ToneGenerator(), VideoSound()]
