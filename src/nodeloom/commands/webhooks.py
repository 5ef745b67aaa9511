"""``nodeloom webhooks create|list|enable|disable|delete`` (a workflow's trigger URLs)."""

from __future__ import annotations

from typing import Annotated

import typer

from nodeloom.commands.common import (
    ClientTyper,
    LimitOption,
    WorkflowArg,
    client,
    err,
    print_listing,
    print_made,
    take,
    when,
)

app = ClientTyper(help="Webhook triggers of a workflow (pro plan and above).")

WebhookArg = Annotated[str, typer.Argument(help="Webhook id.")]


@app.command("create")
def create(
    workflow: WorkflowArg,
    name: Annotated[str, typer.Option(help="A name for the trigger.")],
    inactive: Annotated[bool, typer.Option("--inactive", help="Create it switched off.")] = False,
) -> None:
    """Create a trigger URL: a POST of a JSON object to it starts a run with that input."""
    with client() as c:
        hook = c.webhooks.create(c.workflows.find(workflow).id, name, active=not inactive)
    state = "active" if hook.active else "inactive"
    print_made(hook, f"created webhook {hook.id} ({state}); its URL:", hook.url)


@app.command("list")
def list_webhooks(
    workflow: WorkflowArg,
    limit: LimitOption = 100,
) -> None:
    """A workflow's webhooks with their URLs (the token in a URL is its credential)."""
    with client() as c:
        hooks = take(c.webhooks.list(c.workflows.find(workflow).id), limit)
    print_listing(
        hooks,
        ("id", "name", "active", "signed", "created (UTC)", "url"),
        lambda h: (
            h.id,
            h.name,
            "yes" if h.active else "no",
            "yes" if h.signed else "no",
            when(h.created_at),
            h.url,
        ),
    )


def _set_active(workflow: str, webhook: str, active: bool) -> None:
    with client() as c:
        hook = c.webhooks.set_active(c.workflows.find(workflow).id, webhook, active)
    err().print(f"webhook {hook.id} is {'active' if hook.active else 'inactive'}")


@app.command("enable")
def enable(workflow: WorkflowArg, webhook: WebhookArg) -> None:
    """Switch a webhook on."""
    _set_active(workflow, webhook, True)


@app.command("disable")
def disable(workflow: WorkflowArg, webhook: WebhookArg) -> None:
    """Switch a webhook off: triggers answer 403 webhook_inactive until it is enabled."""
    _set_active(workflow, webhook, False)


@app.command("delete")
def delete(workflow: WorkflowArg, webhook: WebhookArg) -> None:
    """Delete a webhook: its URL answers 404 from the next request on."""
    with client() as c:
        c.webhooks.delete(c.workflows.find(workflow).id, webhook)
    err().print(f"deleted webhook {webhook}")
