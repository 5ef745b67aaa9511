"""Image helpers for nodes: decode an input and encode an output within the server's limits.

An image input is decoded only after its declared size is checked against the limits (a
small file can declare a huge canvas: a decompression bomb); an output is refused when its
encoding is larger than an artifact may be. The limits are the server's, read from the
node's context with ``limits(ctx)``.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Protocol

from PIL import Image, ImageColor, UnidentifiedImageError
from pydantic import AfterValidator

from nodeloom.sdk._node import ArtifactRef, InputValue, NodeFailure, Produced

__all__ = [
    "Color",
    "Limits",
    "MediaLimits",
    "check_bytes",
    "check_pixels",
    "color_validator",
    "limits",
    "load_image",
    "one",
    "parse_color",
    "png",
]

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF")


class Limits(Protocol):
    """The server's limits on media, as a node reads them (``limits(ctx)``)."""

    @property
    def max_image_pixels(self) -> int: ...

    @property
    def max_media_seconds(self) -> float: ...

    @property
    def max_artifact_bytes(self) -> int: ...


@dataclass(frozen=True)
class MediaLimits:
    """Limits as plain values: the defaults of a server, used where no server is."""

    max_image_pixels: int = 40_000_000
    max_media_seconds: float = 600.0
    max_artifact_bytes: int = 512_000_000


def limits(ctx: object) -> Limits:
    """The limits that apply to the node running with ``ctx`` (the defaults in tests)."""
    found = getattr(ctx, "limits", None) or getattr(ctx, "settings", None)
    return found if found is not None else MediaLimits()


def check_pixels(limits: Limits, width: int, height: int, what: str = "image") -> None:
    """Refuse (``NodeFailure``, code ``limit_exceeded``) an image of this size."""
    if width < 1 or height < 1:
        raise NodeFailure(f"{what} size {width}x{height} is empty")
    if width * height > limits.max_image_pixels:
        raise NodeFailure(
            f"{what} of {width}x{height} = {width * height:,} pixels exceeds the limit of "
            f"{limits.max_image_pixels:,} pixels",
            code="limit_exceeded",
        )


def check_bytes(limits: Limits, size: int, what: str = "output") -> None:
    """Refuse an output of ``size`` bytes larger than an artifact may be."""
    if size > limits.max_artifact_bytes:
        raise NodeFailure(
            f"{what} of {size:,} bytes exceeds the limit of {limits.max_artifact_bytes:,} bytes",
            code="limit_exceeded",
        )


def one(inputs: Mapping[str, InputValue], name: str) -> ArtifactRef:
    """The single artifact of input ``name``; ``NodeFailure`` when it has none or several."""
    value = inputs.get(name)
    if isinstance(value, list):
        if len(value) != 1:
            raise NodeFailure(f"input {name!r} needs exactly one artifact")
        return value[0]
    if value is None:
        raise NodeFailure(f"input {name!r} is not connected")
    return value


def parse_color(value: str) -> tuple[int, int, int, int]:
    """A CSS-like colour (``#rrggbb``, ``#rrggbbaa``, ``red``, ``rgb(1,2,3)``) as RGBA."""
    rgb = ImageColor.getcolor(value, "RGBA")
    assert isinstance(rgb, tuple)
    return (rgb[0], rgb[1], rgb[2], rgb[3])


def color_validator(value: str) -> str:
    """Pydantic validator: refuse unknown colours at graph validation, not mid-run."""
    try:
        parse_color(value)
    except ValueError as exc:
        raise ValueError(f"not a colour: {value!r}") from exc
    return value


Color = Annotated[str, AfterValidator(color_validator)]
"""A params field holding a colour, checked when the workflow is saved."""


def load_image(ref: ArtifactRef, limits: Limits) -> Image.Image:
    """Decode an image input (RGB, or RGBA when it has transparency), checking its declared
    size *before* pixels are decoded."""
    try:
        image = Image.open(ref.path, formats=IMAGE_FORMATS)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
        raise NodeFailure(f"input is not a readable image: {exc}") from exc
    with image:
        check_pixels(limits, *image.size, what="input image")
        try:
            image.load()
        except (OSError, ValueError) as exc:
            raise NodeFailure(f"input image is damaged: {exc}") from exc
        wanted = (
            "RGBA" if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info else "RGB"
        )
        return image.convert(wanted)


def png(image: Image.Image, limits: Limits) -> Produced:
    """Encode as PNG. Level 1 is ~5x faster than the default and only slightly larger for the
    flat, synthetic images most nodes make."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    data = buffer.getvalue()
    check_bytes(limits, len(data), "image")
    return Produced(data=data, width=image.width, height=image.height)
