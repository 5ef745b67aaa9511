"""Schedule bodies: create, update, the schedule as shown."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nodeloom.schemas.callbacks import STARTED_RUNS_REPORT, callback_url_field
from nodeloom.timestamps import Timestamp

CALLBACK_URL = callback_url_field(STARTED_RUNS_REPORT)


class ScheduleCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=200)
    cron: str = Field(
        min_length=1,
        max_length=200,
        description="Cron expression: 5 fields (minute hour day month weekday), or 6 with "
        "seconds last.",
        examples=["0 9 * * 1-5"],
    )
    timezone: str = Field(
        default="UTC",
        min_length=1,
        max_length=64,
        description="IANA time zone the expression is read in.",
        examples=["Europe/Berlin"],
    )
    input: dict[str, Any] | None = Field(
        default=None, description="Input data of every run it starts (as execute's input)."
    )
    active: bool = Field(default=True, description="Paused schedules do not fire.")
    callback_url: str | None = CALLBACK_URL


class ScheduleUpdate(BaseModel):
    """Only the fields sent change; ``"input": null`` or ``"callback_url": null`` remove them."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    cron: str | None = Field(default=None, min_length=1, max_length=200)
    timezone: str | None = Field(default=None, min_length=1, max_length=64)
    input: dict[str, Any] | None = None
    active: bool | None = None
    callback_url: str | None = CALLBACK_URL


class ScheduleError(BaseModel):
    code: str
    message: str


class ScheduleOut(BaseModel):
    id: str
    workflow_id: str
    name: str
    cron: str
    timezone: str
    input: dict[str, Any] | None
    active: bool
    callback_url: str | None
    next_run_at: Timestamp | None = Field(
        description="When it fires next (UTC); null while paused."
    )
    last_fired_at: Timestamp | None
    last_run_id: str | None = Field(description="The run its last firing started.")
    last_error: ScheduleError | None = Field(
        description="Why its last firing started no run (insufficient_credits, ...); null "
        "when it did."
    )
    created_at: Timestamp
    updated_at: Timestamp
