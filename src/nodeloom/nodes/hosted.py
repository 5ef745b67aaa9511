"""Nodes over the hosted model APIs of the providers' table (nodes/provider_registry.py):
for each, ``{prefix}Model``, ``...Video``, ``...Audio`` and ``...Text`` (``ReplicateModel``,
``FalModel``...: any model, its input object written by hand with fields bound to upstream
artifacts), one ``HostedModelNode`` that differs only in the API it calls; and the families
``ImageToVideo``, ``TextToVideo`` and ``TextToMusic``, whose provider is the kind of the
credential they name (replicate or fal).

A binding names a field of the model's input and one of the node's inputs: text is sent as
a string, an image, audio or video as a ``data:`` URI when small, else uploaded to the
provider first and sent as its URL (adapters/bound.py). What the model returns is
downloaded (SSRF-checked, bounded) and converted to the node's output type in a sandbox
process. See docs/providers.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, cast

from pydantic import Field, create_model

from nodeloom.nodes.adapters import policy
from nodeloom.nodes.adapters.bound import BoundFile
from nodeloom.nodes.provider_registry import HOSTED, HostedModels, hosted_pattern
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
MODEL_PATTERN = hosted_pattern()
KINDS = tuple(HOSTED)  # the credential kinds the families take
SHOWN = " or ".join(h.shown for h in HOSTED.values())  # "Replicate or fal"

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
    return BoundFile(ref)


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
        "image, audio or video (media go inline as data: URIs up to "
        "NODELOOM_PROVIDER_INLINE_MAX_BYTES, else uploaded to the provider and sent as URLs).",
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


class _Timed(Params):
    """The length held for a model that answers audio or video (charged for what it is)."""

    max_seconds: int = policy.max_seconds_field()


# Per call; audio and video also per started second of what comes back.
ANY_MODEL_COST = {
    Kind.IMAGE: Cost(credits=10),
    Kind.TEXT: Cost(credits=10),
    Kind.VIDEO: Cost(credits=10, per_second=5),
    Kind.AUDIO: Cost(credits=5, per_second=1),
}
_ANY_OUTPUT = {
    Kind.IMAGE: ("", "image"),
    Kind.VIDEO: ("Video", "video"),
    Kind.AUDIO: ("Audio", "audio"),
    Kind.TEXT: ("Text", "text"),
}


def _params(kind: str, hosted: HostedModels) -> tuple[type[Params], type[Params]]:
    """The params of a hosted-model API's model nodes: (for an image or text, for audio or
    video, which also hold a length): the common ones, a credential of its kind, its model id
    and the options of its own."""
    fields: dict[str, Any] = {
        "credential": (str, policy.credential_field(kind)),
        "model": (
            str,
            Field(
                min_length=1,
                max_length=200,
                pattern=hosted.model_pattern,
                description=hosted.model_description,
            ),
        ),
        **hosted.options,
    }
    name = f"{hosted.prefix}ModelParams"
    params = create_model(name, __base__=_ModelParams, __module__=__name__, **fields)
    timed = create_model(
        f"{hosted.prefix}ModelTimedParams", __base__=(params, _Timed), __module__=__name__
    )
    return cast("type[Params]", params), cast("type[Params]", timed)


class _HostedNode(NodeType):
    def needs_deep_check(self, params: Any) -> bool:
        return False  # nothing to check beyond the params schema and param_problems

    def param_problems(self, params: Any) -> list[str]:
        return _input_problems(params.input)


class HostedModelNode(_HostedNode):
    """Base of the model nodes of every hosted-model API (ReplicateModel, FalModelVideo...):
    they differ only in the API (``hosted``) they call and the kind they keep."""

    hosted: HostedModels
    output_kind: Kind = Kind.IMAGE

    async def run(
        self, ctx: NodeContext, params: Any, inputs: Mapping[str, InputValue]
    ) -> Produced:
        pctx = policy.provider_context(ctx)
        payload = await model_input(params.input, params.bindings, inputs)
        return await self.hosted.run(
            pctx,
            params.model,
            payload,
            self.output_kind,
            output_index=params.output_index,
            output_path=params.output_path,
            **{name: getattr(params, name) for name in self.hosted.options},
        )


def _any_model(kind: str, hosted: HostedModels, params: type[Params], output: Kind) -> NodeType:
    suffix, noun = _ANY_OUTPUT[output]
    name = f"{hosted.prefix}Model{suffix}"
    shown = hosted.shown
    spec = NodeSpec(
        type=name,
        version=1,
        category="ai",
        title=f"{shown} model ({noun})",
        description=f"Run any {shown} model with your {shown} credential; its input "
        f"object's fields may be bound to the node's inputs; keeps one {noun} it returns.",
        inputs=MEDIA_INPUTS,
        output=Output(output),
        params=params,
        cost=ANY_MODEL_COST[output],
        sandboxed=False,
        adapter=True,
        credential_kinds=(kind,),
    )
    cls = type(name, (HostedModelNode,), {"spec": spec, "hosted": hosted, "output_kind": output})
    node: NodeType = cls()
    return node


def _model_nodes(kind: str, hosted: HostedModels) -> list[NodeType]:
    params, timed = _params(kind, hosted)
    return [
        _any_model(kind, hosted, timed if k in (Kind.AUDIO, Kind.VIDEO) else params, k)
        for k in _ANY_OUTPUT
    ]


# ----------------------------------------------------------------------------- families


class _FamilyParams(Params):
    credential: str = policy.credential_field(*KINDS)
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
        description="Input field of the image; empty: "
        + " or ".join(f"{h.image_field} ({h.shown})" for h in HOSTED.values())
        + ".",
    )


class TextToMusicParams(_FamilyParams):
    duration_seconds: int = Field(default=10, ge=1, le=300, description="Length asked for.")


class _Family(_HostedNode):
    def estimate_seconds(self, params: Any) -> float:
        return float(params.duration_seconds)

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

    async def run(
        self, ctx: NodeContext, params: Any, inputs: Mapping[str, InputValue]
    ) -> Produced:
        payload = await self._payload(params, inputs)
        pctx = policy.provider_context(ctx)
        hosted = HOSTED[policy.require_credential(pctx, *KINDS).kind]
        if self.spec.inputs[0].kind == Kind.IMAGE:  # the image is the node's main input
            image_field = params.image_field or hosted.image_field
            payload[image_field] = await bound_value(inputs, "image")
        return await hosted.run(pctx, params.model, payload, self.spec.output.kind)


def _family(
    type_: str,
    title: str,
    what: str,
    params: type[Params],
    output: Kind,
    cost: Cost,
    *inputs: Input,
) -> NodeType:
    """A family node: ``what`` it does, with a model of the credential's provider."""
    spec = NodeSpec(
        type=type_,
        version=1,
        category="ai",
        title=title,
        description=what.format(
            shown=SHOWN, chooses="(the credential's kind chooses the provider)"
        ),
        inputs=inputs,
        output=Output(output),
        params=params,
        cost=cost,
        sandboxed=False,
        adapter=True,
        credential_kinds=KINDS,
    )
    node: NodeType = type(type_, (_Family,), {"spec": spec})()
    return node


# The families: what each does, with a model of the credential's provider.
FAMILIES: list[NodeType] = [
    _family(
        "TextToVideo",
        "Text to video",
        "Generate a video from the input text with a {shown} video model {chooses}.",
        TextToVideoParams,
        Kind.VIDEO,
        Cost(credits=10, per_second=10),
        Input("text", Kind.TEXT),
    ),
    _family(
        "ImageToVideo",
        "Image to video",
        "Animate the input image (guided by the optional text) with a {shown} video model "
        "{chooses}.",
        ImageToVideoParams,
        Kind.VIDEO,
        Cost(credits=10, per_second=10),
        Input("image", Kind.IMAGE),
        Input("text", Kind.TEXT, required=False),
    ),
    _family(
        "TextToMusic",
        "Text to music",
        "Generate music from the input text with a {shown} music model {chooses}; MP3 out.",
        TextToMusicParams,
        Kind.AUDIO,
        Cost(credits=5, per_second=1),
        Input("text", Kind.TEXT),
    ),
]

NODES: list[NodeType] = [
    *(node for kind, hosted in HOSTED.items() for node in _model_nodes(kind, hosted)),
    *FAMILIES,
]
