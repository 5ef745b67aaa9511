"""fal (https://docs.fal.ai/model-endpoints/queue), through the adapter policy.

The queue API: ``POST https://queue.fal.run/{model_id}`` with the model's input as the JSON
body and ``Authorization: Key <key>`` answers ``request_id``, ``status_url``,
``response_url`` and ``cancel_url``. ``GET {status_url}?logs=1`` answers ``IN_QUEUE`` (with
``queue_position``), ``IN_PROGRESS`` (with ``logs``) or ``COMPLETED``; ``GET {response_url}``
the model's output (its files as ``{"url": ...}`` objects) or the model's error; ``PUT
{cancel_url}`` cancels. The URLs fal hands back are checked like any other (and the key goes
only to the queue's own origin).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from nodeloom.nodes.adapters import policy
from nodeloom.nodes.adapters.outputs import pick_output
from nodeloom.nodes.base import Kind, NodeFailure, Produced

NAME = "fal"
KIND = "fal"
MODEL = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*){1,4}$")
MODEL_PATTERN = r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*){1,4}$"
PROGRESS = re.compile(r"(\d{1,3})%")
STEPS = re.compile(r"(\d+)\s*/\s*(\d+)")


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
    ) as api:

        async def submit() -> dict[str, Any]:
            answer = await api.json("POST", f"/{model}", json_body=payload, idempotent=False)
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

        job = await policy.submit_once(ctx, KIND, {"model": model, "input": payload}, submit)
        await policy.report(ctx, 0.0)

        async def cancel() -> None:
            await api.request("PUT", str(job.data["cancel_url"]), ok=lambda s: s < 500)

        async with policy.cancelling(ctx, cancel):
            delays = policy.poll_delays()
            while True:
                status = await api.json("GET", str(job.data["status_url"]) + "?logs=1")
                state = status.get("status")
                if state == "COMPLETED":
                    break
                if state not in ("IN_QUEUE", "IN_PROGRESS"):
                    await policy.forget_job(ctx)
                    raise api.failed(status.get("error") or f"request {state}")
                fraction = progress_of(status)
                if fraction is not None:
                    await policy.report(ctx, fraction)
                await asyncio.sleep(next(delays))
            try:
                result = await api.json("GET", str(job.data["response_url"]))
            except policy.ProviderError as exc:
                await policy.forget_job(ctx)
                raise policy.ProviderError(
                    exc.message.replace("refused the request", "failed"), exc.status
                ) from exc
        return await pick_output(ctx, api, result, kind, output_index, output_path)
