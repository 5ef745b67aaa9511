"""Rendering, speech and the narrated-video chain, checked on the decoded output."""

from __future__ import annotations

import asyncio
import io
import itertools
import threading
import time

import av
import numpy as np
import pytest
from PIL import Image

from nodeloom.nodes import media
from nodeloom.nodes.image import RenderText, layout_text, render_text_image
from nodeloom.nodes.speech import TextToSpeech, synthesize
from nodeloom.nodes.video import ImageAudioToVideo, KenBurns
from nodeloom.sdk._node import ArtifactRef, Kind, NodeFailure
from tests.nodes.conftest import Artifacts, run_node


def _ink(text: str, size: tuple[int, int] = (400, 120)) -> np.ndarray:
    image = render_text_image(text, *size, "#ffffff", "#000000")
    return np.asarray(image.convert("L"), dtype=np.int16)


class TestRenderText:
    @pytest.mark.parametrize("text", ["Ça été déjà Ærøskøbing", "Съешь же ещё этих булок"])
    def test_accented_and_cyrillic_glyphs_are_drawn(self, text: str) -> None:
        """Each glyph must differ from the font's 'missing glyph' box (tofu): render every
        character alone and compare it with a character the font surely lacks."""
        tofu = _ink("\u4e00")  # a CJK ideograph: not in the bundled Latin/Cyrillic font
        drawn = _ink(text)
        assert (drawn < 128).sum() > 500  # plenty of dark pixels: text was drawn
        for char in set(text.replace(" ", "")):
            glyph = _ink(char)
            assert (glyph < 128).sum() > 0, char
            assert np.abs(glyph - tofu).sum() > 0, f"{char!r} renders as a missing glyph"

    def test_long_text_is_wrapped_and_fits(self) -> None:
        words = " ".join(["wrapping"] * 200)
        block = layout_text(words, 300, 200)
        assert len(block.lines) > 1
        assert block.line_height * len(block.lines) <= 200

    def test_one_huge_word_is_broken(self) -> None:
        block = layout_text("x" * 5000, 100, 100)
        assert block.lines and all(line for line in block.lines)

    async def test_node_output(self, ctx: media.LocalContext, artifacts: Artifacts) -> None:
        produced = await run_node(
            RenderText(), ctx, {"width": 200, "height": 100}, {"text": artifacts.text("Привет")}
        )
        assert produced.data is not None
        with Image.open(io.BytesIO(produced.data)) as image:
            assert image.size == (200, 100)
            assert len(image.convert("L").getcolors(maxcolors=100_000) or []) > 2

    def test_bad_colour_is_refused_at_validation(self) -> None:
        with pytest.raises(ValueError, match="not a colour"):
            RenderText.spec.params.model_validate({"background": "blurple"})


class TestSpeech:
    def test_synthesize_returns_speech(self) -> None:
        samples, rate = synthesize("Hello world.", "en", 1.0, 30, media.Progress())
        assert rate > 8000
        assert 0.3 < samples.size / rate < 3
        assert np.abs(samples).max() > 1000

    def test_unknown_voice_fails_clearly(self) -> None:
        with pytest.raises(NodeFailure, match="no voice"):
            synthesize("Hello", "zz-nope", 1.0, 30, media.Progress())

    def test_speed_changes_length(self) -> None:
        text = "The quick brown fox jumps over the lazy dog."
        slow, _ = synthesize(text, "en", 0.6, 30, media.Progress())
        fast, _ = synthesize(text, "en", 1.8, 30, media.Progress())
        assert slow.size > 1.5 * fast.size

    async def test_concurrent_calls_are_serialized(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        """eSpeak is not thread-safe; parallel nodes must still each get their own speech."""
        texts = ["One.", "Two two two two two.", "Three three three three three three three."]
        results = await asyncio.gather(
            *(run_node(TextToSpeech(), ctx, {}, {"text": artifacts.text(t)}) for t in texts)
        )
        durations = [r.duration_ms or 0 for r in results]
        assert durations == sorted(durations) and durations[0] > 0

    async def test_max_seconds_is_enforced(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        with pytest.raises(NodeFailure, match="max_seconds"):
            await run_node(
                TextToSpeech(), ctx, {"max_seconds": 1}, {"text": artifacts.text("word " * 50)}
            )


async def test_narrated_video_chain(ctx: media.LocalContext, artifacts: Artifacts) -> None:
    """TextToSpeech -> ImageAudioToVideo: h264 yuv420p + the speech's MP3, as long as it."""
    text = "Nodeloom turns text into narrated video. Ça marche très bien."
    speech = await run_node(TextToSpeech(), ctx, {"speed": 1.2}, {"text": artifacts.text(text)})
    audio_ref = artifacts.put(speech, Kind.AUDIO)
    image_ref = await _render(ctx, artifacts, text)
    video = await run_node(
        ImageAudioToVideo(), ctx, {"fps": 12}, {"image": image_ref, "audio": audio_ref}
    )
    assert video.path is not None and video.path.parent == ctx.scratch_dir
    with av.open(str(audio_ref.path)) as container:
        speech_seconds = container.duration / av.time_base
    with av.open(str(video.path)) as container:
        v = container.streams.video[0].codec_context
        a = container.streams.audio[0].codec_context
        assert (v.codec.canonical_name, v.pix_fmt) == ("h264", "yuv420p")
        assert a.codec.canonical_name == "mp3"  # the speech, copied
        assert (v.width, v.height) == (320, 180)
        seconds = container.duration / av.time_base
        assert abs(seconds - speech_seconds) < 0.3
        decoded_audio = sum(f.samples for f in container.decode(audio=0)) / a.sample_rate
        assert abs(decoded_audio - speech_seconds) < 0.3
    assert video.duration_ms is not None and abs(video.duration_ms / 1000 - seconds) < 0.05
    assert ctx.reports and ctx.reports[-1] == 1.0
    with open(video.path, "rb") as handle:  # faststart: the index (moov) precedes the data
        head = handle.read(4096)
    assert head.find(b"moov") != -1 and (
        head.find(b"mdat") == -1 or head.find(b"moov") < head.find(b"mdat")
    )


async def _render(ctx: media.LocalContext, artifacts: Artifacts, text: str) -> ArtifactRef:
    produced = await run_node(
        RenderText(), ctx, {"width": 320, "height": 180}, {"text": artifacts.text(text)}
    )
    return artifacts.put(produced, Kind.IMAGE)


async def test_progress_is_reported_while_encoding(
    ctx: media.LocalContext, artifacts: Artifacts
) -> None:
    """A long encode reports progress at least once a second (here: every half second)."""
    audio = artifacts.audio(8.0)
    image = artifacts.image(640, 360)
    loop = asyncio.get_running_loop()
    stamps: list[float] = []

    async def progress(fraction: float) -> None:
        stamps.append(loop.time())

    ctx.progress = progress  # type: ignore[method-assign]
    start = loop.time()
    await run_node(ImageAudioToVideo(), ctx, {"fps": 60}, {"image": image, "audio": audio})
    points = [start, *stamps]
    assert max(b - a for a, b in itertools.pairwise(points)) < 1.0


async def test_cancelled_node_stops_its_worker(
    ctx: media.LocalContext, artifacts: Artifacts
) -> None:
    """Cancelling a node (timeout, run cancel) also stops the encode in its worker thread.
    KenBurns: a moving picture is encoded frame by frame, so it takes a while."""
    outcome: list[str] = []
    encoding = threading.Event()

    async def to_thread(fn, /, *args):  # type: ignore[no-untyped-def]
        def wrapped():  # type: ignore[no-untyped-def]
            encoding.set()
            try:
                return fn(*args)
            except media.Cancelled:
                outcome.append("stopped")
                raise

        return await asyncio.to_thread(wrapped)

    ctx.to_thread = to_thread  # type: ignore[method-assign]
    task = asyncio.create_task(
        run_node(
            KenBurns(),
            ctx,
            # Long enough that the encode is still going when the cancel arrives, however
            # fast the machine: 14,400 frames.
            {"seconds": 240, "fps": 60, "width": 640, "height": 360},
            {"image": artifacts.image(640, 360)},
        )
    )
    deadline = time.monotonic() + 30
    while not encoding.is_set():  # the encode is under way in its worker thread
        assert not task.done() and time.monotonic() < deadline, "the encode never started"
        await asyncio.sleep(0.01)
    assert not task.done(), "the encode finished before it could be cancelled"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(50):
        if outcome:
            break
        await asyncio.sleep(0.1)
    assert outcome == ["stopped"]


async def test_empty_speech_fails_clearly(ctx: media.LocalContext, artifacts: Artifacts) -> None:
    with pytest.raises(NodeFailure, match="no text to speak"):
        await run_node(TextToSpeech(), ctx, {}, {"text": artifacts.text("   ")})
