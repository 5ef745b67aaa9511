"""Run callbacks: the signing secret and the delivery log."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from nodeloom.timestamps import Timestamp


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
