"""Media input nodes: ``ImageInput``, ``AudioInput`` and ``VideoInput``, beside ``TextInput``.

Each takes ``input[key]`` of the run's input data (execute body ``input``, webhook body):
the id of an asset of the account (an upload, docs/media-inputs.md) or of an artifact an
earlier run of the account produced; with no such key, the node's ``asset`` param. Another
account's id fails the node exactly like an unknown one.

The output is the stored file itself, not a copy: the node's artifact holds the asset's
blob (same sha256), so the nodes it feeds find it in their output cache by content.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from nodeloom.nodes.inline import InlineNode
from nodeloom.sdk._node import (
    Cost,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
    StoredMedia,
)

ID_LENGTH = 36
MEDIA_INPUT_TYPES = frozenset({"ImageInput", "AudioInput", "VideoInput"})


class MediaInputParams(Params):
    key: str = Field(
        default="",
        max_length=200,
        description="Take input[key] from the run's input data: an asset id, or the id of an "
        "artifact of an earlier run of the account.",
    )
    asset: str | None = Field(
        default=None,
        max_length=ID_LENGTH,
        description="The asset used when the run's input data has no such key.",
    )


def chosen_reference(params: MediaInputParams, data: Mapping[str, Any] | None) -> str | None:
    """The id the node outputs for the run's input ``data``."""
    if data and params.key and params.key in data:
        value = data[params.key]
        if not isinstance(value, str):
            raise NodeFailure(
                f"input {params.key!r} must be an asset id or an artifact id (a string)"
            )
        return value.strip()
    return params.asset


class _MediaInput(InlineNode):
    kind: ClassVar[Kind]

    def param_problems(self, params: MediaInputParams) -> list[str]:
        if not params.key and not params.asset:
            return ["set key (to take the run's input) or asset (a default), or both"]
        return []

    async def run(
        self, ctx: NodeContext, params: MediaInputParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        reference = chosen_reference(params, ctx.input)
        if not reference:
            raise NodeFailure(f"the run's input data has no key {params.key!r} and no asset is set")
        find = getattr(ctx, "find_media", None)
        if find is None:
            raise NodeFailure("media inputs are read by the server, not in a sandbox")
        found: StoredMedia | None = await find(reference)
        if found is None:
            raise NodeFailure(f"no asset or artifact {reference!r} in this account", "not_found")
        wanted = self.spec.output.content_type
        if found.content_type != wanted:
            raise NodeFailure(
                f"{reference} is {found.content_type}, not {wanted}: connect a "
                f"{self.spec.type} to {self.kind.value} only",
                "kind_mismatch",
            )
        return Produced(
            stored=found, width=found.width, height=found.height, duration_ms=found.duration_ms
        )


def _spec(type_: str, kind: Kind, title: str) -> NodeSpec:
    return NodeSpec(
        type=type_,
        version=1,
        category=kind.value,
        title=title,
        description=f"An {kind.value} the run brings: input[key] (an asset id or an artifact "
        "id of the account), or the asset param.",
        inputs=(),
        output=Output(kind),
        params=MediaInputParams,
        cost=Cost(credits=0),
        uses_run_input=True,
        sandboxed=False,  # a database look-up; no bytes are touched
    )


class ImageInput(_MediaInput):
    kind = Kind.IMAGE
    spec = _spec("ImageInput", Kind.IMAGE, "Image input")


class AudioInput(_MediaInput):
    kind = Kind.AUDIO
    spec = _spec("AudioInput", Kind.AUDIO, "Audio input")


class VideoInput(_MediaInput):
    kind = Kind.VIDEO
    spec = _spec("VideoInput", Kind.VIDEO, "Video input")


NODES: list[NodeType] = [ImageInput(), AudioInput(), VideoInput()]
