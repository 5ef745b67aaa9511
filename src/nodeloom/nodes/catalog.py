"""Every node type the service ships. Add a module's types here to publish them."""

from __future__ import annotations

from nodeloom.nodes import audio, http, image, providers, speech, text, text_extra, video
from nodeloom.nodes.base import NodeType


def all_nodes() -> list[NodeType]:
    return [
        *text.NODES,
        *text_extra.NODES,
        *image.NODES,
        *audio.NODES,
        *speech.NODES,
        *video.NODES,
        *http.NODES,
        *providers.NODES,
    ]
