"""Every node type the service ships (add a module's types here to publish them). Installed
node packages add theirs at start: see nodes/packages.py."""

from __future__ import annotations

from nodeloom.nodes import (
    approval,
    audio,
    batch,
    captions,
    flow,
    hosted,
    http,
    image,
    image_filters,
    jsondata,
    loop,
    media_inputs,
    openai_media,
    providers,
    speech,
    subworkflow,
    text,
    text_extra,
    video,
)
from nodeloom.nodes.adapters import comfyui
from nodeloom.sdk._node import NodeType


def all_nodes() -> list[NodeType]:
    return [
        *text.NODES,
        *media_inputs.NODES,
        *text_extra.NODES,
        *jsondata.NODES,
        *flow.NODES,
        *approval.NODES,
        *image.NODES,
        *image_filters.NODES,
        *audio.NODES,
        *speech.NODES,
        *video.NODES,
        *http.NODES,
        *captions.NODES,
        *providers.NODES,
        *batch.NODES,
        *loop.NODES,
        *openai_media.NODES,
        *hosted.NODES,
        *comfyui.NODES,
        *subworkflow.NODES,
    ]
