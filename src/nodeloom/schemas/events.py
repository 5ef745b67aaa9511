"""The run events as sent over the WebSocket and Server-Sent Events, one model per type.

The engine writes events as plain dicts (``events/model.py``); these models say what each
type's ``data`` holds, for the OpenAPI document (and the web app's types generated from it)
and for the tests that check every event the server sends against them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from nodeloom.events.model import EventType
from nodeloom.timestamps import Timestamp


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Empty(_Data):
    pass


class RunStartedData(_Data):
    estimated_credits: int
    retried_from: str | None = Field(
        default=None, description="The run this one retries (only on a retry's first event)."
    )
    parent_run_id: str | None = Field(
        default=None,
        description="The run whose Workflow node started this one (a sub-workflow's run).",
    )


class NodeProgressData(_Data):
    progress: float = Field(ge=0, le=1)


class NodeWaitingData(_Data):
    approval_id: str = Field(description="Decide it at /api/v1/approvals/{approval_id}.")
    prompt: str
    allow_edit: bool
    expires_at: Timestamp
    approve_url: str = Field(description="One-click signed link (GET shows a confirmation).")
    reject_url: str


class NodeCompletedData(_Data):
    artifact_id: str
    credits_used: int
    cached: bool
    outputs: list[str] | None = Field(
        default=None,
        description="The outputs a node with branches took (an If's `true`, an Approval's "
        "`approved`); absent for other nodes, whose outputs all carry the artifact.",
    )


class NodeError(_Data):
    code: str
    message: str


class NodeFailedData(_Data):
    error: NodeError


class NodeSkippedData(_Data):
    reason: NodeError = Field(description='Why: {code: "upstream_failed", message}')


class RunError(_Data):
    code: str
    message: str
    node_id: str | None


class RunCompletedData(_Data):
    credits_used: int
    duration_ms: int


class RunEndedWithErrorData(_Data):
    credits_used: int
    duration_ms: int
    error: RunError


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=1, description="Counts from 1 per run, with no gaps.")
    ts: Timestamp
    run_id: str
    workflow_id: str


class _NodeEvent(_Event):
    node_id: str


class RunStarted(_Event):
    type: Literal[EventType.RUN_STARTED]
    data: RunStartedData


class NodeStarted(_NodeEvent):
    type: Literal[EventType.NODE_STARTED]
    data: Empty


class NodeProgress(_NodeEvent):
    type: Literal[EventType.NODE_PROGRESS]
    data: NodeProgressData


class NodeWaiting(_NodeEvent):
    type: Literal[EventType.NODE_WAITING]
    data: NodeWaitingData


class NodeCompleted(_NodeEvent):
    type: Literal[EventType.NODE_COMPLETED]
    data: NodeCompletedData


class NodeFailed(_NodeEvent):
    type: Literal[EventType.NODE_FAILED]
    data: NodeFailedData


class NodeSkipped(_NodeEvent):
    type: Literal[EventType.NODE_SKIPPED]
    data: NodeSkippedData


class NodeCancelled(_NodeEvent):
    type: Literal[EventType.NODE_CANCELLED]
    data: Empty


class RunCompleted(_Event):
    type: Literal[EventType.RUN_COMPLETED]
    data: RunCompletedData


class RunFailed(_Event):
    type: Literal[EventType.RUN_FAILED]
    data: RunEndedWithErrorData


class RunCancelled(_Event):
    type: Literal[EventType.RUN_CANCELLED]
    data: RunEndedWithErrorData


RunEventMessage = Annotated[
    RunStarted
    | NodeStarted
    | NodeProgress
    | NodeWaiting
    | NodeCompleted
    | NodeFailed
    | NodeSkipped
    | NodeCancelled
    | RunCompleted
    | RunFailed
    | RunCancelled,
    Field(discriminator="type"),
]
MESSAGE = TypeAdapter(RunEventMessage)


def openapi_schemas(ref_template: str = "#/components/schemas/{model}") -> dict[str, Any]:
    """``RunEventMessage`` and every model it uses, as OpenAPI component schemas."""
    schema = MESSAGE.json_schema(ref_template=ref_template, mode="serialization")
    definitions: dict[str, Any] = schema.pop("$defs", {})
    event_type = {"type": "string", "enum": [t.value for t in EventType]}
    return {**definitions, "RunEventMessage": schema, "EventType": event_type}
