"""Nodes over hosted model APIs (nodes/adapters): ``ReplicateModel`` and ``FalModel`` (any
model, its input object written by hand with fields bound to upstream artifacts), and the
families ``ImageToVideo``, ``TextToVideo`` and ``TextToMusic``, whose provider is the kind of
the credential they name (replicate or fal).

A binding names a field of the model's input and one of the node's inputs: text is sent as
a string, an image, audio or video as a ``data:`` URI (both Replicate and fal accept files
that way). What the model returns is downloaded (SSRF-checked, bounded) and converted to the
node's output type in a sandbox process. See docs/providers.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from nodeloom.nodes.adapters import fal, policy, replicate
from nodeloom.sdk._node import (
    ArtifactRef,
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

INPUT_JSON_MAX = 64 * 1024  # characters of a node's own input object
Binding = Literal["text", "image", "audio", "video"]
FieldName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[\w.-]+$")]
MODEL_PATTERN = f"(?:{replicate.MODEL_PATTERN})|(?:{fal.MODEL_PATTERN})"

MEDIA_INPUTS = (
    Input("text", Kind.TEXT, required=False),
    Input("image", Kind.IMAGE, required=False),
    Input("audio", Kind.AUDIO, required=False),
    Input("video", Kind.VIDEO, required=False),
)


def _input_problems(payload: Mapping[str, Any]) -> list[str]:
    if len(json.dumps(payload)) > INPUT_JSON_MAX:
        return [f"input is larger than {INPUT_JSON_MAX} characters as JSON"]
    return []


async def bound_value(inputs: Mapping[str, InputValue], name: str) -> Any:
    """The value sent for a field bound to the node's input ``name``."""
    value = inputs.get(name)
    if value is None:
        raise NodeFailure(f"a field is bound to the {name} input, which is not connected")
    ref = value[0] if isinstance(value, list) else value
    assert isinstance(ref, ArtifactRef)
    if name == "text":
        return input_text(inputs, "text")
    return await policy.data_uri(ref)


async def model_input(
    base: Mapping[str, Any], bindings: Mapping[str, str], inputs: Mapping[str, InputValue]
) -> dict[str, Any]:
    payload = dict(base)
    for field_name, source in bindings.items():
        payload[field_name] = await bound_value(inputs, source)
    return payload


# ----------------------------------------------------------------------------- any model


class _ModelParams(Params):
    model: str = Field(
        min_length=1,
        max_length=200,
        pattern=MODEL_PATTERN,
        description="The model to run.",
    )
    input: dict[str, Any] = Field(
        default_factory=dict, description="The model's input object, sent as it is."
    )
    bindings: dict[FieldName, Binding] = Field(
        default_factory=dict,
        max_length=20,
        description="Fields of the input set from the node's inputs: field name -> text, "
        "image, audio or video (media are sent as data: URIs).",
    )
    output_index: int = Field(
        default=0, ge=0, le=99, description="Which of the files the model returns to keep."
    )
    output_path: str = Field(
        default="",
        max_length=200,
        pattern=r"^([\w-]+(\.[\w-]+)*)?$",
        description="Where the output is in the model's answer (e.g. images.0.url); empty: "
        "the files found in it, in order.",
    )


class ReplicateModelParams(_ModelParams):
    credential: str = policy.credential_field(replicate.KIND)
    model: str = Field(
        min_length=1,
        max_length=200,
        pattern=replicate.MODEL_PATTERN,
        description="owner/name (its latest version), owner/name:version or a version id.",
    )
    wait_seconds: int = Field(
        default=0,
        ge=0,
        le=60,
        description="Ask Replicate to hold the create call up to this long (Prefer: wait) "
        "for a fast model; 0 polls from the start. A crash during that wait submits again.",
    )


class FalModelParams(_ModelParams):
    credential: str = policy.credential_field(fal.KIND)
    model: str = Field(
        min_length=1,
        max_length=200,
        pattern=fal.MODEL_PATTERN,
        description="fal model id, e.g. fal-ai/flux/dev.",
    )


class _Timed(Params):
    """The length held for a model that answers audio or video (charged for what it is)."""

    max_seconds: int = Field(
        default=30,
        ge=1,
        le=600,
        description="Longest output expected, in seconds: the estimate holds it; the charge "
        "counts the real length, never more.",
    )


class ReplicateModelTimedParams(ReplicateModelParams, _Timed):
    pass


class FalModelTimedParams(FalModelParams, _Timed):
    pass


# Per call; audio and video also per started second of what comes back.
ANY_MODEL_COST = {
    Kind.IMAGE: Cost(credits=10),
    Kind.TEXT: Cost(credits=10),
    Kind.VIDEO: Cost(credits=10, per_second=5),
    Kind.AUDIO: Cost(credits=5, per_second=1),
}
_TIMED: dict[type[Params], type[Params]] = {
    ReplicateModelParams: ReplicateModelTimedParams,
    FalModelParams: FalModelTimedParams,
}

_ANY_OUTPUT = {
    Kind.IMAGE: ("", "image"),
    Kind.VIDEO: ("Video", "video"),
    Kind.AUDIO: ("Audio", "audio"),
    Kind.TEXT: ("Text", "text"),
}


class ReplicateModelNode(NodeType):
    """Base of ReplicateModel (an image) and ReplicateModelVideo/Audio/Text."""

    output_kind: Kind = Kind.IMAGE

    def needs_deep_check(self, params: Any) -> bool:
        return False  # nothing to check beyond the params schema and param_problems

    def param_problems(self, params: ReplicateModelParams) -> list[str]:
        return _input_problems(params.input)

    async def run(
        self, ctx: NodeContext, params: ReplicateModelParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        pctx = policy.provider_context(ctx)
        payload = await model_input(params.input, params.bindings, inputs)
        return await replicate.run(
            pctx,
            params.model,
            payload,
            self.output_kind,
            output_index=params.output_index,
            output_path=params.output_path,
            wait_seconds=params.wait_seconds,
        )


class FalModelNode(NodeType):
    output_kind: Kind = Kind.IMAGE

    def needs_deep_check(self, params: Any) -> bool:
        return False  # nothing to check beyond the params schema and param_problems

    def param_problems(self, params: FalModelParams) -> list[str]:
        return _input_problems(params.input)

    async def run(
        self, ctx: NodeContext, params: FalModelParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        pctx = policy.provider_context(ctx)
        payload = await model_input(params.input, params.bindings, inputs)
        return await fal.run(
            pctx,
            params.model,
            payload,
            self.output_kind,
            output_index=params.output_index,
            output_path=params.output_path,
        )


def _any_model(base: type[NodeType], provider: str, params: type[Params], kind: Kind) -> NodeType:
    suffix, noun = _ANY_OUTPUT[kind]
    if kind in (Kind.AUDIO, Kind.VIDEO):
        params = _TIMED[params]
    name = f"{provider}Model{suffix}"
    shown = "fal" if provider == "Fal" else provider  # fal writes its name in lower case
    title = f"{shown} model ({noun})"
    spec = NodeSpec(
        type=name,
        version=1,
        category="ai",
        title=title,
        description=f"Run any {shown} model with your {shown} credential; its input "
        f"object's fields may be bound to the node's inputs; keeps one {noun} it returns.",
        inputs=MEDIA_INPUTS,
        output=Output(kind),
        params=params,
        cost=ANY_MODEL_COST[kind],
        sandboxed=False,
        adapter=True,
        credential_kinds=(provider.lower(),),
    )
    cls = type(name, (base,), {"spec": spec, "output_kind": kind})
    node: NodeType = cls()
    return node


# ----------------------------------------------------------------------------- families


class _FamilyParams(Params):
    credential: str = policy.credential_field(replicate.KIND, fal.KIND)
    model: str = Field(
        min_length=1,
        max_length=200,
        pattern=MODEL_PATTERN,
        description="The model: owner/name[:version] at Replicate, a model id at fal.",
    )
    prompt_field: FieldName = Field(default="prompt", description="Input field of the prompt.")
    duration_field: str = Field(
        default="duration",
        max_length=100,
        pattern=r"^[\w.-]*$",
        description="Input field of the length in seconds; empty: not sent.",
    )
    input: dict[str, Any] = Field(
        default_factory=dict, description="More input fields, sent as they are."
    )


class TextToVideoParams(_FamilyParams):
    duration_seconds: int = Field(default=5, ge=1, le=60, description="Length asked for.")


class ImageToVideoParams(TextToVideoParams):
    image_field: str = Field(
        default="",
        max_length=100,
        pattern=r"^[\w.-]*$",
        description="Input field of the image; empty: image (Replicate) or image_url (fal).",
    )


class TextToMusicParams(_FamilyParams):
    duration_seconds: int = Field(default=10, ge=1, le=300, description="Length asked for.")


class _Family(NodeType):
    def needs_deep_check(self, params: Any) -> bool:
        return False  # nothing to check beyond the params schema and param_problems

    def estimate_seconds(self, params: Any) -> float:
        return float(params.duration_seconds)

    def param_problems(self, params: Any) -> list[str]:
        return _input_problems(params.input)

    async def _payload(self, params: Any, inputs: Mapping[str, InputValue]) -> dict[str, Any]:
        payload = dict(params.input)
        prompt = input_text(inputs)
        if prompt is not None and prompt.strip():
            payload[params.prompt_field] = prompt
        elif self.spec.inputs[0].kind == Kind.TEXT:  # the prompt is the node's main input
            raise NodeFailure("the prompt is empty")
        if params.duration_field:
            payload[params.duration_field] = params.duration_seconds
        return payload

    async def _run(self, ctx: NodeContext, model: str, payload: dict[str, Any]) -> Produced:
        pctx = policy.provider_context(ctx)
        credential = policy.require_credential(pctx, replicate.KIND, fal.KIND)
        kind = self.spec.output.kind
        if credential.kind == fal.KIND:
            return await fal.run(pctx, model, payload, kind)
        return await replicate.run(pctx, model, payload, kind)


def _family_spec(
    type_: str,
    title: str,
    description: str,
    params: type[Params],
    output: Kind,
    cost: Cost,
    *inputs: Input,
) -> NodeSpec:
    return NodeSpec(
        type=type_,
        version=1,
        category="ai",
        title=title,
        description=description,
        inputs=inputs,
        output=Output(output),
        params=params,
        cost=cost,
        sandboxed=False,
        adapter=True,
        credential_kinds=(replicate.KIND, fal.KIND),
    )


class TextToVideo(_Family):
    spec = _family_spec(
        "TextToVideo",
        "Text to video",
        "Generate a video from the input text with a Replicate or fal video model (the "
        "credential's kind chooses the provider).",
        TextToVideoParams,
        Kind.VIDEO,
        Cost(credits=10, per_second=10),
        Input("text", Kind.TEXT),
    )

    async def run(
        self, ctx: NodeContext, params: TextToVideoParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        return await self._run(ctx, params.model, await self._payload(params, inputs))


class ImageToVideo(_Family):
    spec = _family_spec(
        "ImageToVideo",
        "Image to video",
        "Animate the input image (guided by the optional text) with a Replicate or fal video "
        "model (the credential's kind chooses the provider).",
        ImageToVideoParams,
        Kind.VIDEO,
        Cost(credits=10, per_second=10),
        Input("image", Kind.IMAGE),
        Input("text", Kind.TEXT, required=False),
    )

    async def run(
        self, ctx: NodeContext, params: ImageToVideoParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        payload = await self._payload(params, inputs)
        pctx = policy.provider_context(ctx)
        credential = policy.require_credential(pctx, replicate.KIND, fal.KIND)
        field_name = params.image_field or ("image_url" if credential.kind == fal.KIND else "image")
        payload[field_name] = await bound_value(inputs, "image")
        return await self._run(ctx, params.model, payload)


class TextToMusic(_Family):
    spec = _family_spec(
        "TextToMusic",
        "Text to music",
        "Generate music from the input text with a Replicate or fal music model (the "
        "credential's kind chooses the provider); MP3 out.",
        TextToMusicParams,
        Kind.AUDIO,
        Cost(credits=5, per_second=1),
        Input("text", Kind.TEXT),
    )

    async def run(
        self, ctx: NodeContext, params: TextToMusicParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        return await self._run(ctx, params.model, await self._payload(params, inputs))


NODES: list[NodeType] = [
    *(_any_model(ReplicateModelNode, "Replicate", ReplicateModelParams, k) for k in _ANY_OUTPUT),
    *(_any_model(FalModelNode, "Fal", FalModelParams, k) for k in _ANY_OUTPUT),  # FalModel...
    TextToVideo(),
    ImageToVideo(),
    TextToMusic(),
]
