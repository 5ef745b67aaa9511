"""Image filters: crop, rotate and the classic effects (blur, sharpen, grayscale, sepia,
invert, edges, contour).

Written against the public SDK only (``nodeloom.sdk``, ``nodeloom.sdk.images``), as a node
package would be; they stay built in. A test checks they import nothing else of ``nodeloom``.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import numpy as np
from PIL import Image, ImageFilter, ImageOps
from pydantic import Field

from nodeloom.sdk import (
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
from nodeloom.sdk.images import (
    Color,
    Limits,
    check_pixels,
    limits,
    load_image,
    one,
    parse_color,
    png,
)

Side = Annotated[int, Field(ge=1, le=16_384)]
_spec = spec_family("image", Kind.IMAGE, Cost(credits=1))


class ImageChange(NodeType):
    """A node that changes its one ``image`` input into a PNG, in a worker thread (the
    image nodes of ``image.py`` that take one image are written on it too)."""

    @abstractmethod
    def change(self, image: Image.Image, params: Any, allowed: Limits) -> Image.Image:
        """The changed image; ``allowed``: the server's limits, for a size the change creates."""

    def check(self, params: Any, allowed: Limits) -> None:
        """Refuse params before the input is decoded (a size asked for); by default none."""

    async def run(
        self, ctx: NodeContext, params: Any, inputs: Mapping[str, InputValue]
    ) -> Produced:
        allowed = limits(ctx)
        self.check(params, allowed)
        ref = one(inputs, "image")

        def work() -> Produced:
            return png(self.change(load_image(ref, allowed), params, allowed), allowed)

        return await ctx.to_thread(work)


class ImageCropParams(Params):
    left: Annotated[int, Field(ge=0)] = Field(default=0, description="Left edge, pixels.")
    top: Annotated[int, Field(ge=0)] = Field(default=0, description="Top edge, pixels.")
    width: Side = Field(default=256, description="Crop width; clipped to the image.")
    height: Side = Field(default=256, description="Crop height; clipped to the image.")


class ImageCrop(ImageChange):
    spec = _spec(
        "ImageCrop",
        "Crop image",
        "Cut out a rectangle (left, top, width, height); clipped at the image's edges.",
        ImageCropParams,
        Input("image", Kind.IMAGE),
    )

    def change(self, image: Image.Image, params: ImageCropParams, allowed: Limits) -> Image.Image:
        if params.left >= image.width or params.top >= image.height:
            raise NodeFailure(
                f"crop origin ({params.left}, {params.top}) is outside the "
                f"{image.width}x{image.height} image"
            )
        right = min(image.width, params.left + params.width)
        bottom = min(image.height, params.top + params.height)
        return image.crop((params.left, params.top, right, bottom))


class ImageRotateParams(Params):
    degrees: Annotated[float, Field(ge=-360, le=360)] = Field(
        default=90, description="Counter-clockwise angle."
    )
    expand: bool = Field(default=True, description="Grow the canvas so no corner is cut.")
    background: Color = Field(default="#00000000", description="Fill of uncovered corners.")


class ImageRotate(ImageChange):
    spec = _spec(
        "ImageRotate",
        "Rotate image",
        "Rotate counter-clockwise by any angle; uncovered corners take the background colour.",
        ImageRotateParams,
        Input("image", Kind.IMAGE),
    )

    def change(self, image: Image.Image, params: ImageRotateParams, allowed: Limits) -> Image.Image:
        image = image.convert("RGBA")
        if params.expand:  # the rotated bounding box holds more pixels than the input
            angle = math.radians(params.degrees)
            cos, sin = abs(math.cos(angle)), abs(math.sin(angle))
            width = math.ceil(image.width * cos + image.height * sin)
            height = math.ceil(image.width * sin + image.height * cos)
            check_pixels(allowed, width, height, "rotated image")
        return image.rotate(
            params.degrees,
            resample=Image.Resampling.BICUBIC,
            expand=params.expand,
            fillcolor=parse_color(params.background),
        )


FilterName = Literal["blur", "sharpen", "grayscale", "sepia", "invert", "edges", "contour"]


class ImageFilterParams(Params):
    filter: FilterName = Field(default="grayscale", description="Which effect to apply.")
    radius: Annotated[float, Field(ge=0, le=100)] = Field(
        default=4, description="Blur radius in pixels (blur only)."
    )


def apply_filter(image: Image.Image, name: str, radius: float) -> Image.Image:
    alpha = image.getchannel("A") if image.mode == "RGBA" else None
    rgb = image.convert("RGB")
    if name == "blur":
        out = rgb.filter(ImageFilter.GaussianBlur(radius))
    elif name == "sharpen":
        out = rgb.filter(ImageFilter.UnsharpMask(radius=2, percent=150, threshold=3))
    elif name == "grayscale":
        out = ImageOps.grayscale(rgb).convert("RGB")
    elif name == "sepia":
        # The classic sepia matrix, applied with numpy (one pass, no per-pixel Python).
        matrix = np.array(
            [[0.393, 0.769, 0.189], [0.349, 0.686, 0.168], [0.272, 0.534, 0.131]], np.float32
        )
        pixels = np.asarray(rgb, dtype=np.float32) @ matrix.T
        out = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    elif name == "invert":
        out = ImageOps.invert(rgb)
    elif name == "edges":
        out = rgb.filter(ImageFilter.FIND_EDGES)
    else:
        out = rgb.filter(ImageFilter.CONTOUR)
    if alpha is not None:
        out.putalpha(alpha)
    return out


class ImageFilterNode(ImageChange):
    spec = _spec(
        "ImageFilter",
        "Image filter",
        "Blur, sharpen, grayscale, sepia, invert, edges or contour.",
        ImageFilterParams,
        Input("image", Kind.IMAGE),
    )

    def change(self, image: Image.Image, params: ImageFilterParams, allowed: Limits) -> Image.Image:
        return apply_filter(image, params.filter, params.radius)


NODES: list[NodeType] = [ImageCrop(), ImageRotate(), ImageFilterNode()]
