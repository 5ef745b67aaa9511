"""Image nodes: render text, resize, caption, grid, backgrounds (crop, rotate and filters,
written on the public SDK, are in ``image_filters.py``).

Every output is PNG. Sizes a node is asked to create are checked against
``settings.max_image_pixels`` before any pixel is allocated; inputs are checked in
``media.load_image`` before they are decoded.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from PIL import Image, ImageDraw
from pydantic import AfterValidator, Field

from nodeloom.nodes import media
from nodeloom.nodes.image_filters import ImageChange
from nodeloom.sdk._node import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
    input_text,
)
from nodeloom.sdk.images import Limits
from nodeloom.settings import Settings

Color = Annotated[str, AfterValidator(media.color_validator)]
Side = Annotated[int, Field(ge=1, le=16_384)]
MAX_RENDER_CHARS = 20_000  # beyond this nothing legible fits on any canvas we allow
MIN_FONT = 8
MAX_FONT = 400
LINE_SPACING = 1.15


# ----------------------------------------------------------------------------- text layout


@dataclass(frozen=True)
class TextBlock:
    size: int
    lines: list[str]
    line_height: int


def _wrap(text: str, size: int, max_width: float, max_lines: int) -> list[str]:
    """Greedy word wrap measured with the real font; words longer than a line are broken.
    Stops once ``max_lines + 1`` lines exist: the caller only needs to know it overflows,
    which keeps the fitting search cheap for long texts at large sizes."""
    face = media.font(size)
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split():
            candidate = f"{line} {word}" if line else word
            if face.getlength(candidate) <= max_width:
                line = candidate
                continue
            if line:
                lines.append(line)
            line = ""
            if face.getlength(word) > max_width:
                pieces = _break_word(size, word, max_width, max_lines - len(lines) + 1)
                lines.extend(pieces[:-1])
                word = pieces[-1]
            line = word
            if len(lines) > max_lines:
                return lines
        lines.append(line)
        if len(lines) > max_lines:
            return lines
    return lines


@functools.lru_cache(maxsize=8192)
def _advance(size: int, char: str) -> float:
    return float(media.font(size).getlength(char))


def _break_word(size: int, word: str, max_width: float, max_pieces: int) -> list[str]:
    """Cut a word wider than a line into pieces that fit (at least one character each),
    summing cached per-character advances: linear in the word's length, and no further
    than ``max_pieces`` (the rest stays in the last piece)."""
    pieces: list[str] = []
    start, width = 0, 0.0
    for index, char in enumerate(word):
        advance = _advance(size, char)
        if width + advance > max_width and index > start:
            pieces.append(word[start:index])
            start, width = index, 0.0
            if len(pieces) >= max_pieces:
                break
        width += advance
    pieces.append(word[start:])
    return pieces


def _line_height(size: int) -> int:
    ascent, descent = media.font(size).getmetrics()
    return max(1, round((ascent + descent) * LINE_SPACING))


def layout_text(text: str, width: int, height: int, max_size: int = MAX_FONT) -> TextBlock:
    """The largest font size at which ``text`` wraps into ``width`` x ``height``; a binary
    search, because the wrapped height only grows with the size. When even the smallest size
    overflows, the lines that fit are kept and the last one ends in an ellipsis."""
    text = text.strip()[:MAX_RENDER_CHARS]
    lo, hi = MIN_FONT, max(MIN_FONT, min(max_size, height))
    best: TextBlock | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        lh = _line_height(mid)
        lines = _wrap(text, mid, width, height // lh)
        if lh * len(lines) <= height:
            best = TextBlock(mid, lines, lh)
            lo = mid + 1
        else:
            hi = mid - 1
    if best is not None:
        return best
    lh = _line_height(MIN_FONT)
    keep = max(1, height // lh)
    lines = _wrap(text, MIN_FONT, width, keep)
    if len(lines) > keep:
        lines = [*lines[: keep - 1], lines[keep - 1].rstrip() + "…"]
    return TextBlock(MIN_FONT, lines, lh)


def draw_block(
    canvas: Image.Image,
    block: TextBlock,
    box: tuple[int, int, int, int],
    color: str,
    align: str = "center",
) -> None:
    """Draw ``block`` vertically centred in ``box`` (left, top, right, bottom)."""
    draw = ImageDraw.Draw(canvas)
    face = media.font(block.size)
    left, top, right, bottom = box
    y = top + (bottom - top - block.line_height * len(block.lines)) // 2
    fill = media.parse_color(color)
    for line in block.lines:
        w = face.getlength(line)
        if align == "left":
            x = float(left)
        elif align == "right":
            x = right - w
        else:
            x = left + (right - left - w) / 2
        draw.text((x, y), line, font=face, fill=fill)
        y += block.line_height


def render_text_image(
    text: str, width: int, height: int, background: str, color: str, align: str = "center"
) -> Image.Image:
    canvas = Image.new("RGB", (width, height), media.parse_color(background)[:3])
    margin = max(4, round(min(width, height) * 0.06))
    block = layout_text(text, width - 2 * margin, height - 2 * margin)
    draw_block(canvas, block, (margin, margin, width - margin, height - margin), color, align)
    return canvas


def caption_overlay(
    base: Image.Image, text: str, position: str, color: str, band: str, max_fraction: float
) -> Image.Image:
    """Composite a caption band (text on a translucent bar) onto ``base``; shared with the
    video caption node so a burnt-in caption looks the same."""
    width, height = base.size
    margin = max(2, round(min(width, height) * 0.03))
    box_h = max(MIN_FONT + 2, round(height * max_fraction))
    block = layout_text(
        text, width - 4 * margin, box_h - 2 * margin, max_size=max(10, height // 12)
    )
    band_h = block.line_height * len(block.lines) + 2 * margin
    top = {"top": 0, "center": (height - band_h) // 2}.get(position, height - band_h)
    overlay = Image.new("RGBA", base.size, (0, 0, 0, 0))
    ImageDraw.Draw(overlay).rectangle((0, top, width, top + band_h), fill=media.parse_color(band))
    draw_block(overlay, block, (2 * margin, top, width - 2 * margin, top + band_h), color)
    return Image.alpha_composite(base.convert("RGBA"), overlay)


# ----------------------------------------------------------------------------- nodes


def _image_spec(
    type_: str, title: str, description: str, params: type[Params], *inputs: Input, credits: int = 1
) -> NodeSpec:
    return NodeSpec(
        type=type_,
        version=1,
        category="image",
        title=title,
        description=description,
        inputs=inputs,
        output=Output(Kind.IMAGE),
        params=params,
        cost=Cost(credits=credits),
    )


class RenderTextParams(Params):
    width: Side = Field(default=1024, description="Canvas width in pixels.")
    height: Side = Field(default=1024, description="Canvas height in pixels.")
    background: Color = Field(default="#111827", description="Canvas colour (CSS syntax).")
    color: Color = Field(default="#ffffff", description="Text colour (CSS syntax).")
    align: Literal["left", "center", "right"] = Field(default="center", description="Alignment.")


class RenderText(NodeType):
    spec = _image_spec(
        "RenderText",
        "Render text",
        "Draw text on a canvas, word-wrapped and sized to fill it (accents and Cyrillic ok).",
        RenderTextParams,
        Input("text", Kind.TEXT),
        credits=2,
    )

    async def run(
        self, ctx: NodeContext, params: RenderTextParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        media.check_pixels(ctx.settings, params.width, params.height)
        text = input_text(inputs) or ""

        def work() -> Produced:
            image = render_text_image(
                text, params.width, params.height, params.background, params.color, params.align
            )
            return media.png_bytes(image, ctx.settings)

        return await ctx.to_thread(work)


class ImageResizeParams(Params):
    width: Side = Field(default=512, description="Output width in pixels.")
    height: Side = Field(default=512, description="Output height in pixels.")
    fit: Literal["stretch", "cover", "contain"] = Field(
        default="stretch",
        description="stretch: exactly width x height; cover: fill and crop the overflow; "
        "contain: fit inside, letterboxed with `background`.",
    )
    background: Color = Field(default="#000000", description="Letterbox colour for contain.")


class ImageResize(ImageChange):
    spec = _image_spec(
        "ImageResize",
        "Resize image",
        "Scale an image to width x height (stretch, cover or contain).",
        ImageResizeParams,
        Input("image", Kind.IMAGE),
    )

    def check(self, params: ImageResizeParams, allowed: Limits) -> None:
        media.check_pixels(allowed, params.width, params.height)

    def change(self, image: Image.Image, params: ImageResizeParams, allowed: Limits) -> Image.Image:
        size = (params.width, params.height)
        if params.fit == "cover":
            return media.fit_cover(image, *size)
        if params.fit == "contain":
            return media.fit_contain(image, *size, params.background)
        return image.resize(size, Image.Resampling.LANCZOS)


class ImageThumbnailParams(Params):
    max_size: Annotated[int, Field(ge=8, le=4096)] = Field(
        default=256, description="Longest side of the thumbnail; never enlarges."
    )


class ImageThumbnail(ImageChange):
    spec = _image_spec(
        "ImageThumbnail",
        "Thumbnail",
        "Shrink an image so its longest side is at most max_size, keeping the aspect ratio.",
        ImageThumbnailParams,
        Input("image", Kind.IMAGE),
    )

    def change(
        self, image: Image.Image, params: ImageThumbnailParams, allowed: Limits
    ) -> Image.Image:
        image.thumbnail((params.max_size, params.max_size), Image.Resampling.LANCZOS)
        return image


class ImageCaptionParams(Params):
    position: Literal["top", "center", "bottom"] = Field(default="bottom", description="Where.")
    color: Color = Field(default="#ffffff", description="Text colour.")
    band: Color = Field(default="#000000a0", description="Colour of the bar behind the text.")
    max_height: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.3, description="Largest share of the image height the caption may take."
    )


class ImageCaption(NodeType):
    spec = _image_spec(
        "ImageCaption",
        "Caption image",
        "Overlay text on a translucent bar at the top, centre or bottom of an image.",
        ImageCaptionParams,
        Input("image", Kind.IMAGE),
        Input("text", Kind.TEXT),
    )

    async def run(
        self, ctx: NodeContext, params: ImageCaptionParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        ref = media.one(inputs, "image")
        text = input_text(inputs) or ""

        def work() -> Produced:
            image = media.load_image(ref, ctx.settings)
            out = caption_overlay(
                image, text, params.position, params.color, params.band, params.max_height
            )
            return media.png_bytes(out.convert(image.mode), ctx.settings)

        return await ctx.to_thread(work)


class ImageGridParams(Params):
    columns: Annotated[int, Field(ge=0, le=32)] = Field(
        default=0, description="Columns; 0 picks a near-square grid."
    )
    cell_width: Side = Field(default=512, description="Width of each cell.")
    cell_height: Side = Field(default=512, description="Height of each cell.")
    gap: Annotated[int, Field(ge=0, le=512)] = Field(default=8, description="Space between cells.")
    background: Color = Field(default="#ffffff", description="Colour behind and between cells.")
    fit: Literal["cover", "contain"] = Field(default="cover", description="How images fill cells.")


class ImageGrid(NodeType):
    spec = _image_spec(
        "ImageGrid",
        "Image grid",
        "Lay several images out in a grid (a collage), in edge order.",
        ImageGridParams,
        Input("images", Kind.IMAGE, multiple=True),
        credits=2,
    )

    async def run(
        self, ctx: NodeContext, params: ImageGridParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        refs = media.many(inputs, "images")
        if not refs:
            raise NodeFailure("connect at least one image")
        count = len(refs)
        columns = params.columns or int(np.ceil(np.sqrt(count)))
        rows = -(-count // columns)
        width = columns * params.cell_width + (columns + 1) * params.gap
        height = rows * params.cell_height + (rows + 1) * params.gap
        media.check_pixels(ctx.settings, width, height, "grid")

        def work() -> Produced:
            canvas = Image.new("RGB", (width, height), media.parse_color(params.background)[:3])
            for index, ref in enumerate(refs):
                image = media.load_image(ref, ctx.settings)
                cw, ch = params.cell_width, params.cell_height
                if params.fit == "cover":
                    cell = media.fit_cover(image.convert("RGB"), cw, ch)
                else:
                    cell = media.fit_contain(image, cw, ch, params.background)
                row, col = divmod(index, columns)
                x = params.gap + col * (cw + params.gap)
                y = params.gap + row * (ch + params.gap)
                canvas.paste(cell, (x, y))
            return media.png_bytes(canvas, ctx.settings)

        return await ctx.to_thread(work)


class GradientParams(Params):
    width: Side = Field(default=1024, description="Width in pixels.")
    height: Side = Field(default=1024, description="Height in pixels.")
    color_from: Color = Field(default="#1e3a8a", description="Start colour.")
    color_to: Color = Field(default="#9333ea", description="End colour (same as start: solid).")
    direction: Literal["vertical", "horizontal", "diagonal", "radial"] = Field(
        default="vertical", description="Direction of the blend."
    )


GRADIENT_CHUNK_PIXELS = 1 << 20


def gradient(settings: Settings, params: GradientParams) -> Image.Image:
    """Computed a band of rows at a time into one uint8 canvas: a 36-megapixel canvas takes
    its own 144 MB plus a few MB, not the gigabyte that whole-canvas float arrays would."""
    media.check_pixels(settings, params.width, params.height)
    w, h = params.width, params.height
    start = np.array(media.parse_color(params.color_from), np.float32)
    span = np.array(media.parse_color(params.color_to), np.float32) - start
    xs = (np.arange(w, dtype=np.float32) / max(1, w - 1))[None, :]
    canvas = np.empty((h, w, 4), np.uint8)
    rows = max(1, GRADIENT_CHUNK_PIXELS // w)
    for top in range(0, h, rows):
        ys = (np.arange(top, min(h, top + rows), dtype=np.float32) / max(1, h - 1))[:, None]
        if params.direction == "horizontal":
            t = np.broadcast_to(xs, (ys.shape[0], w))
        elif params.direction == "vertical":
            t = np.broadcast_to(ys, (ys.shape[0], w))
        elif params.direction == "diagonal":
            t = (xs + ys) / 2
        else:
            t = np.minimum(1.0, np.hypot(xs - 0.5, ys - 0.5) / np.float32(np.sqrt(0.5)))
        canvas[top : top + ys.shape[0]] = np.round(start + span * t[..., None]).astype(np.uint8)
    return Image.fromarray(canvas, "RGBA")


class GradientBackground(NodeType):
    spec = _image_spec(
        "GradientBackground",
        "Gradient or solid background",
        "A canvas filled with a linear or radial gradient between two colours (or one colour).",
        GradientParams,
    )

    async def run(
        self, ctx: NodeContext, params: GradientParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        def work() -> Produced:
            image = gradient(ctx.settings, params)
            if image.getchannel("A").getextrema() == (255, 255):
                image = image.convert("RGB")  # opaque: no alpha channel needed
            return media.png_bytes(image, ctx.settings)

        return await ctx.to_thread(work)


NODES: list[NodeType] = [
    RenderText(),
    ImageResize(),
    ImageThumbnail(),
    ImageCaption(),
    ImageGrid(),
    GradientBackground(),
]
