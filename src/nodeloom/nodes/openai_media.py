"""OpenAI media beyond chat and generation: image edits (``ImageToImage``) and transcription
(``SpeechToText``), against OpenAI's published HTTP API (any compatible server works).

- ``ImageToImage``: ``POST {base_url}/images/edits``, multipart: ``image`` (our PNG), the
  prompt, an optional ``mask`` (a PNG the size of the image whose transparent pixels mark
  where to edit), model, size, quality. The answer's ``b64_json`` (or, from servers that
  answer with one, a ``url``, fetched through the SSRF guard) is checked like any untrusted
  image and stored as PNG.
- ``SpeechToText``: ``POST {base_url}/audio/transcriptions``, multipart: ``file`` (our
  MP3), model, ``response_format=verbose_json`` with segment timestamps, optional language
  and prompt. The segments become WebVTT (default), JSON or the bare transcript
  (nodeloom.nodes.transcripts), which ``Captions`` burns into a video.

Both are provider adapters (nodes/adapters/policy.py): they run on the event loop and wait
for the provider without holding a sandbox process. ``ImageToImage``'s CPU work goes to
sandbox processes: preparing the mask (``adapters/media.py`` ``mask``) and checking the
returned image (``ctx.convert``). Its edit is retried on 429/5xx like a generation (as
``TextToImage``'s). The transcription is not a job that can be attached to again, so it is
sent as a submission: retried only when the provider cannot have accepted it (429, 503, no
connection), never paid twice by our retry. Either way: the operator's provider, or the
account's ``openai`` credential through the SSRF guard (``providers.endpoint``);
``Retry-After`` honoured; the provider's error quoted in the failure, never the key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from nodeloom.nodes import media, providers, transcripts
from nodeloom.nodes.adapters import media as adapter_media
from nodeloom.nodes.adapters import policy
from nodeloom.sdk._node import (
    ArtifactRef,
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeType,
    Params,
    Produced,
)
from nodeloom.settings import Settings

MAX_UPLOAD_BYTES = 25 * 1024 * 1024  # OpenAI's limit for an audio file to transcribe


def json_only(model: str) -> bool:
    """OpenAI's GPT transcribers (gpt-4o-transcribe, gpt-4o-mini-transcribe and their dated
    versions) answer json or text only: no verbose_json, hence no segments."""
    return model.startswith("gpt-") and "transcribe" in model


DEFAULT_STT_MODEL = "whisper-1"


# ----------------------------------------------------------------------------- image edits


class ImageToImageParams(Params):
    model: str = Field(
        default="",
        max_length=200,
        description="Model (gpt-image-1, dall-e-2, ...); empty: the configured image model.",
    )
    size: str = Field(
        default="",
        pattern=r"^(|auto|[1-9][0-9]{1,4}x[1-9][0-9]{1,4})$",
        description="WIDTHxHEIGHT as the provider accepts it (e.g. 1024x1024), auto, or "
        "empty for the provider's default.",
    )
    quality: str = Field(default="", max_length=20, description="Provider quality; empty: default.")
    credential: str | None = providers.credential_param()


class ImageToImage(providers.ProviderNode):
    spec = providers.provider_spec(
        "ImageToImage",
        "Image to image",
        "Edit the input image as the text says (OpenAI image edits); an optional mask limits "
        "the edit to its transparent (or white) area.",
        ImageToImageParams,
        Input("image", Kind.IMAGE),
        Input("text", Kind.TEXT),
        Input("mask", Kind.IMAGE, required=False),
        output=Kind.IMAGE,
        cost=Cost(credits=25),
    )

    def configured_model(self, settings: Settings) -> str:
        return settings.provider_image_model

    async def run(
        self, ctx: NodeContext, params: ImageToImageParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        prompt = providers.prompt_text(inputs).strip()
        image = media.one(inputs, "image")
        if params.size and params.size != "auto":
            width, height = (int(v) for v in params.size.split("x"))
            media.check_pixels(ctx.settings, width, height)
        model = self.model(params, ctx.settings)
        form = {"model": model, "prompt": prompt, "n": "1"}
        if params.size:
            form["size"] = params.size
        if params.quality:
            form["quality"] = params.quality
        if model.startswith("dall-e"):
            form["response_format"] = "b64_json"  # gpt-image-* always answer b64 and refuse it
        pctx = policy.provider_context(ctx)
        files = {"image": ("image.png", await asyncio.to_thread(image.read_bytes), "image/png")}
        mask = media.optional(inputs, "mask")
        if mask is not None:
            # Decoding and resizing the mask is CPU work: a sandbox process does it.
            size = f"{image.width or 0}x{image.height or 0}"
            src = pctx.scratch_dir / "mask-input"
            await asyncio.to_thread(src.write_bytes, await asyncio.to_thread(mask.read_bytes))
            prepared = await pctx.convert(src, f"{adapter_media.MASK_KIND}{size}")
            assert prepared.path is not None
            data = await asyncio.to_thread(prepared.path.read_bytes)
            files["mask"] = ("mask.png", data, "image/png")
        content, content_type = await asyncio.to_thread(providers.encode_body, None, files, form)
        async with providers.endpoint(ctx) as api:
            await ctx.progress(0.05)
            body = await api.json(
                "POST", "/images/edits", content=content, headers=content_type, idempotent=False
            )
            return await providers.answered_image(api, ctx, body)


# ----------------------------------------------------------------------------- transcription


class SpeechToTextParams(Params):
    model: str = Field(
        default=DEFAULT_STT_MODEL,
        min_length=1,
        max_length=200,
        description="Transcription model. whisper-1 gives timed segments; gpt-4o-transcribe "
        "and gpt-4o-mini-transcribe are asked for json (all they answer), which has none: "
        "one cue spans the audio.",
    )
    format: Literal["vtt", "json", "text"] = Field(
        default="vtt",
        description="vtt: WebVTT cues (what Captions burns in, and any player reads); json: "
        '{"text", "language", "duration", "segments": [{"start", "end", "text"}]}; '
        "text: the transcript alone.",
    )
    language: str = Field(
        default="",
        pattern=r"^([a-z]{2,3})?$",
        description="The spoken language as ISO 639-1 (en, de, fr...); empty: detected.",
    )
    prompt: str = Field(
        default="",
        max_length=2000,
        description="Text to guide the model's style or spelling of names (optional).",
    )
    max_seconds: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=600,
        description="Longest audio accepted; the price is estimated (and capped) from it.",
    )
    credential: str | None = providers.credential_param()


def _segments(body: dict[str, Any], duration: float) -> tuple[str, list[transcripts.Cue]]:
    text = body.get("text")
    if not isinstance(text, str):
        raise NodeFailure("the AI provider's transcription has no text", "provider_error")
    cues: list[transcripts.Cue] = []
    segments = body.get("segments")
    if isinstance(segments, list) and segments:
        malformed = NodeFailure(
            "the AI provider's transcription has a malformed segment", "provider_error"
        )
        cues = transcripts.segment_cues(segments, malformed)
    elif text.strip():
        cues.append(transcripts.Cue(0.0, max(duration, 0.001), text.strip()))
    return text.strip(), cues


class SpeechToText(providers.ProviderNode):
    length_input = "audio"  # priced by the length of its input
    spec = providers.provider_spec(
        "SpeechToText",
        "Speech to text",
        "Transcribe the input audio (OpenAI transcriptions) into text with timings: WebVTT "
        "cues by default, ready for Captions.",
        SpeechToTextParams,
        Input("audio", Kind.AUDIO),
        output=Kind.TEXT,
        cost=Cost(credits=2, per_second=1),
    )

    async def run(
        self, ctx: NodeContext, params: SpeechToTextParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        audio: ArtifactRef = media.one(inputs, "audio")
        seconds = (audio.duration_ms or 0) / 1000
        limit = media.length_limit(ctx, params.max_seconds)
        if seconds > limit:
            raise NodeFailure(f"the audio is longer than max_seconds ({limit:g} s)")
        if audio.size_bytes > MAX_UPLOAD_BYTES:
            raise NodeFailure(
                f"the audio is {audio.size_bytes:,} bytes; transcription takes at most "
                f"{MAX_UPLOAD_BYTES:,}"
            )
        form = {"model": params.model, "response_format": "json"}
        if not json_only(params.model):
            # Segments come only with verbose_json, which whisper-1 (and compatible
            # servers' whisper models) answer; the gpt-4o transcribers refuse it.
            form |= {"response_format": "verbose_json", "timestamp_granularities[]": "segment"}
        if params.language:
            form["language"] = params.language
        if params.prompt:
            form["prompt"] = params.prompt
        data = await asyncio.to_thread(audio.read_bytes)
        files = {"file": ("audio.mp3", data, "audio/mpeg")}
        content, content_type = await asyncio.to_thread(providers.encode_body, None, files, form)
        async with providers.endpoint(ctx) as api:
            await ctx.progress(0.05)
            body = await api.json(
                "POST",
                "/audio/transcriptions",
                content=content,
                headers=content_type,
                idempotent=False,
            )
        text, cues = _segments(body, seconds)
        language = body.get("language") if isinstance(body.get("language"), str) else None
        if params.format == "vtt":
            out = transcripts.to_vtt(cues)
        elif params.format == "json":
            out = transcripts.to_json(text, language, seconds, cues)
        else:
            out = text
        produced = Produced.text(out)
        produced.duration_ms = audio.duration_ms  # priced per second of audio transcribed
        return produced


NODES: list[NodeType] = [ImageToImage(), SpeechToText()]
