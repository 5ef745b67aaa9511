"""Replicate (https://replicate.com/docs/reference/http), through the adapter policy.

A prediction is created with ``POST /v1/predictions`` (``{"version": <id>, "input": ...}``)
or, for a model named ``owner/name`` without a version, ``POST
/v1/models/{owner}/{name}/predictions``; ``Authorization: Bearer <token>``. The answer is
the prediction: ``id``, ``status`` (starting, processing, succeeded, failed, canceled),
``logs``, ``output`` (URLs of the files made, or values), ``error``. It is followed with
``GET /v1/predictions/{id}`` (back-off 0.5 s growing to 5 s) and cancelled with ``POST
/v1/predictions/{id}/cancel`` when our run is cancelled.

``Prefer: wait=N`` makes the create call answer only when the prediction is done (or after
N seconds): fewer round trips for a fast model, but the prediction's id is known only when
the call returns, so a crash during those seconds cannot be resumed and the prediction is
created again. It is used only when a node asks for it (``wait_seconds``).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from nodeloom.nodes.adapters import policy
from nodeloom.nodes.adapters.outputs import pick_output
from nodeloom.nodes.base import Kind, NodeFailure, Produced

NAME = "Replicate"
KIND = "replicate"
VERSION_ID = re.compile(r"^[0-9a-f]{64}$")
MODEL = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(:[0-9a-f]{64})?$")
MODEL_PATTERN = r"^([0-9a-f]{64}|[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(:[0-9a-f]{64})?)$"
PROGRESS = re.compile(r"(\d{1,3})%\|")  # a tqdm bar in the logs: " 45%|████▌     | 9/20"
RUNNING = frozenset({"starting", "processing"})


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
        settings, name=NAME, base_url=settings.replicate_api_url, headers=headers, secrets=(token,)
    ) as api:
        first: dict[str, Any] | None = None

        async def submit() -> dict[str, Any]:
            nonlocal first
            prefer = {"Prefer": f"wait={wait_seconds}"} if wait_seconds else {}
            first = await api.json("POST", path, json_body=body, headers=prefer, idempotent=False)
            if not isinstance(first.get("id"), str):
                raise policy.ProviderError(f"{NAME} answered without a prediction id")
            return {"id": first["id"]}

        job = await policy.submit_once(ctx, KIND, {"model": model, "input": payload}, submit)
        await policy.report(ctx, 0.0)

        async def cancel() -> None:
            await api.request("POST", f"/predictions/{job.id}/cancel")

        prediction = first
        async with policy.cancelling(ctx, cancel):
            delays = policy.poll_delays()
            while True:
                if prediction is None:
                    prediction = await api.json("GET", f"/predictions/{job.id}")
                status = prediction.get("status")
                if status == "succeeded":
                    break
                if status not in RUNNING:
                    await policy.forget_job(ctx)
                    if status == "canceled":
                        raise policy.ProviderError(f"{NAME} cancelled the prediction {job.id}")
                    raise api.failed(prediction.get("error") or f"prediction {status}")
                fraction = progress_of(prediction)
                if fraction is not None:
                    await policy.report(ctx, fraction)
                await asyncio.sleep(next(delays))
                prediction = None
        return await pick_output(
            ctx, api, prediction.get("output"), kind, output_index, output_path
        )
