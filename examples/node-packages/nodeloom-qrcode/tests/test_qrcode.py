"""The package's own tests, with the SDK's helpers: no server needed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

from nodeloom.sdk import NodeFailure
from nodeloom.sdk.testing import artifact, produced_bytes, run_node
from nodeloom_qrcode import QRCode


def test_draws_a_code_sized_by_its_params(tmp_path: Path) -> None:
    text = artifact(b"https://example.com/ticket/42", "text/plain", tmp_path)
    produced = run_node(QRCode(), {"box_size": 4, "border": 2}, {"text": text}, tmp_path)
    image = Image.open(io.BytesIO(produced_bytes(produced)))
    # A version-N code is 17 + 4N modules wide, plus the border on both sides.
    modules = image.width // 4 - 2 * 2
    assert image.width == image.height == produced.width and (modules - 17) % 4 == 0
    assert image.getpixel((0, 0)) == 255  # the quiet zone is white
    assert image.getpixel((8, 8)) == 0  # the finder pattern's corner is black


def test_more_correction_needs_a_larger_code(tmp_path: Path) -> None:
    text = artifact(b"x" * 100, "text/plain", tmp_path)
    low = run_node(QRCode(), {"error_correction": "L"}, {"text": text}, tmp_path)
    high = run_node(QRCode(), {"error_correction": "H"}, {"text": text}, tmp_path)
    assert (high.width or 0) > (low.width or 0)


def test_refuses_text_too_long(tmp_path: Path) -> None:
    text = artifact(b"x" * 5000, "text/plain", tmp_path)
    with pytest.raises(NodeFailure) as info:
        run_node(QRCode(), {}, {"text": text}, tmp_path)
    assert info.value.code == "too_long"
