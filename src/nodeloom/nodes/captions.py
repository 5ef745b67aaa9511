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

from PIL import Image

from nodeloom.nodes import media, transcripts
from nodeloom.nodes.image import caption_overlay
from nodeloom.nodes.video import VideoCaptionParams, _spec, _writing, open_video
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

MAX_HEIGHT_FRACTION = 0.3  # of the frame, for one cue's band


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
        limit = media.length_limit(ctx, params.max_seconds)
        path = media.scratch_file(ctx, ".mp4")

        def work(progress: media.Progress) -> Produced:
            clip = open_video(ref, ctx.settings, limit)
            size = (clip.width, clip.height)
            count = clip.frame_count(params.fps)
            starts = [cue.start for cue in cues]
            blank = Image.new("RGBA", size, (0, 0, 0, 0))
            layers: dict[int, Image.Image] = {}

            def layer(index: int) -> Image.Image:
                if index not in layers:  # rendered when first shown, once
                    layers[index] = caption_overlay(
                        blank,
                        cues[index].text,
                        params.position,
                        params.color,
                        params.band,
                        MAX_HEIGHT_FRACTION,
                    )
                return layers[index]

            with _writing(path, *size, params.fps, audio=clip.audio, held=True) as out:
                for image, ticks in clip.held_frames(params.fps, size):
                    base = image.convert("RGBA")
                    shown: dict[int | None, Image.Image] = {}
                    tick, end = out.frames, out.frames + ticks
                    while tick < end:
                        cue = transcripts.active(cues, starts, tick / params.fps)
                        run = 1  # frame times in a row that show the same cue
                        while (
                            tick + run < end
                            and transcripts.active(cues, starts, (tick + run) / params.fps) == cue
                        ):
                            run += 1
                        if cue not in shown:
                            shown[cue] = (
                                base if cue is None else Image.alpha_composite(base, layer(cue))
                            )
                        out.write(out.frame_from_image(shown[cue]), run)
                        tick += run
                    progress.update(out.frames / count)
            return out.produced(ctx.settings)

        return await media.run_with_progress(ctx, work)


NODES: list[NodeType] = [Captions()]
