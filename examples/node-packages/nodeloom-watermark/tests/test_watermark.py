"""The package's own tests, with the SDK's helpers: no server needed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from pydantic import ValidationError

from nodeloom.sdk import NodeFailure
from nodeloom.sdk.testing import artifact, produced_bytes, run_node
from nodeloom_watermark import Watermark


def _png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 32), color).save(out, format="PNG")
    return out.getvalue()


def test_stamps_the_corner_it_is_asked_for(tmp_path: Path) -> None:
    image = artifact(_png((0, 0, 0)), "image/png", tmp_path, width=64, height=32)
    produced = run_node(
        Watermark(), {"text": "XX", "corner": "top-left", "opacity": 1.0}, {"image": image}, tmp_path
    )
    out = Image.open(io.BytesIO(produced_bytes(produced)))
    assert (produced.width, produced.height) == out.size == (64, 32)
    top_left = out.crop((0, 0, 20, 16)).getextrema()
    bottom_right = out.crop((44, 16, 64, 32)).getextrema()
    assert max(band[1] for band in top_left) > 200  # white text there
    assert max(band[1] for band in bottom_right) == 0  # untouched black


def test_refuses_what_is_not_an_image(tmp_path: Path) -> None:
    not_image = artifact(b"hello", "image/png", tmp_path)
    with pytest.raises(NodeFailure) as info:
        run_node(Watermark(), {}, {"image": not_image}, tmp_path)
    assert info.value.code == "bad_input"


def test_params_are_checked(tmp_path: Path) -> None:
    image = artifact(_png((0, 0, 0)), "image/png", tmp_path)
    with pytest.raises(ValidationError):
        run_node(Watermark(), {"opacity": 2}, {"image": image}, tmp_path)
