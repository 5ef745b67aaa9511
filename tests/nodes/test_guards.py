"""Limits: pixels (created and decoded), media length and artifact size all fail the node with
a clear NodeFailure, never a crash."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from nodeloom.nodes import media
from nodeloom.nodes.audio import AudioConcat, AudioVolume, ToneGenerator, VideoSound
from nodeloom.nodes.image import GradientBackground, ImageGrid, ImageResize, RenderText
from nodeloom.nodes.video import ImageAudioToVideo, KenBurns, Slideshow, VideoCaption
from nodeloom.sdk._node import Kind, NodeFailure, Produced
from tests.nodes.conftest import Artifacts, make_settings, run_node


@pytest.fixture
def tight(tmp_path: Path) -> media.LocalContext:
    settings = make_settings(tmp_path / "tight", max_image_pixels=100_000, max_media_seconds=2.0)
    return media.LocalContext(settings, tmp_path / "scratch")


class TestPixels:
    async def test_created_canvas_over_limit(
        self, tight: media.LocalContext, artifacts: Artifacts
    ) -> None:
        with pytest.raises(NodeFailure, match="exceeds the limit") as info:
            await run_node(
                RenderText(), tight, {"width": 1000, "height": 1000}, {"text": artifacts.text("x")}
            )
        assert info.value.code == "limit_exceeded"

    @pytest.mark.parametrize(
        ("node", "params"),
        [
            (GradientBackground(), {"width": 5000, "height": 5000}),
            (ImageResize(), {"width": 4000, "height": 4000}),
            (KenBurns(), {"width": 4000, "height": 4000, "seconds": 1}),
        ],
    )
    async def test_requested_sizes_over_limit(
        self, node: object, params: dict[str, int], tight: media.LocalContext, artifacts: Artifacts
    ) -> None:
        inputs = {"image": artifacts.image()} if node.__class__ is not GradientBackground else {}
        with pytest.raises(NodeFailure, match="exceeds the limit"):
            await run_node(node, tight, params, inputs)  # type: ignore[arg-type]

    async def test_grid_size_is_checked_before_drawing(
        self, tight: media.LocalContext, artifacts: Artifacts
    ) -> None:
        images = [artifacts.image() for _ in range(9)]
        with pytest.raises(NodeFailure, match="grid"):
            await run_node(
                ImageGrid(), tight, {"cell_width": 512, "cell_height": 512}, {"images": images}
            )

    async def test_decompression_bomb_is_refused_before_decoding(
        self, tight: media.LocalContext, artifacts: Artifacts
    ) -> None:
        """A PNG of 4000x4000 black pixels compresses to a few KB; its header is read first."""
        buffer = io.BytesIO()
        Image.new("1", (4000, 4000)).save(buffer, format="PNG")
        assert len(buffer.getvalue()) < 100_000
        bomb = artifacts.put(Produced(data=buffer.getvalue()), Kind.IMAGE)
        with pytest.raises(NodeFailure, match="input image of 4000x4000"):
            await run_node(ImageResize(), tight, {"width": 10, "height": 10}, {"image": bomb})

    async def test_garbage_image_input(self, ctx: media.LocalContext, artifacts: Artifacts) -> None:
        junk = artifacts.put(Produced(data=b"not an image at all"), Kind.IMAGE)
        with pytest.raises(NodeFailure, match="not a readable image"):
            await run_node(ImageResize(), ctx, {}, {"image": junk})


class TestDuration:
    async def test_generated_length_over_limit(self, tight: media.LocalContext) -> None:
        with pytest.raises(NodeFailure, match="exceeds the limit"):
            await run_node(ToneGenerator(), tight, {"seconds": 5})

    async def test_input_audio_over_limit(
        self, tight: media.LocalContext, artifacts: Artifacts
    ) -> None:
        with pytest.raises(NodeFailure, match="input audio"):
            await run_node(AudioVolume(), tight, {}, {"audio": artifacts.audio(3.0)})

    async def test_concat_over_max_seconds(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        clip = artifacts.audio(0.6)
        with pytest.raises(NodeFailure, match="max_seconds"):
            await run_node(AudioConcat(), ctx, {"max_seconds": 1}, {"audio": [clip, clip]})

    async def test_video_from_long_audio(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        with pytest.raises(NodeFailure, match="longer than"):
            await run_node(
                ImageAudioToVideo(),
                ctx,
                {"max_seconds": 0.5},
                {"image": artifacts.image(), "audio": artifacts.audio(1.0)},
            )

    async def test_slideshow_over_max_seconds(
        self, ctx: media.LocalContext, artifacts: Artifacts
    ) -> None:
        with pytest.raises(NodeFailure, match="max_seconds"):
            await run_node(
                Slideshow(),
                ctx,
                {"seconds_per_slide": 10, "max_seconds": 5},
                {"images": [artifacts.image()]},
            )

    async def test_input_video_over_limit(
        self, tight: media.LocalContext, artifacts: Artifacts
    ) -> None:
        with pytest.raises(NodeFailure, match="input video"):
            await run_node(
                VideoCaption(),
                tight,
                {},
                {"video": artifacts.video(2.5), "text": artifacts.text("x")},
            )

    async def test_damaged_audio(self, ctx: media.LocalContext, artifacts: Artifacts) -> None:
        junk = artifacts.put(Produced(data=b"\x00" * 1000), Kind.AUDIO)
        with pytest.raises(NodeFailure, match="audio"):
            await run_node(AudioVolume(), ctx, {}, {"audio": junk})


class TestOutputSize:
    async def test_image_over_artifact_limit(self, tmp_path: Path, artifacts: Artifacts) -> None:
        settings = make_settings(tmp_path / "small", max_artifact_bytes=500)
        ctx = media.LocalContext(settings, tmp_path / "scratch")
        with pytest.raises(NodeFailure, match="bytes exceeds the limit"):
            await run_node(
                GradientBackground(), ctx, {"width": 300, "height": 300, "direction": "radial"}
            )

    async def test_audio_over_artifact_limit(self, tmp_path: Path) -> None:
        settings = make_settings(tmp_path / "small", max_artifact_bytes=2000)
        ctx = media.LocalContext(settings, tmp_path / "scratch")
        with pytest.raises(NodeFailure, match="bytes exceeds the limit"):
            await run_node(ToneGenerator(), ctx, {"seconds": 1, "waveform": "noise"})


def test_estimates_bound_pricing() -> None:
    node = ToneGenerator()
    params = node.spec.params.model_validate({"seconds": 2.5})
    assert node.estimate_credits(params) == 1 + 3
    assert node.charge_credits(params, 2400) == 1 + 3
    assert node.charge_credits(params, 10_000) == node.estimate_credits(params)


def test_even_dimensions() -> None:
    assert [media.even(v) for v in (1, 2, 3, 721)] == [2, 2, 2, 720]


class TestVideoSound:
    async def test_a_silent_video_fails_with_a_clear_message(
        self, tight: media.LocalContext, artifacts: Artifacts
    ) -> None:
        with pytest.raises(NodeFailure, match="no audio stream"):
            await run_node(VideoSound(), tight, {}, {"video": artifacts.video(0.5, sound=False)})

    async def test_a_video_longer_than_the_limit_is_refused(
        self, tight: media.LocalContext, artifacts: Artifacts
    ) -> None:
        with pytest.raises(NodeFailure, match=r"3\.0 s exceeds the limit of 2 s"):
            await run_node(VideoSound(), tight, {}, {"video": artifacts.video(3.0)})
