"""fal (https://docs.fal.ai/model-endpoints/queue), through the adapter policy.

The queue API: ``POST https://queue.fal.run/{model_id}`` with the model's input as the JSON
body and ``Authorization: Key <key>`` answers ``request_id``, ``status_url``,
``response_url`` and ``cancel_url``. ``GET {status_url}?logs=1`` answers ``IN_QUEUE`` (with
``queue_position``), ``IN_PROGRESS`` (with ``logs``) or ``COMPLETED``; ``GET {response_url}``
the model's output (its files as ``{"url": ...}`` objects) or the model's error; ``PUT
{cancel_url}`` cancels. The URLs fal hands back are checked like any other (and the key goes
only to the queue's own origin).

A bound file past ``NODELOOM_PROVIDER_INLINE_MAX_BYTES`` is put in fal's storage first
(``upload_file``) and sent as its URL; smaller ones go inline as data: URIs.

The platform API (``https://api.fal.ai/v1``, ``NODELOOM_FAL_API_URL``) serves the credential
test (``GET /models/pricing``) and the model schemas for the editor (``GET /models`` with
``expand=openapi-3.0``: the endpoint's OpenAPI document).
"""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from typing import Any

from nodeloom.nodes.adapters import bound, policy
from nodeloom.nodes.adapters.openapi import json_body as openapi_body
from nodeloom.nodes.adapters.openapi import ordered, resolve_refs
from nodeloom.nodes.adapters.outputs import pick_output
from nodeloom.sdk._node import ArtifactRef, Kind, NodeFailure, Produced
from nodeloom.settings import Settings

NAME = "fal"
KIND = "fal"
MODEL = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*){1,4}$")
MODEL_PATTERN = r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*){1,4}$"
PROGRESS = re.compile(r"(\d{1,3})%")
STEPS = re.compile(r"(\d+)\s*/\s*(\d+)")
# A completed request's result read again only after these answers (busy, or a gateway's).
GATEWAY_RETRIED = frozenset({408, 429, 502, 503, 504})


def progress_of(status: dict[str, Any]) -> float | None:
    """From the last log line that shows a percentage or ``step/steps``."""
    logs = status.get("logs")
    if not isinstance(logs, list):
        return None
    for entry in reversed(logs[-50:]):
        message = entry.get("message") if isinstance(entry, dict) else None
        if not isinstance(message, str):
            continue
        if found := PROGRESS.search(message):
            return min(100, int(found.group(1))) / 100
        if (steps := STEPS.search(message)) and int(steps.group(2)) > 0:
            return min(1.0, int(steps.group(1)) / int(steps.group(2)))
    return None


def _url(job: dict[str, Any], name: str, default: str) -> str:
    value = job.get(name)
    return value if isinstance(value, str) and value else default


async def upload_file(api: policy.Provider, settings: Settings, key: str, ref: ArtifactRef) -> str:
    """``ref`` put in fal's storage as fal_client's storage upload does: ``POST
    {fal_rest_url}/storage/upload/initiate?storage_type=gcs`` with the file's name and type
    (the key sent there, fal's own REST origin) answers a signed ``upload_url`` and the
    ``file_url``; the bytes go to ``upload_url`` by ``PUT`` with that Content-Type and no
    key (the signature is the URL's); the model is given ``file_url``. Both URLs are
    checked like any other. Not a paid call: sent again on 429 or 5xx."""
    data = await asyncio.to_thread(ref.read_bytes)
    content_type = ref.content_type
    answer = await api.json(
        "POST",
        settings.fal_rest_url.rstrip("/") + "/storage/upload/initiate?storage_type=gcs",
        json_body={"file_name": bound.file_name(ref), "content_type": content_type},
        headers={"Authorization": f"Key {key}"},
    )
    upload_url, file_url = answer.get("upload_url"), answer.get("file_url")
    if not all(
        isinstance(u, str) and u.startswith(("https://", "http://")) for u in (upload_url, file_url)
    ):
        raise policy.ProviderError(f"{NAME} answered an upload without upload_url and file_url")
    assert isinstance(upload_url, str) and isinstance(file_url, str)
    # A client that holds no key: the signed URL is its own credential.
    async with policy.Provider(settings, name=NAME, base_url=upload_url, secrets=(key,)) as put:
        await put.request("PUT", upload_url, content=data, headers={"Content-Type": content_type})
    return file_url


async def run(
    ctx: policy.ProviderContext,
    model: str,
    payload: dict[str, Any],
    kind: Kind,
    *,
    output_index: int = 0,
    output_path: str = "",
) -> Produced:
    """Run ``model`` on ``payload`` through fal's queue and return its output."""
    if not MODEL.match(model):
        raise NodeFailure(f"model {model!r} is not a fal model id such as fal-ai/flux/dev")
    credential = policy.require_credential(ctx, KIND)
    key = credential.value("api_key") or ""
    settings = ctx.settings
    async with policy.Provider(
        settings,
        name=NAME,
        base_url=settings.fal_queue_url,
        headers={"Authorization": f"Key {key}"},
        secrets=(key,),
        connections=ctx.connections,
    ) as api:

        async def upload(ref: ArtifactRef) -> str:
            return await upload_file(api, settings, key, ref)

        async def submit() -> dict[str, Any]:
            sent = await bound.resolve(payload, settings.provider_inline_max_bytes, upload)
            answer = await api.json("POST", f"/{model}", json_body=sent, idempotent=False)
            request_id = answer.get("request_id")
            if not isinstance(request_id, str):
                raise policy.ProviderError(f"{NAME} answered without a request_id")
            base = f"/{'/'.join(model.split('/')[:2])}/requests/{request_id}"
            return {
                "id": request_id,
                "status_url": _url(answer, "status_url", api.url(base + "/status")),
                "response_url": _url(answer, "response_url", api.url(base)),
                "cancel_url": _url(answer, "cancel_url", api.url(base + "/cancel")),
            }

        async def cancel(job: policy.Job) -> None:
            await api.request("PUT", str(job.data["cancel_url"]), ok=lambda s: s < 500)

        job = await policy.submit_once(
            ctx, KIND, {"model": model, "input": payload}, submit, cancel=cancel
        )
        await policy.report(ctx, 0.0)

        async with policy.cancelling(ctx, lambda: cancel(job)):
            delays = policy.poll_delays()
            while True:
                status = await api.json("GET", str(job.data["status_url"]) + "?logs=1")
                state = status.get("status")
                if state == "COMPLETED":
                    if status.get("error"):  # fal gave the request up (a runner lost...)
                        await policy.forget_job(ctx)
                        error_type = status.get("error_type")
                        raise api.failed(
                            f"{status['error']}" + (f" ({error_type})" if error_type else "")
                        )
                    break
                if state not in ("IN_QUEUE", "IN_PROGRESS"):
                    await policy.forget_job(ctx)
                    raise api.failed(status.get("error") or f"request {state}")
                fraction = progress_of(status)
                if fraction is not None:
                    await policy.report(ctx, fraction)
                await asyncio.sleep(next(delays))
            try:
                # A completed request's result is kept by fal: a 500 there is the request's
                # own error (fal retries what its runners fail on before it completes),
                # not read again; 502-504 are a gateway's, retried.
                result = await api.json(
                    "GET", str(job.data["response_url"]), retry=lambda s: s in GATEWAY_RETRIED
                )
            except policy.ProviderError as exc:
                await policy.forget_job(ctx)
                raise policy.ProviderError(
                    exc.message.replace("refused the request", "failed"), exc.status
                ) from exc
        return await pick_output(ctx, api, result, kind, output_index, output_path)


# ----------------------------------------------------------------------------- platform API

TEST_TIMEOUT = 10.0  # seconds, for a credential's connection test
SCHEMA_TIMEOUT = 10.0  # seconds, for reading a model's schema for the editor
PRICED_MODEL = "fal-ai/flux/dev"  # any model: the test asks what one costs


def _platform(settings: Settings, key: str) -> policy.Provider:
    return policy.Provider.waited_on(
        settings,
        name=NAME,
        base_url=settings.fal_api_url,
        headers={"Authorization": f"Key {key}"},
        secrets=(key,),
    )


async def check(settings: Settings, credential: policy.Credential) -> tuple[bool, int | None, str]:
    """A credential's connection test: ``GET {fal_api_url}/models/pricing?endpoint_id=...``.
    fal's queue has no free authenticated call (a submission is paid, a status read needs a
    request id); of its platform API, the model list answers without a key, while pricing
    requires one and costs nothing. Through the address check, within TEST_TIMEOUT; (ok,
    HTTP status, message), fal's error quoted, the key never."""
    api = _platform(settings, credential.value("api_key") or "")
    path = f"/models/pricing?endpoint_id={PRICED_MODEL}"
    return await policy.connection_test(
        api, path, TEST_TIMEOUT, lambda _body: f"{NAME} accepted the key"
    )


def schemas_of(openapi: Any) -> tuple[dict[str, Any], Any] | None:
    """(Input schema, Output schema or None) of fal's OpenAPI document for one endpoint: the
    body of its queue submission (``POST /{model}``) and the answer of its result (``GET
    .../requests/{request_id}``), references resolved; None without an input schema."""
    paths = openapi.get("paths") if isinstance(openapi, dict) else None
    components = openapi.get("components") if isinstance(openapi, dict) else None
    schemas = components.get("schemas") if isinstance(components, dict) else None
    if not isinstance(paths, dict):
        return None
    schemas = schemas if isinstance(schemas, dict) else {}
    found: Any = None
    output: Any = None
    for path, operations in paths.items():
        if not isinstance(operations, dict) or not isinstance(path, str):
            continue
        if "/requests/" not in path and found is None:
            found = openapi_body(operations.get("post"), "request")
        elif path.endswith("/requests/{request_id}") and output is None:
            output = openapi_body(operations.get("get"), "response")
    found = resolve_refs(found, schemas)
    if not isinstance(found, dict):
        return None
    output = resolve_refs(output, schemas)
    return ordered(found), output if isinstance(output, dict) else None


def model_id(model: str) -> str:
    """``model`` when it is a fal model id, else ValueError."""
    if not MODEL.match(model):
        raise ValueError(f"model {model!r} is not a fal model id such as fal-ai/flux/dev")
    return model


async def model_schema(settings: Settings, key: str, model: str) -> dict[str, Any]:
    """What fal publishes about ``model`` (an endpoint id such as fal-ai/flux/dev): ``GET
    {fal_api_url}/models?endpoint_id=...&expand=openapi-3.0``; the same answer as Replicate's
    (``model``, ``version`` None, ``description``, ``input``, ``output``). ``ProviderError``
    quoting fal (the key masked), ``LookupError`` when fal has no such model or no input
    schema for it, ``ValueError`` for a malformed model id."""
    model_id(model)
    api = _platform(settings, key)
    limit = min(SCHEMA_TIMEOUT, settings.provider_timeout_seconds)
    query = urllib.parse.urlencode({"endpoint_id": model, "expand": "openapi-3.0"})
    body = await policy.read_json(api, f"/models?{query}", limit)
    models = body.get("models")
    entry = next(
        (
            m
            for m in (models if isinstance(models, list) else [])
            if isinstance(m, dict) and m.get("endpoint_id") == model
        ),
        None,
    )
    if entry is None:
        raise LookupError(f"{NAME} has no model {model}")
    found = schemas_of(entry.get("openapi"))
    if found is None:
        raise LookupError(f"{NAME} publishes no input schema for {model}")
    metadata = entry.get("metadata")
    description = metadata.get("description") if isinstance(metadata, dict) else None
    return {
        "model": model,
        "version": None,
        "description": description if isinstance(description, str) else None,
        "input": found[0],
        "output": found[1],
    }
