"""The cheap encoding paths, checked on the decoded files as a player would see them: a still
held as one frame a second, an MP3 soundtrack copied into the MP4, and long speech encoded
to MP3 in pieces cut in its pauses."""

from __future__ import annotations

import io
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from nodeloom.nodes import media
from nodeloom.nodes.speech import (
    MAX_PIECES,
    QUIET_PEAK,
    TextToSpeech,
    quiet_cuts,
    synthesize,
    to_stereo_44k,
)
from nodeloom.nodes.video import ImageAudioToVideo, Slideshow, VideoCaption, VideoConcat
from nodeloom.sdk._node import ArtifactRef, Kind, NodeFailure, Produced
from nodeloom.settings import Settings
from tests.nodes.conftest import Artifacts, run_node

SENTENCES = (
    "The keeper climbed the hundred and twelve steps every night. "
    "Ships he never met passed safely because of a light he never saw from the sea. "
    "In the morning he wrote the weather in a book that nobody read. "
)


@dataclass
class Decoded:
    """What a player learns from an MP4: its length, the video frames' timing (in
    presentation order), the key frames, and the sound as decoded (edit lists applied)."""

    seconds: float
    video_pts: list[float]
    video_durations: list[float]
    keyframes: list[float]
    audio_codec: str
    audio_seconds: float
    audio_packets: list[bytes]


def decode(path: Path) -> Decoded:
    with av.open(str(path)) as container:
        seconds = container.duration / av.time_base
        video = container.streams.video[0]
        video_end = float(video.duration * video.time_base)
        pts, keys = [], []
        for packet in container.demux(video):  # in decoding order: B-frames come early
            if packet.size:
                pts.append(float(packet.pts * packet.time_base))
                if packet.is_keyframe:
                    keys.append(pts[-1])
        pts.sort()
        # A frame is on screen until the next one starts; the last until the track ends.
        durations = [b - a for a, b in itertools.pairwise([*pts, video_end])]
    with av.open(str(path)) as container:
        shown = [float(frame.time) for frame in container.decode(video=0)]
        assert shown == pts, "decoded frames come out in presentation order, one per packet"
    with av.open(str(path)) as container:
        audio = container.streams.audio[0]
        codec = audio.codec_context.codec.canonical_name
        packets = [bytes(p) for p in container.demux(audio) if p.size]
    with av.open(str(path)) as container:
        frames = list(container.decode(audio=0))
        audio_seconds = sum(f.samples for f in frames) / frames[0].sample_rate
    return Decoded(seconds, pts, durations, keys, codec, audio_seconds, packets)


def mp3_packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as container:
        return [bytes(p) for p in container.demux(audio=0) if p.size]


def frame_at(path: Path, seconds: float) -> tuple[float, Image.Image]:
    """Seek as a player does (to the key frame before, then decode forward) and return the
    frame on screen at ``seconds``."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        container.seek(round(seconds / stream.time_base), stream=stream)
        shown = None
        for frame in container.decode(stream):
            if frame.time > seconds:
                break
            shown = frame
        assert shown is not None, f"nothing on screen at {seconds} s"
        return float(shown.time), shown.to_image()


def mp3_file(path: Path, seconds: float, rate: int, layout: str) -> Path:
    """A tone as MP3 at any rate and layout (our own nodes always write 44.1 kHz stereo)."""
    channels = 1 if layout == "mono" else 2
    n = round(seconds * rate)
    tone = (0.3 * np.sin(2 * np.pi * 330 * np.arange(n) / rate)).astype(np.float32)
    samples = np.ascontiguousarray(np.tile(tone, (channels, 1)))
    with av.open(str(path), "w", format="mp3") as out:
        stream = out.add_stream("libmp3lame", rate=rate, layout=layout)
        for offset in range(0, n, 1152):
            chunk = np.ascontiguousarray(samples[:, offset : offset + 1152])
            frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=layout)
            frame.sample_rate, frame.pts = rate, offset
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def picture_difference(a: Image.Image, b: Image.Image) -> float:
    return float(np.abs(np.asarray(a, np.int16) - np.asarray(b, np.int16)).mean())


def still_image(artifacts: Artifacts) -> tuple[ArtifactRef, Image.Image]:
    image = Image.new("RGB", (320, 180), "#1e293b")
    for x in range(0, 320, 40):  # something for the encoder to keep
        image.paste((240, 200, 60), (x, 60, x + 20, 120))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    produced = Produced(data=buffer.getvalue(), width=320, height=180)
    return artifacts.put(produced, Kind.IMAGE), image


class TestStillWithSound:
    async def test_held_frames_play_seek_and_keep_the_sound_in_step(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        image_ref, image = still_image(artifacts)
        audio_ref = artifacts.audio(12.3)
        produced = await run_node(
            ImageAudioToVideo(), ctx, {"fps": 25}, {"image": image_ref, "audio": audio_ref}
        )
        assert produced.path is not None
        got = decode(produced.path)

        # As long as the sound, to the frame; the sound as long as its MP3.
        assert got.seconds == pytest.approx(12.32, abs=0.02)
        assert got.audio_seconds == pytest.approx(12.3, abs=0.03)
        assert produced.duration_ms == round(got.seconds * 1000)
        # One frame a second, each held until the next, the last one to the end.
        assert len(got.video_pts) == math.ceil(12.3)
        assert got.video_pts == [float(t) for t in range(13)]
        assert got.video_durations[-1] == pytest.approx(0.32)
        assert got.keyframes == [0.0, 10.0]
        # The MP3 is in the MP4 byte for byte.
        assert got.audio_codec == "mp3"
        assert got.audio_packets == mp3_packets(audio_ref.path)

        middle, picture = frame_at(produced.path, got.seconds / 2)
        assert middle == 6.0
        assert picture_difference(picture, image) < 3
        last, picture = frame_at(produced.path, got.seconds - 0.05)
        assert last == 12.0 and picture_difference(picture, image) < 3

    async def test_the_sound_starts_with_the_picture(
        self, ctx: media.LocalContext, artifacts: Artifacts, tmp_path: Path
    ) -> None:
        """The MP3's encoder delay becomes an edit list: the first sample a player decodes is
        the first the MP3 alone decodes to, and it is at time 0, with the first picture."""
        image_ref, _ = still_image(artifacts)
        audio_ref = artifacts.audio(2.0)
        produced = await run_node(
            ImageAudioToVideo(), ctx, {}, {"image": image_ref, "audio": audio_ref}
        )
        assert produced.path is not None

        def first_samples(path: Path) -> tuple[float, np.ndarray]:
            with av.open(str(path)) as container:
                frames = itertools.islice(container.decode(audio=0), 3)
                decoded = [(f.time, f.to_ndarray()[0]) for f in frames]
            return decoded[0][0], np.concatenate([d for _, d in decoded])[:2000]

        start, in_video = first_samples(produced.path)
        _, alone = first_samples(audio_ref.path)
        assert start == 0
        assert np.abs(alone).max() > 0.1  # the tone, not the silence of a delay
        assert np.allclose(in_video, alone, atol=1e-6)

    @pytest.mark.parametrize(("rate", "layout"), [(22_050, "mono"), (24_000, "stereo")])
    async def test_sound_that_does_not_fit_an_mp4_is_encoded_to_aac(
        self,
        ctx: media.LocalContext,
        artifacts: Artifacts,
        tmp_path: Path,
        rate: int,
        layout: str,
    ) -> None:
        """MPEG-2 MP3 (below 32 kHz) inside MP4 is not something every browser plays."""
        path = mp3_file(tmp_path / f"tone-{rate}.mp3", 3.0, rate, layout)
        audio_ref = artifacts.put(Produced(path=path, duration_ms=3000), Kind.AUDIO)
        image_ref, _ = still_image(artifacts)
        produced = await run_node(
            ImageAudioToVideo(), ctx, {"fps": 10}, {"image": image_ref, "audio": audio_ref}
        )
        assert produced.path is not None
        got = decode(produced.path)
        assert got.audio_codec == "aac"
        assert got.seconds == pytest.approx(3.0, abs=0.11)
        assert got.audio_seconds == pytest.approx(3.0, abs=0.03)
        assert len(got.video_pts) == 3

    async def test_sound_longer_than_max_seconds_is_refused(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        image_ref, _ = still_image(artifacts)
        with pytest.raises(NodeFailure, match="longer than 1"):
            await run_node(
                ImageAudioToVideo(),
                ctx,
                {"max_seconds": 1},
                {"image": image_ref, "audio": artifacts.audio(1.5)},
            )


class TestHeldFramesThroughOtherVideoNodes:
    async def test_a_still_clip_stays_held_when_joined_after_a_moving_one(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        image_ref, image = still_image(artifacts)
        still = await run_node(
            ImageAudioToVideo(), ctx, {}, {"image": image_ref, "audio": artifacts.audio(12.3)}
        )
        still_ref = artifacts.put(still, Kind.VIDEO)
        moving = artifacts.video(0.6, (320, 180))  # 6 frames at 10 fps, each a new colour
        produced = await run_node(VideoConcat(), ctx, {"fps": 25}, {"videos": [moving, still_ref]})
        assert produced.path is not None
        got = decode(produced.path)

        assert got.seconds == pytest.approx(0.6 + 12.32, abs=0.02)
        assert got.audio_seconds == pytest.approx(got.seconds, abs=0.05)
        # The moving frames each last their 0.1 s, the still's one frame a second.
        assert len(got.video_pts) == 6 + 13
        assert got.video_durations[:6] == pytest.approx([0.12, 0.08, 0.12, 0.08, 0.12, 0.08])
        assert got.video_pts[6:] == pytest.approx([0.6 + t for t in range(13)])
        assert got.video_pts[-1] + got.video_durations[-1] == pytest.approx(got.seconds)
        # Key frames by time, however long the frames: never more than 2 s (and a frame) apart.
        gaps = [b - a for a, b in itertools.pairwise([*got.keyframes, got.seconds])]
        assert max(gaps) <= 2 + 1.0
        _, picture = frame_at(produced.path, got.seconds / 2)
        assert picture_difference(picture, image) < 6  # encoded twice now

    async def test_a_slideshow_holds_each_slide_and_encodes_only_the_cross_fades(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        red, blue = artifacts.image(320, 180, "#cc2222"), artifacts.image(320, 180, "#2244cc")
        produced = await run_node(
            Slideshow(),
            ctx,
            {"width": 320, "height": 180, "fps": 25, "seconds_per_slide": 3, "crossfade": 0.5},
            {"images": [red, blue]},
        )
        assert produced.path is not None
        with av.open(str(produced.path)) as container:
            video = container.streams.video[0]
            times = [float(frame.time) for frame in container.decode(video)]
            end = float(video.duration * video.time_base)
        # Red held until the fade (one frame a second), 12 cross-fade frames, blue held 3 s.
        assert times[:3] == [0.0, 1.0, 2.0]
        assert times[3:15] == pytest.approx([2.52 + 0.04 * i for i in range(12)])
        assert times[15:] == [3.0, 4.0, 5.0]
        assert end == pytest.approx(6.0)
        _, picture = frame_at(produced.path, 1.5)
        assert picture.getpixel((100, 100))[0] > 150  # red
        _, picture = frame_at(produced.path, 4.5)
        assert picture.getpixel((100, 100))[2] > 150  # blue

    async def test_a_caption_on_a_still_clip_is_drawn_once_a_second(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        image_ref, image = still_image(artifacts)
        still = await run_node(
            ImageAudioToVideo(), ctx, {}, {"image": image_ref, "audio": artifacts.audio(4.5)}
        )
        produced = await run_node(
            VideoCaption(),
            ctx,
            {"position": "top"},
            {"video": artifacts.put(still, Kind.VIDEO), "text": artifacts.text("Hello")},
        )
        assert produced.path is not None
        got = decode(produced.path)
        assert len(got.video_pts) == 5
        assert got.seconds == pytest.approx(4.52, abs=0.02)
        _, picture = frame_at(produced.path, 3.5)
        bottom = (0, 120, 320, 180)  # the caption is at the top; the bottom is the still's
        assert picture_difference(picture.crop(bottom), image.crop(bottom)) < 3
        assert picture_difference(picture, image) > 5


def long_speech(repeats: int = 4) -> media.FloatArray:
    samples, rate = synthesize(SENTENCES * repeats, "en", 1.0, 120, media.Progress())
    return to_stereo_44k(samples, rate)


class TestSpeechInPieces:
    def test_cuts_fall_in_pauses_near_equal_pieces(self) -> None:
        speech = long_speech()
        n = speech.shape[1]
        cuts = quiet_cuts(speech, 3)
        assert len(cuts) == 2
        for k, cut in enumerate(cuts, start=1):
            assert abs(cut - n * k / 3) < n / 12
            assert np.abs(speech[:, cut - 1000 : cut + 1000]).max() <= QUIET_PEAK

    def test_sound_without_a_pause_is_not_cut(self) -> None:
        n = 30 * media.SAMPLE_RATE
        tone = (0.3 * np.sin(np.arange(n) / 7)).astype(np.float32)
        assert quiet_cuts(np.stack([tone, tone]), 2) == []
        assert quiet_cuts(long_speech(1)[:, :2000], 2) == []

    def test_pieces_join_into_one_mp3_that_decodes_straight_through(
        self, tmp_path: Path, settings: Settings
    ) -> None:
        speech = long_speech()
        n = speech.shape[1]
        cuts = quiet_cuts(speech, 2)
        assert len(cuts) == 1
        produced = media.encode_mp3(speech.copy(), tmp_path / "pieces.mp3", settings, cuts)
        assert produced.path is not None
        decoded = media.decode_audio(produced.path, settings)
        extra = decoded.shape[1] - n
        # The join adds the encoders' padding, in the pause, and nothing else.
        assert 0 <= extra < 0.06 * media.SAMPLE_RATE
        assert produced.duration_ms == pytest.approx(decoded.shape[1] / 44.1, abs=1)
        cut = cuts[0]
        before, after = slice(0, cut - 3000), slice(cut + 3000, n)
        shifted = slice(cut + 3000 + extra, n + extra)
        assert np.abs(decoded[:, before] - speech[:, before]).max() < 0.1
        assert np.abs(decoded[:, shifted] - speech[:, after]).max() < 0.1
        assert np.abs(decoded[:, cut - 1000 : cut + extra + 1000]).max() <= QUIET_PEAK

    async def test_long_speech_node_output_is_one_valid_mp3(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        text = artifacts.text(SENTENCES * 4)
        produced = await run_node(TextToSpeech(), ctx, {"engine": "local"}, {"text": text})
        assert produced.path is not None
        with av.open(str(produced.path)) as container:
            assert container.format.name == "mp3"
            stream = container.streams.audio[0].codec_context
            assert (stream.sample_rate, stream.layout.nb_channels) == (44_100, 2)
            samples = sum(f.samples for f in container.decode(audio=0))
        speech = long_speech()
        joins = MAX_PIECES - 1  # at most; how many depends on the cores
        assert 0 <= samples - speech.shape[1] < joins * 0.06 * media.SAMPLE_RATE
        assert produced.duration_ms == pytest.approx(samples / 44.1, abs=1)
