"""A text watermark stamped in a corner of an image. Imports only ``nodeloom.sdk``."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from nodeloom.sdk import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodePackage,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
)


class WatermarkParams(Params):
    text: str = Field(default="(c) studio", min_length=1, max_length=200, description="The mark.")
    corner: Literal["top-left", "top-right", "bottom-left", "bottom-right"] = Field(
        default="bottom-right", description="Where the mark goes."
    )
    opacity: float = Field(default=0.5, ge=0.0, le=1.0, description="0 invisible, 1 opaque.")


def _stamp(data: bytes, params: WatermarkParams) -> tuple[bytes, int, int]:
    from PIL import Image, ImageDraw, ImageFont, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data)).convert("RGBA")
    except UnidentifiedImageError as exc:
        raise NodeFailure("the input is not an image", code="bad_input") from exc
    layer = Image.new("RGBA", image.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    font = ImageFont.load_default()
    left, top, right, bottom = draw.textbbox((0, 0), params.text, font=font)
    width, height = right - left, bottom - top
    margin = 4
    x = margin if params.corner.endswith("left") else image.width - width - margin
    y = margin if params.corner.startswith("top") else image.height - height - margin
    draw.text((x, y), params.text, font=font, fill=(255, 255, 255, round(255 * params.opacity)))
    out = io.BytesIO()
    Image.alpha_composite(image, layer).convert("RGB").save(out, format="PNG")
    return out.getvalue(), image.width, image.height


class Watermark(NodeType):
    spec = NodeSpec(
        type="Watermark",
        version=1,
        category="image",
        title="Watermark",
        description="Stamps a text mark in a corner of the image.",
        inputs=(Input("image", Kind.IMAGE),),
        output=Output(Kind.IMAGE),
        params=WatermarkParams,
        cost=Cost(credits=1),
    )

    async def run(
        self, ctx: NodeContext, params: WatermarkParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        image = inputs["image"]
        assert image is not None and not isinstance(image, list)
        data, width, height = await ctx.to_thread(_stamp, image.read_bytes(), params)
        await ctx.progress(1.0)
        return Produced(data=data, width=width, height=height)


package = NodePackage(sdk=">=1.0,<2", nodes=[Watermark()])
