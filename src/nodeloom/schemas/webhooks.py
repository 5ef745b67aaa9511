"""Webhook trigger bodies: create, update, the webhook as shown, the trigger's answer."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from nodeloom.schemas.callbacks import STARTED_RUNS_REPORT, callback_url_field
from nodeloom.timestamps import Timestamp

SECRET_MIN, SECRET_MAX = 16, 256


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=200)
    active: bool = Field(default=True, description="Inactive webhooks answer 403.")
    secret: str | None = Field(
        default=None,
        min_length=SECRET_MIN,
        max_length=SECRET_MAX,
        repr=False,
        description="Optional HMAC-SHA256 signing secret. When set, every trigger must carry "
        "X-Nodeloom-Signature (see docs/webhooks.md). Stored encrypted, never returned.",
    )
    callback_url: str | None = callback_url_field(STARTED_RUNS_REPORT)


class WebhookUpdate(BaseModel):
    """Only the fields sent change. ``"secret": null`` removes the signing secret."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    active: bool | None = None
    secret: str | None = Field(
        default=None,
        min_length=SECRET_MIN,
        max_length=SECRET_MAX,
        repr=False,
        description="A new signing secret; null removes it.",
    )
    callback_url: str | None = callback_url_field(
        "A new callback URL for the runs it starts; null removes it."
    )


class WebhookOut(BaseModel):
    id: str
    workflow_id: str
    name: str
    token: str = Field(description="The credential of the trigger URL. Treat it as a secret.")
    url: str = Field(description="{base_url}/api/v1/webhooks/{token}")
    active: bool
    signed: bool = Field(description="Whether triggers must carry X-Nodeloom-Signature.")
    callback_url: str | None = Field(
        default=None, description="Where the runs it starts report when they end."
    )
    created_at: Timestamp


class TriggerAccepted(BaseModel):
    run_id: str
    status: str = "running"
    estimated_credits: int


class ProviderHookAck(BaseModel):
    """The answer to a provider's webhook delivery (api/routes/provider_hooks.py)."""

    kept: bool = Field(
        description="Whether the delivery was kept for the node waiting on it; false when no "
        "node waits on that job any more (finished, cancelled, another job), which is "
        "acknowledged all the same so the provider does not retry it."
    )
