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

``ImageToImage`` runs in a sandbox process (it prepares the mask and decodes the answer with
Pillow) and calls through ``providers.call``. ``SpeechToText`` has no CPU work worth the
name, so it is a provider adapter (nodes/adapters/policy.py): it runs on the event loop and
waits for the transcription without holding a sandbox process. The transcription is not a
job that can be attached to again, so it is sent as a submission: retried only when the
provider cannot have accepted it (429, 503, no connection), never paid twice by our retry.
Either way: the operator's provider, or the account's ``openai`` credential through the SSRF
guard; ``Retry-After`` honoured; the provider's error quoted in the failure, never the key.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import httpx
from PIL import Image, UnidentifiedImageError
from pydantic import Field

from nodeloom.nodes import media, providers, transcripts
from nodeloom.nodes.adapters import policy
from nodeloom.nodes.base import (
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
from nodeloom.nodes.http import Allowlist
from nodeloom.settings import Settings

MAX_UPLOAD_BYTES = 25 * 1024 * 1024  # OpenAI's limit for an audio file to transcribe
DEFAULT_STT_MODEL = "whisper-1"


def _fingerprint(node: NodeType, params: Any, settings: Settings, model: str) -> dict[str, Any]:
    return {
        **NodeType.fingerprint(node, params, settings),
        "model": model,
        "provider": settings.provider_base_url,
    }


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


def mask_png(mask: bytes, size: tuple[int, int], settings: Settings) -> bytes:
    """The mask as OpenAI takes it: a PNG of the image's size whose transparent pixels mark
    where to edit. A mask with transparency is used as it is (resized if needed); one
    without is read as grey levels, white marking what to edit (the inpainting convention)."""
    try:
        image = Image.open(io.BytesIO(mask), formats=media.IMAGE_FORMATS)
        image.load()
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
        raise NodeFailure("the mask is not a readable image") from exc
    media.check_pixels(settings, *image.size, what="mask")
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
    else:
        grey = image.convert("L")
        rgba = Image.new("RGBA", grey.size, (0, 0, 0, 255))
        rgba.putalpha(grey.point(lambda v: 255 - v))
    if rgba.size != size:
        rgba = rgba.resize(size, Image.Resampling.NEAREST)
    return media.png_bytes(rgba, settings).data or b""


async def _image_from_url(settings: Settings, url: str) -> bytes:
    """An image the provider answered with by URL: fetched through the SSRF guard (the
    address is the provider's choice), no larger than an artifact may be."""
    guard = Allowlist.from_settings(settings)
    timeout = httpx.Timeout(settings.provider_timeout_seconds)
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        response = await providers.send(client, "GET", url, {"Accept": "image/*"}, None, guard)
    if response.status_code >= 400:
        raise NodeFailure(
            f"the provider's image URL answered HTTP {response.status_code}", "provider_error"
        )
    if len(response.content) > settings.max_artifact_bytes:
        raise NodeFailure("the provider's image exceeds the artifact size limit", "limit_exceeded")
    return response.content


class ImageToImage(NodeType):
    spec = NodeSpec(
        type="ImageToImage",
        version=1,
        category="ai",
        title="Image to image",
        description="Edit the input image as the text says (OpenAI image edits); an optional "
        "mask limits the edit to its transparent (or white) area.",
        inputs=(
            Input("image", Kind.IMAGE),
            Input("text", Kind.TEXT),
            Input("mask", Kind.IMAGE, required=False),
        ),
        output=Output(Kind.IMAGE),
        params=ImageToImageParams,
        cost=Cost(credits=25),
        needs_provider=True,
    )

    def unavailable_reason(self, settings: Settings) -> str | None:
        return providers.unavailable_reason(settings)

    def fingerprint(self, params: ImageToImageParams, settings: Settings) -> dict[str, Any]:
        model = params.model or settings.provider_image_model
        return _fingerprint(self, params, settings, model)

    async def run(
        self, ctx: NodeContext, params: ImageToImageParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        prompt = (input_text(inputs) or "").strip()
        if not prompt:
            raise NodeFailure("the prompt is empty")
        image = media.one(inputs, "image")
        if params.size and params.size != "auto":
            width, height = (int(v) for v in params.size.split("x"))
            media.check_pixels(ctx.settings, width, height)
        model = params.model or ctx.settings.provider_image_model
        form = {"model": model, "prompt": prompt, "n": "1"}
        if params.size:
            form["size"] = params.size
        if params.quality:
            form["quality"] = params.quality
        if model.startswith("dall-e"):
            form["response_format"] = "b64_json"  # gpt-image-* always answer b64 and refuse it
        files = {"image": ("image.png", image.read_bytes(), "image/png")}
        mask = media.optional(inputs, "mask")
        if mask is not None:
            size = (image.width or 0, image.height or 0)
            data = await ctx.to_thread(mask_png, mask.read_bytes(), size, ctx.settings)
            files["mask"] = ("mask.png", data, "image/png")
        guarded = params.credential is not None
        response = await providers.call(
            ctx.settings, "/images/edits", None, guarded=guarded, files=files, form=form
        )
        body = providers._json(response)
        try:
            first = body["data"][0]
            if first.get("b64_json"):
                data = base64.b64decode(first["b64_json"], validate=True)
            else:
                data = await _image_from_url(ctx.settings, str(first["url"]))
        except (KeyError, IndexError, TypeError, AttributeError, binascii.Error) as exc:
            raise NodeFailure("the AI provider's answer has no image", "provider_error") from exc
        return await ctx.to_thread(providers.decode_provider_image, data, ctx.settings)


# ----------------------------------------------------------------------------- transcription


class SpeechToTextParams(Params):
    model: str = Field(
        default=DEFAULT_STT_MODEL,
        min_length=1,
        max_length=200,
        description="Transcription model. whisper-1 gives timed segments; models that answer "
        "without them (gpt-4o-transcribe) give one cue spanning the audio.",
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
    cues = []
    segments = body.get("segments")
    if isinstance(segments, list) and segments:
        for segment in segments:
            try:
                start, end = float(segment["start"]), float(segment["end"])
                words = str(segment["text"]).strip()
            except (KeyError, TypeError, ValueError) as exc:
                raise NodeFailure(
                    "the AI provider's transcription has a malformed segment", "provider_error"
                ) from exc
            if words and end > start:
                cues.append(transcripts.Cue(start, end, words))
    elif text.strip():
        cues.append(transcripts.Cue(0.0, max(duration, 0.001), text.strip()))
    return text.strip(), cues


def _endpoint(ctx: NodeContext) -> policy.Provider:
    """The provider to call: the account's ``openai`` credential the node names (a tenant's
    address: guarded), else the operator's provider (trusted: its host is let past the
    address check, as ``providers.call`` does). Its key is masked out of any message."""
    settings = ctx.settings
    pctx = ctx if isinstance(ctx, policy.ProviderContext) else None
    if pctx is not None and pctx.credential is not None:
        credential = policy.require_credential(pctx, providers.CREDENTIAL_KIND)
        key, base_url = credential.value("api_key") or "", credential.value("base_url") or ""
    else:
        reason = providers.unavailable_reason(settings)
        if reason:
            raise NodeFailure(reason, code="provider_unavailable")
        base_url = settings.provider_base_url or ""
        key = providers.api_key(settings) or ""
        allowed = [*settings.http_allowlist, httpx.URL(base_url).host]
        settings = settings.model_copy(update={"http_allowlist": allowed})
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return policy.Provider(
        settings, name="the AI provider", base_url=base_url, headers=headers, secrets=(key,)
    )


class SpeechToText(NodeType):
    spec = NodeSpec(
        type="SpeechToText",
        version=1,
        category="ai",
        title="Speech to text",
        description="Transcribe the input audio (OpenAI transcriptions) into text with "
        "timings: WebVTT cues by default, ready for Captions.",
        inputs=(Input("audio", Kind.AUDIO),),
        output=Output(Kind.TEXT),
        params=SpeechToTextParams,
        cost=Cost(credits=2, per_second=1),
        needs_provider=True,
        sandboxed=False,
        adapter=True,
    )

    def unavailable_reason(self, settings: Settings) -> str | None:
        return providers.unavailable_reason(settings)

    def fingerprint(self, params: SpeechToTextParams, settings: Settings) -> dict[str, Any]:
        return _fingerprint(self, params, settings, params.model)

    async def run(
        self, ctx: NodeContext, params: SpeechToTextParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        audio: ArtifactRef = media.one(inputs, "audio")
        seconds = (audio.duration_ms or 0) / 1000
        limit = min(params.max_seconds, ctx.settings.max_media_seconds)
        if seconds > limit:
            raise NodeFailure(f"the audio is longer than max_seconds ({limit:g} s)")
        if audio.size_bytes > MAX_UPLOAD_BYTES:
            raise NodeFailure(
                f"the audio is {audio.size_bytes:,} bytes; transcription takes at most "
                f"{MAX_UPLOAD_BYTES:,}"
            )
        form = {
            "model": params.model,
            "response_format": "verbose_json",
            "timestamp_granularities[]": "segment",
        }
        if params.language:
            form["language"] = params.language
        if params.prompt:
            form["prompt"] = params.prompt
        data = await asyncio.to_thread(audio.read_bytes)
        files = {"file": ("audio.mp3", data, "audio/mpeg")}
        content, content_type = await asyncio.to_thread(providers.encode_body, None, files, form)
        async with _endpoint(ctx) as api:
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
