"""``nodeloom approvals list|approve|reject``: Approval nodes waiting for a person."""

from __future__ import annotations

from typing import Annotated

import typer

from nodeloom.commands.common import (
    ClientTyper,
    client,
    err,
    print_json,
    print_listing,
    wants_json,
    when,
)
from nodeloom.schemas.approvals import ApprovalOut

app = ClientTyper(help="Approval nodes waiting for a person: list, approve, reject.")

ApprovalArg = Annotated[str, typer.Argument(help="Approval id (from `approvals list`).")]
CommentOption = Annotated[
    str | None, typer.Option("--comment", "-m", help="Why, kept with the decision.")
]
PREVIEW = 60


def _preview(approval: ApprovalOut) -> str:
    value = approval.input
    if value is None:
        return ""
    if value.text is None:
        return value.content_type
    one_line = " ".join(value.text.split())
    return one_line if len(one_line) <= PREVIEW else one_line[: PREVIEW - 3] + "..."


def _show(approval: ApprovalOut) -> None:
    if wants_json():
        print_json(approval)
        return
    note = f": {approval.comment}" if approval.comment else ""
    err().print(f"approval {approval.id} {approval.status}{note}")


@app.command("list")
def list_approvals() -> None:
    """The account's approvals waiting for a person, oldest first."""
    with client() as c:
        listing = c.approvals.list()
    print_listing(
        listing.data,
        ("id", "workflow", "run", "node", "prompt", "input", "expires (UTC)"),
        lambda a: (
            a.id,
            a.workflow_name,
            a.run_id,
            a.node_id if a.item_index is None else f"{a.node_id} item {a.item_index + 1}",
            a.prompt,
            _preview(a),
            when(a.expires_at),
        ),
    )


@app.command("approve")
def approve(
    approval: ApprovalArg,
    comment: CommentOption = None,
    text: Annotated[
        str | None,
        typer.Option("--text", help="Approve this text instead (where the node allows edits)."),
    ] = None,
) -> None:
    """Approve: the run goes on down the node's `approved` output."""
    with client() as c:
        decided = c.approvals.approve(approval, comment=comment, text=text)
    _show(decided)


@app.command("reject")
def reject(
    approval: ApprovalArg,
    comment: CommentOption = None,
) -> None:
    """Reject: the run goes on down the node's `rejected` output."""
    with client() as c:
        decided = c.approvals.reject(approval, comment=comment)
    _show(decided)
