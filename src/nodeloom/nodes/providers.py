"""Provider-backed generative nodes over an OpenAI-compatible HTTP API.

Configured by settings: ``provider_base_url`` (required), the key from
``provider_api_key`` or else the encrypted ``<data_dir>/provider_key.enc`` written by
``nodeloom provider set-key`` (optional: local servers such as Ollama need none), model names
and timeouts. Every provider node here is a provider adapter (nodes/adapters/policy.py): it
runs on the server's event loop and waits for the answer there, holding no sandbox process;
only its CPU work (checking and storing a returned image, an edit's mask, returned audio)
goes to a sandbox process (``ProviderContext.convert``). Transient failures (408, 429, 5xx,
timeouts, dropped connections) are retried with exponential back-off, honouring
``Retry-After`` (``policy.Provider.request``); anything else becomes a ``NodeFailure`` with
the provider's own message. The key never appears in errors or logs.

The provider address is chosen by the operator, not by workflow authors, so it is trusted and
may be private (a GPU box on the LAN, Ollama on localhost); the SSRF guard of ``HttpRequest``
protects against user-supplied URLs and is not applied to it.

A node may instead name one of its account's credentials (param ``credential``, kind
``openai``): the executor then hands the node that credential (decrypted on the server), whose
``base_url`` and key replace the operator's (``endpoint``). That address is a tenant's
choice, so every request to it passes the SSRF guard: private, loopback and link-local
addresses are refused unless ``NODELOOM_HTTP_ALLOWLIST`` names them. See docs/providers.md.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import httpx
from pydantic import Field

from nodeloom import masking
from nodeloom.auth.tokens import decrypt
from nodeloom.nodes import jsonvalue
from nodeloom.nodes.adapters import policy
from nodeloom.nodes.http import Allowlist, _pinned_request, checked_addresses
from nodeloom.sdk._node import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeType,
    ParamProblem,
    Params,
    Produced,
    input_text,
)
from nodeloom.sdk.images import check_pixels
from nodeloom.settings import Settings

KEY_FILE_NAME = "provider_key.enc"
PROVIDER_NAME = "the AI provider"  # how failures name it


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


class ProviderNode(NodeType):
    """A node the configured OpenAI-compatible provider (or the account's ``openai``
    credential) answers: not offered until the server has a provider."""

    def unavailable_reason(self, settings: Settings) -> str | None:
        return unavailable_reason(settings)

    def configured_model(self, settings: Settings) -> str:
        """The model asked for when the params name none; none unless the node says so."""
        return ""

    def model(self, params: Any, settings: Settings) -> str:
        """The model a run asks for: the one its params name, else the configured one."""
        named: str = params.model
        return named or self.configured_model(settings)

    def fingerprint(self, params: Any, settings: Settings) -> dict[str, Any]:
        return provider_fingerprint(self, params, settings, self.model(params, settings))


def prompt_text(inputs: Mapping[str, InputValue]) -> str:
    """The node's input text, as it is: a prompt of only white space fails the node."""
    prompt = input_text(inputs) or ""
    if not prompt.strip():
        raise NodeFailure("the prompt is empty")
    return prompt


def provider_fingerprint(
    node: NodeType, params: Any, settings: Settings, model: str
) -> dict[str, Any]:
    """The cache fingerprint of a node the configured provider answers: its params, the
    model it asks for and the provider the answer comes from."""
    return {
        **NodeType.fingerprint(node, params, settings),
        "model": model,
        "provider": settings.provider_base_url,
    }


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

# The spec of a node the provider answers (``policy.adapter_spec``): it takes an ``openai``
# credential, and is not offered until the server has a provider.
provider_spec = functools.partial(
    policy.adapter_spec, credential_kinds=(CREDENTIAL_KIND,), needs_provider=True
)


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


def endpoint(ctx: NodeContext, key_header: str | None = None) -> policy.Provider:
    """The provider a node calls: the account's credential the node names (a tenant's
    address: every request SSRF-guarded), else the operator's provider (trusted: its host is
    let past the address check, as it may be a GPU box on the LAN). The key goes as
    ``Authorization: Bearer``, or in ``key_header`` (ElevenLabs' ``xi-api-key``); it is
    masked out of any message quoted."""
    settings = ctx.settings
    credential = ctx.credential if policy.is_provider_context(ctx) else None
    if credential is not None:
        key = credential.value("api_key") or ""
        base_url = credential.value("base_url") or ""
    else:
        reason = unavailable_reason(settings)
        if reason:
            raise NodeFailure(reason, code="provider_unavailable")
        base_url = settings.provider_base_url or ""
        key = api_key(settings) or ""
        allowed = [*settings.http_allowlist, httpx.URL(base_url).host]
        settings = settings.model_copy(update={"http_allowlist": allowed})
    headers: dict[str, str] = {}
    if key:
        headers = {key_header: key} if key_header else {"Authorization": f"Bearer {key}"}
    return policy.Provider(
        settings,
        name=PROVIDER_NAME,
        base_url=base_url,
        headers=headers,
        secrets=(key,),
        connections=policy.connections_of(ctx),
    )


async def answered_image(api: policy.Provider, ctx: NodeContext, body: dict[str, Any]) -> Produced:
    """The image of an images API answer (``data[0]``): its ``b64_json``, or the ``url``
    some compatible servers answer with (fetched through the SSRF guard: the address is the
    provider's choice), checked like any untrusted image and stored as PNG in a sandbox
    process."""
    pctx = policy.provider_context(ctx)
    try:
        first = body["data"][0]
        encoded, url = first.get("b64_json"), first.get("url")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise NodeFailure("the AI provider's answer has no image", "provider_error") from exc
    if isinstance(encoded, str) and encoded:
        return await api.download(pctx, "data:image/png;base64," + encoded, Kind.IMAGE)
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        return await api.download(pctx, url, Kind.IMAGE)
    raise NodeFailure("the AI provider's answer has no image", "provider_error")


async def speech(
    ctx: NodeContext,
    path: str,
    payload: Mapping[str, Any],
    max_seconds: float,
    key_header: str | None = None,
) -> Produced:
    """Speech from a text-to-speech endpoint (OpenAI's ``/audio/speech``, ElevenLabs'): the
    MP3 streamed to the node's scratch directory within the size limit, checked (and, if
    it is not MP3, re-encoded) in a sandbox process, no longer than ``max_seconds``."""
    api = endpoint(ctx, key_header)  # first: a missing provider is the error to tell
    pctx = policy.provider_context(ctx)
    async with api:
        await ctx.progress(0.05)
        response = await api.request(
            "POST",
            path,
            json_body=dict(payload),
            headers={"Accept": "audio/mpeg"},
            idempotent=False,  # paid: sent again only when the provider did not take it
        )
        limit = min(ctx.settings.provider_download_max_bytes, ctx.settings.max_artifact_bytes)
        if len(response.content) > limit:
            raise NodeFailure(
                "the provider's audio exceeds the artifact size limit", "limit_exceeded"
            )
    file = pctx.scratch_dir / "speech.mp3"
    await asyncio.to_thread(file.write_bytes, response.content)
    produced: Produced = await pctx.convert(file, Kind.AUDIO.value)
    if not produced.duration_ms:
        raise NodeFailure("the provider returned empty audio", "provider_error")
    if produced.duration_ms > max_seconds * 1000:
        raise NodeFailure(f"speech is longer than max_seconds ({max_seconds:g} s)")
    return produced


async def check_openai(
    settings: Settings, credential: policy.Credential
) -> tuple[bool, int | None, str]:
    """A credential's connection test: ``GET {base_url}/models`` (the cheapest authenticated
    call of an OpenAI-compatible API)."""
    base_url, key = credential.value("base_url") or "", credential.value("api_key") or ""
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
        return False, None, masking.mask(exc.message, (key,))
    except (TimeoutError, httpx.TimeoutException):
        return False, None, f"the provider did not answer within {TEST_TIMEOUT:g} s"
    except httpx.HTTPError as exc:
        return False, None, f"cannot reach the provider ({type(exc).__name__})"
    if response.is_success:
        return True, response.status_code, "the provider accepted the credential"
    if response.is_redirect:
        return (
            False,
            response.status_code,
            masking.mask(policy.redirected("the provider", response), (key,)),
        )
    message = masking.mask(_error_message(response), (key,))
    return (
        False,
        response.status_code,
        f"the provider refused (HTTP {response.status_code}): {message}",
    )


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
    json_schema: dict[str, Any] | None = Field(
        default=None,
        description="Ask for structured output: a JSON Schema the answer must follow (sent as "
        "the provider's response_format, for providers that support it). The answer is then "
        "checked to be JSON.",
    )
    credential: str | None = credential_param()


class LLMText(ProviderNode):
    spec = provider_spec(
        "LLMText",
        "LLM text",
        "Send the input text as a prompt to the configured chat model; outputs its answer.",
        LLMTextParams,
        Input("text", Kind.TEXT),
        output=Kind.TEXT,
        cost=Cost(credits=5),
    )

    def configured_model(self, settings: Settings) -> str:
        return settings.provider_llm_model

    def fingerprint(self, params: LLMTextParams, settings: Settings) -> dict[str, Any]:
        found = super().fingerprint(params, settings)
        if params.json_schema is None:
            del found["json_schema"]  # the keys stored before it existed stay valid
        return found

    def param_problems(self, params: LLMTextParams) -> list[ParamProblem]:
        schema = params.json_schema
        if schema is not None and (jsonvalue.depth(schema) > jsonvalue.MAX_JSON_DEPTH):
            return [ParamProblem(("json_schema",), "the schema nests too deeply")]
        if schema is not None and schema.get("type", "object") != "object":
            return [ParamProblem(("json_schema", "type"), "structured output is an object")]
        return []

    async def run(
        self, ctx: NodeContext, params: LLMTextParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        prompt = prompt_text(inputs)
        messages = [{"role": "system", "content": params.system}] if params.system else []
        messages.append({"role": "user", "content": prompt})
        payload = {
            "model": self.model(params, ctx.settings),
            "messages": messages,
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
        }
        if params.json_schema is not None:
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": params.json_schema, "strict": True},
            }
        async with endpoint(ctx) as api:
            body = await api.json("POST", "/chat/completions", json_body=payload)
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise NodeFailure("the AI provider's answer has no message", "provider_error") from exc
        if not isinstance(content, str):
            raise NodeFailure("the AI provider's answer has no text", "provider_error")
        if params.json_schema is not None:
            # Small (max_tokens bounds it); a provider ignoring the schema fails here, clearly.
            jsonvalue.parse(content, "the model's structured answer")
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


class TextToImage(ProviderNode):
    spec = provider_spec(
        "TextToImage",
        "Text to image",
        "Generate an image from the input text with the configured image model.",
        TextToImageParams,
        Input("text", Kind.TEXT),
        output=Kind.IMAGE,
        cost=Cost(credits=20),
    )

    def configured_model(self, settings: Settings) -> str:
        return settings.provider_image_model

    async def run(
        self, ctx: NodeContext, params: TextToImageParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        prompt = prompt_text(inputs)
        width, height = (int(v) for v in params.size.split("x"))
        check_pixels(ctx.settings, width, height)
        model = self.model(params, ctx.settings)
        payload: dict[str, Any] = {"model": model, "prompt": prompt, "n": 1, "size": params.size}
        if model.startswith("dall-e"):
            payload["response_format"] = "b64_json"  # gpt-image-* always answer b64 and refuse it
        if params.quality:
            payload["quality"] = params.quality
        async with endpoint(ctx) as api:
            body = await api.json(
                "POST", "/images/generations", json_body=payload, idempotent=False
            )
            return await answered_image(api, ctx, body)


NODES: list[NodeType] = [LLMText(), TextToImage()]
