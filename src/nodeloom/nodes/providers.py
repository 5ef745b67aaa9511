"""Provider-backed generative nodes over an OpenAI-compatible HTTP API.

Configured by settings: ``provider_base_url`` (required), the key from
``provider_api_key`` or else the encrypted ``<data_dir>/provider_key.enc`` written by
``nodeloom provider set-key`` (optional: local servers such as Ollama need none), model names
and timeouts. Transient failures (429, 5xx, timeouts, dropped connections) are retried with
exponential back-off, honouring ``Retry-After``; anything else becomes a ``NodeFailure`` with
the provider's own message. The key never appears in errors or logs.

The provider address is chosen by the operator, not by workflow authors, so it is trusted and
may be private (a GPU box on the LAN, Ollama on localhost); the SSRF guard of ``HttpRequest``
protects against user-supplied URLs and is not applied to it.

A node may instead name one of its account's credentials (param ``credential``, kind
``openai``): the executor then hands the sandbox job that credential's ``base_url`` and key,
which replace the operator's in that job's settings. That address is a tenant's choice, so
every request to it passes the SSRF guard (``guarded=True``): private, loopback and link-local
addresses are refused unless ``NODELOOM_HTTP_ALLOWLIST`` names them. See docs/providers.md.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import email.utils
import io
import json
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import httpx
from PIL import Image, UnidentifiedImageError
from pydantic import Field

from nodeloom.auth.tokens import decrypt
from nodeloom.nodes import media
from nodeloom.nodes.base import (
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
from nodeloom.nodes.http import Allowlist, _pinned_request, checked_addresses
from nodeloom.settings import Settings

KEY_FILE_NAME = "provider_key.enc"
BACKOFF_BASE = 0.5  # seconds; doubled per attempt, with jitter
BACKOFF_MAX = 30.0
RETRY_AFTER_MAX = 60.0  # never sleep longer than this on a provider's say-so


def key_file(settings: Settings) -> Path:
    return settings.data_dir / KEY_FILE_NAME


def api_key(settings: Settings) -> str | None:
    """The provider key: the setting first, else the encrypted key file, else none."""
    if settings.provider_api_key is not None:
        return settings.provider_api_key.get_secret_value()
    path = key_file(settings)
    if not path.is_file() or settings.secret_key is None:
        return None
    return decrypt(settings.secret, path.read_text(encoding="utf-8").strip())


def unavailable_reason(settings: Settings) -> str | None:
    if not settings.provider_base_url:
        return (
            "no AI provider is configured: set NODELOOM_PROVIDER_BASE_URL to an "
            "OpenAI-compatible API (and a key with NODELOOM_PROVIDER_API_KEY or "
            "`nodeloom provider set-key`)"
        )
    return None


def _provider(settings: Settings) -> dict[str, Any]:
    """The provider a node's answer comes from, as part of its cache fingerprint."""
    return {"provider": settings.provider_base_url}


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_message(response: httpx.Response) -> str:
    """The provider's own explanation: OpenAI's {"error": {"message": ...}}, ElevenLabs'
    {"detail": {"message": ...}} or {"detail": "..."}, else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        for name in ("error", "detail"):
            error = body.get(name)
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return str(error["message"])[:300]
            if isinstance(error, str):
                return error[:300]
            if isinstance(error, list) and error and isinstance(error[0], dict):
                return str(error[0].get("msg", error[0]))[:300]
    return response.text[:300]


CREDENTIAL_KIND = "openai"  # the kind of credential the provider nodes take
TEST_TIMEOUT = 10.0  # seconds, for a credential's connection test


def credential_param() -> Any:
    return Field(
        default=None,
        min_length=1,
        max_length=64,
        description="An openai credential of this account (its id): the node calls that "
        "endpoint with that key instead of the configured provider.",
    )


# A multipart form's file parts: name -> (file name, bytes, content type).
Files = Mapping[str, tuple[str, bytes, str]]


def encode_body(
    payload: Mapping[str, Any] | None, files: Files | None, form: Mapping[str, str] | None
) -> tuple[bytes | None, dict[str, str]]:
    """The request body and its Content-Type header: JSON for ``payload``, or a
    multipart/form-data of ``form`` fields and ``files`` (as OpenAI's edit and transcription
    endpoints take)."""
    if files is not None:
        request = httpx.Request("POST", "http://body.invalid", data=dict(form or {}), files=files)
        return request.read(), {"Content-Type": request.headers["Content-Type"]}
    if payload is None:
        return None, {}
    return json.dumps(dict(payload)).encode(), {"Content-Type": "application/json"}


async def send(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: Mapping[str, str],
    payload: Mapping[str, Any] | None,
    guard: Allowlist | None,
    *,
    files: Files | None = None,
    form: Mapping[str, str] | None = None,
) -> httpx.Response:
    """One request; with a ``guard``, through the SSRF check of ``HttpRequest``: every
    address of the host checked, and the connection made to a checked address."""
    body, content_type = encode_body(payload, files, form)
    sent = {**headers, **content_type}
    if guard is None:
        return await client.request(method, url, content=body, headers=sent)
    target = httpx.URL(url)
    addresses = await checked_addresses(target, guard)
    for index, ip in enumerate(addresses):
        request = _pinned_request(client, method, target, ip, sent, body)
        try:
            return await client.send(request)
        except httpx.ConnectError:
            if index == len(addresses) - 1:
                raise
    raise NodeFailure(f"host {target.host!r} has no address", code="provider_error")


async def call(
    settings: Settings,
    path: str,
    payload: Mapping[str, Any] | None,
    *,
    guarded: bool = False,
    files: Files | None = None,
    form: Mapping[str, str] | None = None,
    key_header: str | None = None,
) -> httpx.Response:
    """POST ``payload`` (JSON, or a multipart ``form`` with ``files``) to
    ``{base_url}{path}`` with retries; the successful response. ``guarded``: the address is
    a tenant's (a credential's), checked as HttpRequest does. The key goes as
    ``Authorization: Bearer``, or in ``key_header`` (ElevenLabs' ``xi-api-key``)."""
    reason = unavailable_reason(settings)
    if reason:
        raise NodeFailure(reason, code="provider_unavailable")
    assert settings.provider_base_url is not None
    url = settings.provider_base_url.rstrip("/") + path
    headers = {"Accept": "application/json, audio/mpeg"}
    key = api_key(settings)
    if key:
        if key_header:
            headers[key_header] = key
        else:
            headers["Authorization"] = f"Bearer {key}"
    timeout = httpx.Timeout(settings.provider_timeout_seconds)
    attempts = settings.provider_max_retries + 1
    guard = Allowlist.from_settings(settings) if guarded else None
    async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await send(
                    client, "POST", url, headers, payload, guard, files=files, form=form
                )
            except (httpx.TimeoutException, httpx.NetworkError) as exc:
                if last:
                    raise NodeFailure(
                        f"the AI provider did not answer after {attempts} attempts "
                        f"({type(exc).__name__})",
                        code="provider_error",
                    ) from exc
                await asyncio.sleep(_backoff(attempt))
                continue
            if response.status_code < 400:
                return response
            if _transient(response.status_code) and not last:
                wait = _retry_after(response)
                await asyncio.sleep(
                    min(RETRY_AFTER_MAX, wait) if wait is not None else _backoff(attempt)
                )
                continue
            message = _error_message(response)
            if key:  # some providers quote the key they refuse
                message = message.replace(key, "***")
            raise NodeFailure(
                f"the AI provider refused the request (HTTP {response.status_code}): {message}",
                code="provider_error",
            )
    raise AssertionError("unreachable")  # pragma: no cover


def _transient(status: int) -> bool:
    """Worth another try: rate limited, request timeout, or a server-side failure."""
    return status in (408, 429) or status >= 500


def _backoff(attempt: int) -> float:
    delay: float = min(BACKOFF_MAX, BACKOFF_BASE * 2**attempt)
    return delay * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not cryptography


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise NodeFailure("the AI provider answered with invalid JSON", "provider_error") from exc
    if not isinstance(body, dict):
        raise NodeFailure("the AI provider answered with unexpected JSON", "provider_error")
    return body


async def check_openai(settings: Settings, base_url: str, key: str) -> tuple[bool, int | None, str]:
    """A credential's connection test: ``GET {base_url}/models`` (the cheapest authenticated
    call of an OpenAI-compatible API)."""
    headers = {"Authorization": f"Bearer {key}"}
    return await check_endpoint(settings, base_url.rstrip("/") + "/models", headers, key)


async def check_endpoint(
    settings: Settings, url: str, auth: Mapping[str, str], key: str
) -> tuple[bool, int | None, str]:
    """A credential's connection test: ``GET url`` with the ``auth`` headers through the
    SSRF guard, within ``TEST_TIMEOUT``. (ok, HTTP status, message); the provider's own
    error is quoted, the ``key`` never."""
    guard = Allowlist.from_settings(settings)
    headers = {"Accept": "application/json", **auth}
    timeout = httpx.Timeout(min(TEST_TIMEOUT, settings.http_timeout_seconds))
    try:
        async with (
            asyncio.timeout(TEST_TIMEOUT),
            httpx.AsyncClient(timeout=timeout, trust_env=False) as client,
        ):
            response = await send(client, "GET", url, headers, None, guard)
    except NodeFailure as exc:
        return False, None, exc.message.replace(key, "***")
    except (TimeoutError, httpx.TimeoutException):
        return False, None, f"the provider did not answer within {TEST_TIMEOUT:g} s"
    except httpx.HTTPError as exc:
        return False, None, f"cannot reach the provider ({type(exc).__name__})"
    if response.status_code < 400:
        return True, response.status_code, "the provider accepted the credential"
    message = _error_message(response).replace(key, "***")
    return (
        False,
        response.status_code,
        f"the provider refused (HTTP {response.status_code}): {message}",
    )


async def speech(
    settings: Settings,
    text: str,
    voice: str,
    speed: float,
    *,
    guarded: bool = False,
    model: str = "",
) -> bytes:
    """MP3 bytes from ``/audio/speech`` (the TextToSpeech provider engine)."""
    payload = {
        "model": model or settings.provider_tts_model,
        "input": text,
        "voice": voice,
        "speed": speed,
        "response_format": "mp3",
    }
    response = await call(settings, "/audio/speech", payload, guarded=guarded)
    if len(response.content) > settings.max_artifact_bytes:
        raise NodeFailure("the provider's audio exceeds the artifact size limit", "limit_exceeded")
    return response.content


# ----------------------------------------------------------------------------- nodes


class LLMTextParams(Params):
    system: str = Field(
        default="", max_length=20_000, description="System prompt (instructions to the model)."
    )
    model: str = Field(default="", max_length=200, description="Model; empty: the configured one.")
    temperature: Annotated[float, Field(ge=0, le=2)] = Field(default=0.7, description="Sampling.")
    max_tokens: Annotated[int, Field(ge=1, le=32_000)] = Field(
        default=1024, description="Longest answer, in tokens."
    )
    credential: str | None = credential_param()


class LLMText(NodeType):
    spec = NodeSpec(
        type="LLMText",
        version=1,
        category="ai",
        title="LLM text",
        description="Send the input text as a prompt to the configured chat model; outputs "
        "its answer.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=LLMTextParams,
        cost=Cost(credits=5),
        needs_provider=True,
    )

    def unavailable_reason(self, settings: Settings) -> str | None:
        return unavailable_reason(settings)

    def fingerprint(self, params: LLMTextParams, settings: Settings) -> dict[str, Any]:
        model = params.model or settings.provider_llm_model
        return {**super().fingerprint(params, settings), "model": model, **_provider(settings)}

    async def run(
        self, ctx: NodeContext, params: LLMTextParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        prompt = input_text(inputs) or ""
        if not prompt.strip():
            raise NodeFailure("the prompt is empty")
        messages = [{"role": "system", "content": params.system}] if params.system else []
        messages.append({"role": "user", "content": prompt})
        payload = {
            "model": params.model or ctx.settings.provider_llm_model,
            "messages": messages,
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
        }
        guarded = params.credential is not None
        body = _json(await call(ctx.settings, "/chat/completions", payload, guarded=guarded))
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise NodeFailure("the AI provider's answer has no message", "provider_error") from exc
        if not isinstance(content, str):
            raise NodeFailure("the AI provider's answer has no text", "provider_error")
        return Produced.text(content)


class TextToImageParams(Params):
    size: str = Field(
        default="1024x1024",
        pattern=r"^[1-9][0-9]{1,4}x[1-9][0-9]{1,4}$",
        description="WIDTHxHEIGHT as the provider accepts it (e.g. 1024x1024, 1536x1024).",
    )
    model: str = Field(default="", max_length=200, description="Model; empty: the configured one.")
    quality: str = Field(default="", max_length=20, description="Provider quality; empty: default.")
    credential: str | None = credential_param()


def decode_provider_image(data: bytes, settings: Settings) -> Produced:
    """Check the provider's image like any untrusted input, and store it as PNG."""
    try:
        image = Image.open(io.BytesIO(data), formats=media.IMAGE_FORMATS)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError) as exc:
        raise NodeFailure("the AI provider returned no readable image", "provider_error") from exc
    with image:
        media.check_pixels(settings, *image.size, what="generated image")
        image.load()
        if image.format == "PNG":
            media.check_bytes(settings, len(data), "image")
            return Produced(data=data, width=image.width, height=image.height)
        return media.png_bytes(image.convert("RGBA" if "A" in image.mode else "RGB"), settings)


class TextToImage(NodeType):
    spec = NodeSpec(
        type="TextToImage",
        version=1,
        category="ai",
        title="Text to image",
        description="Generate an image from the input text with the configured image model.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.IMAGE),
        params=TextToImageParams,
        cost=Cost(credits=20),
        needs_provider=True,
    )

    def unavailable_reason(self, settings: Settings) -> str | None:
        return unavailable_reason(settings)

    def fingerprint(self, params: TextToImageParams, settings: Settings) -> dict[str, Any]:
        model = params.model or settings.provider_image_model
        return {**super().fingerprint(params, settings), "model": model, **_provider(settings)}

    async def run(
        self, ctx: NodeContext, params: TextToImageParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        prompt = input_text(inputs) or ""
        if not prompt.strip():
            raise NodeFailure("the prompt is empty")
        width, height = (int(v) for v in params.size.split("x"))
        media.check_pixels(ctx.settings, width, height)
        model = params.model or ctx.settings.provider_image_model
        payload: dict[str, Any] = {"model": model, "prompt": prompt, "n": 1, "size": params.size}
        if model.startswith("dall-e"):
            payload["response_format"] = "b64_json"  # gpt-image-* always answer b64 and refuse it
        if params.quality:
            payload["quality"] = params.quality
        guarded = params.credential is not None
        body = _json(await call(ctx.settings, "/images/generations", payload, guarded=guarded))
        try:
            encoded = body["data"][0]["b64_json"]
            data = base64.b64decode(encoded, validate=True)
        except (KeyError, IndexError, TypeError, binascii.Error) as exc:
            raise NodeFailure(
                "the AI provider's answer has no b64_json image", "provider_error"
            ) from exc
        return await ctx.to_thread(decode_provider_image, data, ctx.settings)


NODES: list[NodeType] = [LLMText(), TextToImage()]
