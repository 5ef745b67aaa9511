"""``Captions``: timed captions from a transcription burned into a video.

The text input is a transcription with timings (``SpeechToText``'s WebVTT or JSON, or any
WebVTT/SRT; see nodeloom.nodes.transcripts). Each cue's band is rendered once on a
transparent layer (the look of ``VideoCaption``), and every frame shows the cue active at
its time, or none. A frame the source holds across a cue boundary is written in pieces so
a caption appears and disappears on its frame time. Decoding, compositing and H.264
encoding run in a worker thread of the sandbox job, under its budget.
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeloom.nodes import media, transcripts
from nodeloom.nodes.video import VideoCaptionParams, _spec, burn_captions
from nodeloom.sdk._node import (
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeType,
    Produced,
    input_text,
)


class CaptionsParams(VideoCaptionParams):
    """Where and how the captions are drawn (as VideoCaption), frame rate and length bound."""


class Captions(NodeType):
    spec = _spec(
        "Captions",
        "Timed captions",
        "Burn a transcription's timed captions (WebVTT, SRT or SpeechToText JSON) into a "
        "video, each shown from its start to its end; sound is kept.",
        CaptionsParams,
        Input("video", Kind.VIDEO),
        Input("text", Kind.TEXT),
    )

    async def run(
        self, ctx: NodeContext, params: CaptionsParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        ref = media.one(inputs, "video")
        cues = transcripts.parse(input_text(inputs) or "")
        if not cues:
            raise NodeFailure("the transcription has no cues to show")
        starts = [cue.start for cue in cues]
        return await burn_captions(
            ctx,
            params,
            ref,
            [cue.text for cue in cues],
            lambda seconds: transcripts.active(cues, starts, seconds),
        )


NODES: list[NodeType] = [Captions()]
