"""Replicate (https://replicate.com/docs/reference/http), through the adapter policy.

A prediction is created with ``POST /v1/predictions`` (``{"version": <id>, "input": ...}``)
or, for a model named ``owner/name`` without a version, ``POST
/v1/models/{owner}/{name}/predictions``; ``Authorization: Bearer <token>``. The answer is
the prediction: ``id``, ``status`` (starting, processing, succeeded, failed, canceled, or
aborted: ended before it started, a deadline passed),
``logs``, ``output`` (URLs of the files made, or values), ``error``. It is followed with
``GET /v1/predictions/{id}`` (back-off 0.5 s growing to 5 s) and cancelled with ``POST
/v1/predictions/{id}/cancel`` when our run is cancelled.

``Prefer: wait=N`` makes the create call answer only when the prediction is done (or after
N seconds): fewer round trips for a fast model, but the prediction's id is known only when
the call returns, so a crash during those seconds cannot be resumed and the prediction is
created again. It is used only when a node asks for it (``wait_seconds``).

**Files**: a bound input past ``NODELOOM_PROVIDER_INLINE_MAX_BYTES`` is uploaded first
with ``POST /v1/files`` (``upload_file``) and the prediction names it by its ``urls.get``;
smaller ones go inline as data: URIs (adapters/bound.py).

**Webhooks**: when the server has a public base URL (adapters/hooks.py) and Replicate hands
out the account's signing secret (``GET /v1/webhooks/default/secret``), the prediction is
created with ``webhook`` (this node run's URL) and ``webhook_events_filter`` (start, output,
logs, completed); the secret is stored encrypted with the job, for the route that checks the
deliveries (api/routes/provider_hooks.py). The node then waits for those deliveries (their
logs become its progress) and polls only every ``NODELOOM_REPLICATE_WEBHOOK_POLL_SECONDS``,
so a lost webhook delays it and never loses it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections import OrderedDict
from typing import Any

import httpx

from nodeloom.auth.tokens import encrypt
from nodeloom.nodes.adapters import bound, policy
from nodeloom.nodes.adapters.openapi import resolve_refs
from nodeloom.nodes.adapters.outputs import pick_output
from nodeloom.sdk._node import ArtifactRef, Kind, NodeFailure, Produced
from nodeloom.settings import Settings

NAME = "Replicate"
KIND = "replicate"
VERSION_ID = re.compile(r"^[0-9a-f]{64}$")
MODEL = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(:[0-9a-f]{64})?$")
MODEL_PATTERN = r"^([0-9a-f]{64}|[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(:[0-9a-f]{64})?)$"
PROGRESS = re.compile(r"(\d{1,3})%\|")  # a tqdm bar in the logs: " 45%|████▌     | 9/20"
RUNNING = frozenset({"starting", "processing"})
# "aborted": Replicate ended the prediction before it started (a deadline passed).
FINAL = frozenset({"succeeded", "failed", "canceled", "aborted"})
# Every delivery we can use: start, new output, new logs (progress), the end.
WEBHOOK_EVENTS = ("start", "output", "logs", "completed")
SIGNING_CACHE_MAX = 256  # tokens whose signing secret this process keeps
SIGNING_TTL = 3600.0  # seconds one is kept: a secret Replicate rotates is read again
# Seconds a "no secret" answer is kept (an API that has no such endpoint, such as a
# self-hosted Replicate-compatible one): its nodes poll meanwhile, without asking again on
# every run (a request more per prediction, issue #36).
NO_SIGNING_TTL = 300.0
_signing: OrderedDict[str, tuple[float, str | None]] = OrderedDict()
log = logging.getLogger("nodeloom.providers")


TEST_TIMEOUT = 10.0  # seconds, for a credential's connection test


def _account_api(settings: Settings, token: str) -> policy.Provider:
    """Replicate's API with ``token``, for a call the user waits on."""
    return policy.Provider.waited_on(
        settings,
        name=NAME,
        base_url=settings.replicate_api_url,
        headers={"Authorization": f"Bearer {token}"},
        secrets=(token,),
    )


async def check(settings: Settings, credential: policy.Credential) -> tuple[bool, int | None, str]:
    """A credential's connection test: ``GET /v1/account`` (Replicate's cheapest authenticated
    call) through the address check, within TEST_TIMEOUT; (ok, HTTP status, message), the
    provider's error quoted, the token never."""
    api = _account_api(settings, credential.value("api_token") or "")

    def accepted_by(body: dict[str, Any]) -> str:
        who = body.get("username")
        return f"{NAME} accepted the token" + (f" (account {who})" if who else "")

    return await policy.connection_test(api, "/account", TEST_TIMEOUT, accepted_by)


def create_call(model: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(path, body) of the create call for ``model``: a version id, ``owner/name:version``
    or ``owner/name`` (an official model, run at its latest version)."""
    if VERSION_ID.match(model):
        return "/predictions", {"version": model, "input": payload}
    if not MODEL.match(model):
        raise NodeFailure(f"model {model!r} is neither owner/name[:version] nor a version id")
    name, colon, version = model.partition(":")
    if colon:
        return "/predictions", {"version": version, "input": payload}
    return f"/models/{name}/predictions", {"input": payload}


def progress_of(prediction: dict[str, Any]) -> float | None:
    logs = prediction.get("logs")
    if not isinstance(logs, str):
        return None
    found = PROGRESS.findall(logs[-2000:])
    return min(100, int(found[-1])) / 100 if found else None


async def signing_secret(api: policy.Provider, token: str) -> str | None:
    """The account's webhook signing secret (``GET /v1/webhooks/default/secret``, a
    ``whsec_`` key), kept in this process's memory per API and token for SIGNING_TTL, never
    logged; None when Replicate does not give one (the node then polls), an answer kept for
    NO_SIGNING_TTL."""
    key = hashlib.sha256(f"{api.base_url}\n{token}".encode()).hexdigest()
    found = _signing.get(key)
    if found is not None and found[0] > time.monotonic():
        return found[1]
    secret: str | None = None
    try:
        body = await api.json("GET", "/webhooks/default/secret")
    except NodeFailure as exc:
        log.info("no webhook signing secret from %s (%s): polling", NAME, exc.message)
    else:
        key_given = body.get("key")
        if isinstance(key_given, str) and key_given.startswith("whsec_"):
            secret = key_given
    ttl = SIGNING_TTL if secret is not None else NO_SIGNING_TTL
    _signing[key] = (time.monotonic() + ttl, secret)
    _signing.move_to_end(key)
    while len(_signing) > SIGNING_CACHE_MAX:
        _signing.popitem(last=False)
    return secret


async def upload_file(api: policy.Provider, ref: ArtifactRef) -> str:
    """``ref`` uploaded with ``POST /v1/files`` (multipart, the file in the ``content``
    part, as replicate-python's ``files.create``): the file's ``urls.get``, the URL a
    prediction's input names it by. Not a paid call: sent again on 429 or 5xx."""
    data = await asyncio.to_thread(ref.read_bytes)
    form = httpx.Request(
        "POST", api.url("/files"), files={"content": (bound.file_name(ref), data, ref.content_type)}
    )
    content = form.read()
    headers = {"Content-Type": form.headers["Content-Type"]}
    answer = await api.json("POST", "/files", content=content, headers=headers)
    urls = answer.get("urls")
    url = urls.get("get") if isinstance(urls, dict) else None
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise policy.ProviderError(f"{NAME} took the file but gave no URL for it (urls.get)")
    return url


async def run(
    ctx: policy.ProviderContext,
    model: str,
    payload: dict[str, Any],
    kind: Kind,
    *,
    output_index: int = 0,
    output_path: str = "",
    wait_seconds: int = 0,
) -> Produced:
    """Run ``model`` on ``payload`` at Replicate and return its output as an artifact."""
    credential = policy.require_credential(ctx, KIND)
    token = credential.value("api_token") or ""
    settings = ctx.settings
    path, body = create_call(model, payload)
    headers = {"Authorization": f"Bearer {token}"}
    async with policy.Provider(
        settings,
        name=NAME,
        base_url=settings.replicate_api_url,
        headers=headers,
        secrets=(token,),
        connections=ctx.connections,
    ) as api:
        first: dict[str, Any] | None = None

        async def submit() -> dict[str, Any]:
            nonlocal first
            hook = ctx.hook_url(KIND)
            signing = await signing_secret(api, token) if hook else None
            sent = body
            if hook and signing:
                sent = {**body, "webhook": hook, "webhook_events_filter": list(WEBHOOK_EVENTS)}
            prefer = {"Prefer": f"wait={wait_seconds}"} if wait_seconds else {}
            inline_max = settings.provider_inline_max_bytes
            resolved = {**sent, "input": await bound.resolve(payload, inline_max, upload)}
            first = await api.json(
                "POST", path, json_body=resolved, headers=prefer, idempotent=False
            )
            if not isinstance(first.get("id"), str):
                raise policy.ProviderError(f"{NAME} answered without a prediction id")
            if sent is body:
                return {"id": first["id"]}
            # Stored with the job (encrypted) for the route that checks this job's webhooks.
            return {"id": first["id"], "hook_secret": encrypt(settings.secret, str(signing))}

        async def upload(ref: ArtifactRef) -> str:
            return await upload_file(api, ref)

        async def cancel(job: policy.Job) -> None:
            await api.request("POST", f"/predictions/{job.id}/cancel")

        job = await policy.submit_once(
            ctx, KIND, {"model": model, "input": payload}, submit, cancel=cancel
        )
        await policy.report(ctx, 0.0)

        async with policy.cancelling(ctx, lambda: cancel(job)):
            if "hook_secret" in job.data:
                prediction = await _follow_hooks(ctx, api, job, first)
            else:
                prediction = await _poll(ctx, api, job, first)
        return await pick_output(
            ctx, api, prediction.get("output"), kind, output_index, output_path
        )


async def _settled(
    ctx: policy.ProviderContext, api: policy.Provider, job: policy.Job, prediction: dict[str, Any]
) -> bool:
    """True when ``prediction`` succeeded; its failure raised; its progress reported."""
    status = prediction.get("status")
    if status == "succeeded":
        return True
    if status not in RUNNING:
        await policy.forget_job(ctx)
        if status == "canceled":
            raise policy.ProviderError(f"{NAME} cancelled the prediction {job.id}")
        if status == "aborted":
            why = prediction.get("error")
            raise policy.ProviderError(
                api.mask(f"{NAME} aborted the prediction {job.id}" + (f": {why}" if why else ""))
            )
        raise api.failed(prediction.get("error") or f"prediction {status}")
    fraction = progress_of(prediction)
    if fraction is not None:
        await policy.report(ctx, fraction)
    return False


async def _poll(
    ctx: policy.ProviderContext,
    api: policy.Provider,
    job: policy.Job,
    first: dict[str, Any] | None,
) -> dict[str, Any]:
    """The prediction followed by polling, with back-off (no webhook)."""
    prediction = first
    delays = policy.poll_delays()
    while True:
        if prediction is None:
            prediction = await api.json("GET", f"/predictions/{job.id}")
        if await _settled(ctx, api, job, prediction):
            return prediction
        await asyncio.sleep(next(delays))
        prediction = None


async def _follow_hooks(
    ctx: policy.ProviderContext,
    api: policy.Provider,
    job: policy.Job,
    first: dict[str, Any] | None,
) -> dict[str, Any]:
    """The prediction followed by its webhooks: each delivery the route keeps on the node
    run wakes this wait, which reads it there. One poll right away (the job is stored now,
    so a webhook that came before was ignored but shows in this read), then one every
    ``replicate_webhook_poll_seconds``, so a lost webhook only delays the node."""
    every = ctx.settings.replicate_webhook_poll_seconds
    clock = asyncio.get_running_loop()
    async with ctx.signals() as signals:
        if first is not None and first.get("status") not in RUNNING:
            prediction = first
        else:
            prediction = await api.json("GET", f"/predictions/{job.id}")
        next_poll = clock.time() + every
        while not await _settled(ctx, api, job, prediction):
            await signals.wait(next_poll - clock.time())
            if clock.time() >= next_poll:
                prediction = await api.json("GET", f"/predictions/{job.id}")
                next_poll = clock.time() + every
                continue
            stored = await ctx.stored_job()
            delivered = stored.get("delivered") if isinstance(stored, dict) else None
            if isinstance(stored, dict) and stored.get("id") == job.id and delivered:
                prediction = delivered
        return prediction


# ----------------------------------------------------------------------------- model schema

SCHEMA_TIMEOUT = 10.0  # seconds, for reading a model's schema for the editor


def schema_call(model: str) -> str:
    """The path that describes ``model``: ``/models/{owner}/{name}`` (its latest version)
    or ``/models/{owner}/{name}/versions/{id}``. A bare version id names no model, and
    Replicate's API reads a version only under its model: refused with ValueError."""
    if VERSION_ID.match(model):
        raise ValueError("a version id alone names no model: send owner/name:version")
    if not MODEL.match(model):
        raise ValueError(f"model {model!r} is neither owner/name[:version] nor a version id")
    name, colon, version = model.partition(":")
    return f"/models/{name}/versions/{version}" if colon else f"/models/{name}"


def schemas_of(version: Any) -> tuple[dict[str, Any], Any] | None:
    """(Input schema, Output schema or None) of a model version as Replicate describes it
    (``openapi_schema.components.schemas``), references resolved; None without one."""
    if not isinstance(version, dict):
        return None
    openapi = version.get("openapi_schema")
    components = openapi.get("components") if isinstance(openapi, dict) else None
    schemas = components.get("schemas") if isinstance(components, dict) else None
    if not isinstance(schemas, dict) or not isinstance(schemas.get("Input"), dict):
        return None
    found = resolve_refs(schemas["Input"], schemas)
    output = schemas.get("Output")
    return found, resolve_refs(output, schemas) if isinstance(output, dict) else None


async def model_schema(settings: Settings, token: str, model: str) -> dict[str, Any]:
    """What Replicate publishes about ``model`` (owner/name or owner/name:version): ``{"model",
    "version", "description", "input", "output"}``, the schemas as JSON schema. Through the
    address check, within SCHEMA_TIMEOUT (or the provider timeout if shorter);
    ``ProviderError`` quoting Replicate (the token masked), ``LookupError`` when the model
    has no version with a schema."""
    path = schema_call(model)
    api = _account_api(settings, token)
    limit = min(SCHEMA_TIMEOUT, settings.provider_timeout_seconds)
    body = await policy.read_json(api, path, limit)
    version = body if ":" in model else body.get("latest_version")
    found = schemas_of(version)
    if found is None:
        raise LookupError(f"{NAME} publishes no input schema for {model}")
    assert isinstance(version, dict)
    name = model.partition(":")[0]
    description = body.get("description") if ":" not in model else None
    return {
        "model": name,
        "version": version.get("id"),
        "description": description if isinstance(description, str) else None,
        "input": found[0],
        "output": found[1],
    }
