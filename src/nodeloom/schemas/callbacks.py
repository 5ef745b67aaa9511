"""Run callbacks: the signing secret and the delivery log."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from nodeloom.timestamps import Timestamp

# As long as the columns that keep a callback URL (runs, webhooks, schedules).
CALLBACK_URL_MAX = 2048
STARTED_RUNS_REPORT = (
    "Where each run it starts POSTs its record, signed, when it ends (docs/callbacks.md)."
)


def callback_url_field(description: str) -> Any:
    """The optional ``callback_url`` of a request body (absent or null: no callback)."""
    return Field(default=None, min_length=1, max_length=CALLBACK_URL_MAX, description=description)


class CallbackSecretCreated(BaseModel):
    secret: str = Field(
        description="whsec_ + base64 of 32 random bytes. Shown only in this answer.",
        repr=False,
    )
    created_at: Timestamp


class CallbackSecretInfo(BaseModel):
    created_at: Timestamp


class CallbackAttemptOut(BaseModel):
    attempt: int
    at: Timestamp
    duration_ms: int
    status_code: int | None = Field(description="The receiver's HTTP status; null if none came.")
    response: str | None = Field(description="The first 1,000 characters of its answer.")
    error: str | None = Field(description="Why no answer came (refused address, timeout...).")


class CallbackDeliveryOut(BaseModel):
    id: str = Field(description="The webhook-id header of every attempt (the run id).")
    run_id: str
    url: str
    state: Literal["pending", "delivered", "failed"]
    attempt_count: int
    next_attempt_at: Timestamp | None = Field(description="Null once delivered or failed.")
    created_at: Timestamp
    finished_at: Timestamp | None
    attempts: list[CallbackAttemptOut]
