"""A QR code of a text, drawn by the ``qrcode`` library. Imports only ``nodeloom.sdk``; the
library itself is imported when the node runs, so reading the spec costs nothing."""

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

MAX_TEXT_BYTES = 2000  # about what a version-40 code holds at level L


class QRCodeParams(Params):
    box_size: int = Field(default=8, ge=1, le=40, description="Pixels per module (square).")
    border: int = Field(default=4, ge=0, le=20, description="Quiet zone, in modules.")
    error_correction: Literal["L", "M", "Q", "H"] = Field(
        default="M", description="Share of the code that may be damaged: L 7%, M 15%, Q 25%, H 30%."
    )


def _draw(text: str, params: QRCodeParams) -> tuple[bytes, int, int]:
    import qrcode
    from qrcode.exceptions import DataOverflowError

    levels = {
        "L": qrcode.constants.ERROR_CORRECT_L,
        "M": qrcode.constants.ERROR_CORRECT_M,
        "Q": qrcode.constants.ERROR_CORRECT_Q,
        "H": qrcode.constants.ERROR_CORRECT_H,
    }
    code = qrcode.QRCode(
        error_correction=levels[params.error_correction],
        box_size=params.box_size,
        border=params.border,
    )
    code.add_data(text)
    try:
        code.make(fit=True)
    except (DataOverflowError, ValueError) as exc:
        raise NodeFailure("the text is too long for a QR code", code="too_long") from exc
    image = code.make_image(fill_color="black", back_color="white").get_image().convert("L")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue(), image.width, image.height


class QRCode(NodeType):
    spec = NodeSpec(
        type="QRCode",
        version=1,
        category="image",
        title="QR code",
        description="A QR code image of the text (a link, a ticket number...).",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.IMAGE),
        params=QRCodeParams,
        cost=Cost(credits=1),
    )

    async def run(
        self, ctx: NodeContext, params: QRCodeParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = inputs["text"]
        assert text is not None and not isinstance(text, list)
        data = text.read_bytes()
        if not data.strip():
            raise NodeFailure("there is no text to encode", code="empty_text")
        if len(data) > MAX_TEXT_BYTES:
            raise NodeFailure("the text is too long for a QR code", code="too_long")
        png, width, height = await ctx.to_thread(_draw, data.decode("utf-8"), params)
        return Produced(data=png, width=width, height=height)


package = NodePackage(sdk=">=1.0,<2", nodes=[QRCode()])
