"""Every provider an account's credentials reach, each declared once (the providers' table).

A provider is one credential kind: its fields (a Pydantic model whose ``SECRET`` names the
secret ones), what a form calls it, its connection test and, for a hosted-model API, the
adapter its model nodes call (``HostedModels``). Everything else is derived from this table:

- the kinds the API accepts and publishes (schemas/credentials.py, GET /credential-kinds,
  which the web app's credential forms are built from), and the CLI's;
- the connection tests (POST /credentials/{id}/test): a provider without one answers so;
- the hosted-model nodes (nodes/hosted.py): ``{prefix}Model``, ``{prefix}ModelVideo``,
  ``...Audio`` and ``...Text`` for each hosted provider, and the families ``TextToVideo``,
  ``ImageToVideo`` and ``TextToMusic``, which take a credential of any of them;
- the model schemas the editor reads (GET /credentials/{id}/model-schema).

Adding a provider is its fields model and one ``Provider`` row in ``PROVIDERS``; a hosted-model
API also gives its adapter module (run, model_schema, check). The other nodes that take a
credential (LLMText, TextToSpeech, ComfyUIWorkflow...) name its kind in their
``NodeSpec.credential_kinds``, and GET /credential-kinds lists them under it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from nodeloom.nodes import elevenlabs, providers
from nodeloom.nodes.adapters import comfyui_protocol, fal, replicate
from nodeloom.nodes.adapters.policy import Credential
from nodeloom.sdk._node import Produced
from nodeloom.settings import ComfyUIServer, Settings

SECRET_MAX = 4096

# ----------------------------------------------------------------------------- fields


def _url(value: str) -> str:
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise ValueError("base_url is not a URL") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("base_url must be an http or https URL with a host")
    if url.userinfo:
        raise ValueError("base_url must not carry a user name or password")
    return value.rstrip("/")


Secret = Field(min_length=1, max_length=SECRET_MAX, repr=False)


class KindFields(BaseModel):
    """The fields of a credential kind; ``SECRET`` names those stored only encrypted."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    SECRET: ClassVar[frozenset[str]] = frozenset()

    def public(self) -> dict[str, Any]:
        return self.model_dump(exclude=set(self.SECRET), exclude_none=True)

    def secret(self) -> dict[str, str]:
        return {k: v for k, v in self.model_dump(include=set(self.SECRET)).items() if v}


class _BaseUrl(KindFields):
    base_url: str = Field(max_length=2000, description="http(s) URL of the API")

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return _url(value)


class _BaseUrlAndKey(_BaseUrl):
    SECRET = frozenset({"api_key"})
    api_key: str = Secret


class OpenAIFields(_BaseUrlAndKey):
    """Any OpenAI-compatible API: OpenAI itself, Ollama, vLLM, LocalAI..."""


class ReplicateFields(KindFields):
    SECRET = frozenset({"api_token"})
    api_token: str = Secret


class _ApiKey(KindFields):
    SECRET = frozenset({"api_key"})
    api_key: str = Secret


class FalFields(_ApiKey):
    """fal.ai."""


FLEET_MAX = 32  # servers one comfyui credential may name


def _servers(value: Any) -> Any:
    """``servers`` as a form sends it (URLs separated by commas, spaces or new lines) or
    as JSON (a list of URLs or of objects): a list the model checks."""
    if isinstance(value, str):
        value = [u for u in re.split(r"[\s,]+", value) if u]
    if isinstance(value, list):
        return [{"base_url": v} if isinstance(v, str) else v for v in value]
    return value


class ComfyUIFields(KindFields):
    """One ComfyUI server (``base_url``), a fleet (``servers``: a prompt goes to a server
    that has its nodes and models, with the shortest queue), or the operator's shared pool
    (``shared_pool``)."""

    SECRET = frozenset({"bearer_token", "password"})
    base_url: str | None = Field(
        default=None, max_length=2000, description="http(s) URL of the ComfyUI server"
    )
    servers: list[ComfyUIServer] | None = Field(
        default=None,
        min_length=1,
        max_length=FLEET_MAX,
        description="A fleet instead of one server: URLs (separated by commas or spaces), "
        "or a JSON list of {base_url, name?, max_in_flight? (default 1), draining?}.",
    )
    shared_pool: bool = Field(
        default=False, description="Use the operator's shared pool of ComfyUI servers."
    )

    def public(self) -> dict[str, Any]:
        shown = super().public()
        if not self.shared_pool:
            shown.pop("shared_pool")
        return shown

    bearer_token: str | None = Field(default=None, min_length=1, max_length=SECRET_MAX, repr=False)
    username: str | None = Field(default=None, min_length=1, max_length=200)
    password: str | None = Field(default=None, min_length=1, max_length=SECRET_MAX, repr=False)

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return None if value is None else _url(value)

    @field_validator("servers", mode="before")
    @classmethod
    def _server_list(cls, value: Any) -> Any:
        return _servers(value)

    @field_validator("servers")
    @classmethod
    def _no_pool_secrets(cls, value: list[ComfyUIServer] | None) -> list[ComfyUIServer] | None:
        for server in value or []:
            if server.bearer_token is not None:
                raise ValueError("a server's token is the credential's bearer_token")
        return value

    @model_validator(mode="after")
    def _one_way_in(self) -> ComfyUIFields:
        ways = (self.base_url is not None) + (self.servers is not None) + self.shared_pool
        if ways != 1:
            raise ValueError("give exactly one of base_url, servers or shared_pool")
        if self.servers is not None:
            urls = [s.base_url for s in self.servers]
            if len(set(urls)) != len(urls):
                raise ValueError("a server is listed twice")
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.bearer_token is not None and self.username is not None:
            raise ValueError("either bearer_token or username and password, not both")
        return self


class ElevenLabsFields(_BaseUrlAndKey):
    """ElevenLabs (``base_url`` only to reach another deployment of its API)."""

    base_url: str = Field(
        default=elevenlabs.DEFAULT_URL, max_length=2000, description="http(s) URL of the API"
    )


class HttpBearerFields(KindFields):
    SECRET = frozenset({"token"})
    token: str = Secret


class HttpHeaderFields(KindFields):
    SECRET = frozenset({"header_value"})
    header_name: str = Field(min_length=1, max_length=200, pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
    header_value: str = Secret


# What a form calls each field (whatever its kind).
FIELD_TITLES: dict[str, str] = {
    "base_url": "Base URL",
    "api_key": "API key",
    "api_token": "API token",
    "bearer_token": "Bearer token",
    "username": "User name",
    "password": "Password",
    "token": "Token",
    "header_name": "Header name",
    "header_value": "Header value",
    "servers": "Servers (a fleet)",
    "shared_pool": "Shared pool",
}

# ----------------------------------------------------------------------------- providers

# A connection test: (settings, the credential decrypted) -> (ok, HTTP status, message). Each
# calls the provider's cheapest authenticated endpoint through the address check.
Check = Callable[[Settings, Credential], Awaitable[tuple[bool, int | None, str]]]
RunModel = Callable[..., Awaitable[Produced]]
ReadSchema = Callable[[Settings, str, str], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class HostedModels:
    """A hosted-model API: what its model nodes (``{prefix}Model``...) and the families call.

    ``run(ctx, model, payload, kind, output_index=, output_path=, **options)`` runs a model
    and returns its output; ``options`` are the params only this API's model nodes have,
    passed to ``run`` by name. ``model_schema(settings, token, model)`` reads what the API
    publishes about a model, ``token`` being the credential's ``key_field``;
    ``check_model(model)`` raises ValueError for a model id it cannot describe."""

    prefix: str  # of its node types: ReplicateModel, FalModelVideo...
    shown: str  # how its name is written in titles and descriptions
    key_field: str
    model_pattern: str
    model_description: str
    image_field: str  # the input field an ImageToVideo image goes in by default
    run: RunModel
    model_schema: ReadSchema
    check_model: Callable[[str], object]
    options: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Provider:
    kind: str
    title: str  # what a form calls it
    fields: type[KindFields]
    placeholders: Mapping[str, str] = field(default_factory=dict)  # field -> example shown
    test: Check | None = None
    hosted: HostedModels | None = None


PROVIDERS: tuple[Provider, ...] = (
    Provider(
        providers.CREDENTIAL_KIND,
        "OpenAI-compatible (OpenAI, Ollama, vLLM, LocalAI…)",
        OpenAIFields,
        placeholders={"base_url": "https://api.openai.com/v1"},
        test=providers.check_openai,
    ),
    Provider(
        replicate.KIND,
        "Replicate",
        ReplicateFields,
        test=replicate.check,
        hosted=HostedModels(
            prefix="Replicate",
            shown=replicate.NAME,
            key_field="api_token",
            model_pattern=replicate.MODEL_PATTERN,
            model_description="owner/name (its latest version), owner/name:version or a "
            "version id.",
            image_field="image",
            run=replicate.run,
            model_schema=replicate.model_schema,
            check_model=replicate.schema_call,
            options={
                "wait_seconds": (
                    int,
                    Field(
                        default=0,
                        ge=0,
                        le=60,
                        description="Ask Replicate to hold the create call up to this long "
                        "(Prefer: wait) for a fast model; 0 polls from the start. A crash "
                        "during that wait submits again.",
                    ),
                )
            },
        ),
    ),
    Provider(
        fal.KIND,
        "fal.ai",
        FalFields,
        test=fal.check,
        hosted=HostedModels(
            prefix="Fal",
            shown=fal.NAME,
            key_field="api_key",
            model_pattern=fal.MODEL_PATTERN,
            model_description="fal model id, e.g. fal-ai/flux/dev.",
            image_field="image_url",
            run=fal.run,
            model_schema=fal.model_schema,
            check_model=fal.model_id,
        ),
    ),
    Provider(
        comfyui_protocol.CREDENTIAL_KIND,
        "ComfyUI",
        ComfyUIFields,
        placeholders={
            "base_url": "https://comfy.example.com",
            "servers": "http://gpu1:8188, http://gpu2:8188",
        },
        test=comfyui_protocol.check,
    ),
    Provider(elevenlabs.KIND, "ElevenLabs", ElevenLabsFields, test=elevenlabs.check),
    Provider("http_bearer", "HTTP bearer token", HttpBearerFields),
    Provider(
        "http_header",
        "HTTP header",
        HttpHeaderFields,
        placeholders={"header_name": "X-Api-Key"},
    ),
)

BY_KIND: dict[str, Provider] = {p.kind: p for p in PROVIDERS}
# The hosted-model APIs, by kind, in the table's order.
HOSTED: dict[str, HostedModels] = {p.kind: p.hosted for p in PROVIDERS if p.hosted is not None}


def hosted_pattern() -> str:
    """A model id of any hosted-model API."""
    return "|".join(f"(?:{h.model_pattern})" for h in HOSTED.values())
