"""Run and artifact bodies (SPEC §5, §6)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nodeloom.schemas.common import Timestamp

RunStatusName = Literal["running", "completed", "failed"]
NodeStatusName = Literal["pending", "running", "completed", "failed", "skipped", "cancelled"]


class ExecuteRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input: dict[str, Any] | None = Field(
        default=None, description="Input data for the run's TextInput nodes."
    )
    cache: bool = Field(default=True, description="Reuse earlier identical node outputs.")


class ExecuteResponse(BaseModel):
    run_id: str
    status: RunStatusName
    estimated_credits: int


class RunError(BaseModel):
    code: str
    message: str
    node_id: str | None = None


class NodeRunOut(BaseModel):
    node_id: str
    type: str
    status: NodeStatusName
    artifact_id: str | None
    credits_used: int
    cached: bool
    started_at: Timestamp | None
    finished_at: Timestamp | None
    duration_ms: int | None
    error: dict[str, Any] | None


class RunSummary(BaseModel):
    id: str
    workflow_id: str
    status: RunStatusName
    credits_used: int
    estimated_credits: int
    duration_ms: int
    created_at: Timestamp
    finished_at: Timestamp | None
    error: RunError | None


class RunOut(RunSummary):
    input: dict[str, Any] | None
    node_runs: list[NodeRunOut]


class ArtifactMetadata(BaseModel):
    id: str
    run_id: str
    workflow_id: str
    node_id: str
    content_type: str
    size_bytes: int
    sha256: str
    created_at: Timestamp
    download_url: str
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
