"""Real media files made in the tests, with Pillow and PyAV: every format an upload may be
sent in, and the damaged or hostile ones it must refuse."""

from __future__ import annotations

import io
import math
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

GPS_IFD = 0x8825


def jpeg_with_gps(width: int = 64, height: int = 48) -> bytes:
    """A JPEG carrying EXIF with a GPS position and a camera model."""
    image = Image.new("RGB", (width, height), (200, 30, 30))
    exif = Image.Exif()
    exif[0x0110] = "SecretCam 3000"  # Model
    exif.get_ifd(GPS_IFD).update({1: "N", 2: (48.0, 51.0, 29.0), 3: "E", 4: (2.0, 17.0, 40.0)})
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", exif=exif.tobytes())
    return buffer.getvalue()


def image_bytes(
    fmt: str, size: tuple[int, int] = (40, 30), mode: str = "RGB", **save: object
) -> bytes:
    colour: object = (10, 120, 240) if mode in ("RGB", "CMYK") else 128
    if mode == "CMYK":
        colour = (10, 120, 240, 0)
    if mode == "I;16":
        image = Image.fromarray(np.full((size[1], size[0]), 40000, dtype=np.uint16))
    else:
        image = Image.new(mode, size, colour)  # type: ignore[arg-type]
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save)
    return buffer.getvalue()


def animated_gif(frames: int = 3) -> bytes:
    images = [Image.new("P", (32, 32), i * 60) for i in range(frames)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:], duration=100)
    return buffer.getvalue()


def audio_file(path: Path, fmt: str, codec: str, seconds: float = 1.0, rate: int = 48000) -> bytes:
    """A sine tone of ``seconds`` encoded with ``codec`` in container ``fmt``."""
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = "mono"  # type: ignore[union-attr]
        encoder_format = stream.codec_context.codec.audio_formats[0].name  # type: ignore[union-attr]
        total = int(seconds * rate)
        t = np.arange(total) / rate
        tone = 0.3 * np.sin(2 * math.pi * 440 * t)
        frame_size = stream.codec_context.frame_size or 1024  # type: ignore[union-attr]
        for start in range(0, total, frame_size):
            chunk = tone[start : start + frame_size]
            if encoder_format.startswith("s16"):
                data = (chunk * 32767).astype(np.int16).reshape(1, -1)
                layout_fmt = "s16p" if encoder_format.endswith("p") else "s16"
            elif encoder_format.startswith("s32"):
                data = (chunk * 2**31 * 0.9).astype(np.int32).reshape(1, -1)
                layout_fmt = "s32p" if encoder_format.endswith("p") else "s32"
            else:
                data = chunk.astype(np.float32).reshape(1, -1)
                layout_fmt = "fltp" if encoder_format.endswith("p") else "flt"
            frame = av.AudioFrame.from_ndarray(data, format=layout_fmt, layout="mono")
            frame.sample_rate = rate
            frame.pts = start
            frame.time_base = Fraction(1, rate)
            for packet in stream.encode(frame):  # type: ignore[union-attr]
                out.mux(packet)
        for packet in stream.encode(None):  # type: ignore[union-attr]
            out.mux(packet)
    return path.read_bytes()


def video_file(
    path: Path,
    fmt: str,
    codec: str,
    seconds: float = 1.0,
    size: tuple[int, int] = (64, 48),
    fps: int = 10,
) -> bytes:
    """Colour frames of ``size`` for ``seconds``, with ``codec`` in container ``fmt``."""
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height = size  # type: ignore[union-attr]
        stream.pix_fmt = "yuv420p"  # type: ignore[union-attr]
        for index in range(int(seconds * fps)):
            pixels = np.full((size[1], size[0], 3), (index * 20) % 255, dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            for packet in stream.encode(frame):  # type: ignore[union-attr]
                out.mux(packet)
        for packet in stream.encode(None):  # type: ignore[union-attr]
            out.mux(packet)
    return path.read_bytes()


SVG = (
    b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
    b"<script>alert(1)</script><rect width='10' height='10'/></svg>"
)
