"""Approval bodies: a decision, an approval as listed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from nodeloom.timestamps import Timestamp

MAX_COMMENT = 4000
MAX_TEXT = 64 * 1024


class ApprovalDecision(BaseModel):
    """The body of an approve or reject (optional: no body decides without comment)."""

    model_config = ConfigDict(extra="forbid")

    comment: str | None = Field(
        default=None, max_length=MAX_COMMENT, description="Why, for the run's record."
    )
    text: str | None = Field(
        default=None,
        max_length=MAX_TEXT,
        description="Approve with this text instead of the input (only where the node has "
        "`allow_edit`; for a json node it must be JSON).",
    )


class ApprovalInput(BaseModel):
    """What the reviewer judges: the upstream artifact."""

    artifact_id: str
    content_type: str
    url: str = Field(description="A signed download URL, valid while the approval is.")
    text: str | None = Field(
        default=None, description="The text itself, for text and json inputs up to 64 KiB."
    )


class ApprovalOut(BaseModel):
    id: str
    run_id: str
    node_id: str = Field(description="The drawn node's id.")
    item_index: int | None = Field(
        description="Inside a ForEach or Repeat region: the item or iteration it judges."
    )
    workflow_id: str
    workflow_name: str
    status: str = Field(description="pending, approved or rejected")
    kind: str = Field(description="text, json, image, audio or video: what is judged")
    prompt: str
    allow_edit: bool
    timeout_outcome: str
    created_at: Timestamp
    expires_at: Timestamp
    decided_at: Timestamp | None
    decided_by: str | None = Field(description="api, link or timeout")
    comment: str | None
    text: str | None = Field(description="The edited text approved, if any.")
    input: ApprovalInput | None
    approve_url: str | None = Field(description="One-click signed link while pending.")
    reject_url: str | None


class ApprovalList(BaseModel):
    data: list[ApprovalOut]
    count: int = Field(description="Pending approvals of the account (the inbox badge).")
