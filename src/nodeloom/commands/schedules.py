"""``nodeloom schedules create|list|show|update|pause|resume|delete`` (cron triggers of a
workflow) and ``nodeloom callbacks secret|log`` (signed run callbacks)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from nodeloom.commands.common import (
    ClientTyper,
    LimitOption,
    WorkflowArg,
    client,
    err,
    fail,
    print_json,
    print_listing,
    print_table,
    take,
    wants_json,
    when,
)
from nodeloom.schemas.schedules import ScheduleOut

app = ClientTyper(help="Schedules (cron triggers) of a workflow (pro plan and above).")
callbacks_app = ClientTyper(help="Signed run callbacks: the signing secret and delivery logs.")

ScheduleArg = Annotated[str, typer.Argument(help="Schedule id.")]
InputOption = Annotated[str | None, typer.Option("--input", help="The runs' input, a JSON object.")]
TimezoneOption = Annotated[
    str | None, typer.Option("--timezone", "--tz", help="IANA time zone, e.g. Europe/Berlin.")
]
CallbackOption = Annotated[
    str | None, typer.Option("--callback-url", help="Where each run reports when it ends.")
]


def _input(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"--input is not JSON: {exc}")
    if not isinstance(value, dict):
        fail("--input must be a JSON object")
    return value


def _show(schedule: ScheduleOut) -> None:
    if wants_json():
        print_json(schedule)
        return
    state = "active" if schedule.active else "paused"
    nxt = when(schedule.next_run_at) if schedule.next_run_at else "-"
    err().print(
        f"schedule {schedule.id} ({state}): {schedule.cron!r} in {schedule.timezone}; "
        f"next run {nxt} UTC"
    )
    if schedule.last_error is not None:
        err().print(f"last firing started no run: {schedule.last_error.message}")


@app.command("create")
def create(
    workflow: WorkflowArg,
    name: Annotated[str, typer.Option(help="A name for the schedule.")],
    cron: Annotated[str, typer.Option(help="Cron expression, e.g. '0 9 * * 1-5'.")],
    timezone: TimezoneOption = None,
    input: InputOption = None,
    inactive: Annotated[bool, typer.Option("--inactive", help="Create it paused.")] = False,
    callback_url: CallbackOption = None,
) -> None:
    """Run the workflow on a cron schedule, read in an IANA time zone (default UTC)."""
    with client() as c:
        schedule = c.schedules.create(
            c.workflows.find(workflow).id,
            name,
            cron,
            timezone=timezone or "UTC",
            input=_input(input),
            active=not inactive,
            callback_url=callback_url,
        )
    _show(schedule)


@app.command("list")
def list_schedules(
    workflow: WorkflowArg,
    limit: LimitOption = 100,
) -> None:
    """A workflow's schedules with their next run time."""
    with client() as c:
        items = take(c.schedules.list(c.workflows.find(workflow).id), limit)
    print_listing(
        items,
        ("id", "name", "cron", "time zone", "active", "next run (UTC)", "last error"),
        lambda s: (
            s.id,
            s.name,
            s.cron,
            s.timezone,
            "yes" if s.active else "no",
            when(s.next_run_at) if s.next_run_at else "-",
            s.last_error.code if s.last_error else "",
        ),
    )


@app.command("show")
def show(
    workflow: WorkflowArg,
    schedule: ScheduleArg,
) -> None:
    """One schedule: its next run, and what its last firing did."""
    with client() as c:
        found = c.schedules.get(c.workflows.find(workflow).id, schedule)
    _show(found)


@app.command("update")
def update(
    workflow: WorkflowArg,
    schedule: ScheduleArg,
    name: Annotated[str | None, typer.Option(help="A new name.")] = None,
    cron: Annotated[str | None, typer.Option(help="A new cron expression.")] = None,
    timezone: TimezoneOption = None,
    input: InputOption = None,
    callback_url: CallbackOption = None,
) -> None:
    """Change what is given; the rest stays."""
    changes: dict[str, Any] = {}
    for key, value in (
        ("name", name),
        ("cron", cron),
        ("timezone", timezone),
        ("input", _input(input)),
        ("callback_url", callback_url),
    ):
        if value is not None:
            changes[key] = value
    if not changes:
        fail("nothing to change: give --name, --cron, --timezone, --input or --callback-url")
    with client() as c:
        found = c.schedules.update(c.workflows.find(workflow).id, schedule, **changes)
    _show(found)


def _set_active(workflow: str, schedule: str, active: bool) -> None:
    with client() as c:
        found = c.schedules.set_active(c.workflows.find(workflow).id, schedule, active)
    _show(found)


@app.command("pause")
def pause(
    workflow: WorkflowArg,
    schedule: ScheduleArg,
) -> None:
    """Stop firing until resumed."""
    _set_active(workflow, schedule, False)


@app.command("resume")
def resume(
    workflow: WorkflowArg,
    schedule: ScheduleArg,
) -> None:
    """Fire again, from the next future time (missed times are not made up)."""
    _set_active(workflow, schedule, True)


@app.command("delete")
def delete(
    workflow: WorkflowArg,
    schedule: ScheduleArg,
) -> None:
    """Delete a schedule: it never fires again (its runs stay)."""
    with client() as c:
        c.schedules.delete(c.workflows.find(workflow).id, schedule)
    err().print(f"deleted schedule {schedule}")


@callbacks_app.command("secret")
def secret(
    rotate: Annotated[
        bool, typer.Option("--rotate", help="Make a new secret (the old one stops at once).")
    ] = False,
) -> None:
    """Show when the signing secret was made; with --rotate make one and print it (once)."""
    with client() as c:
        if rotate:
            created = c.callbacks.rotate_secret()
            err().print("the callback signing secret (shown only now; keep it safe):")
            print(created.secret)
            return
        info = c.callbacks.secret_info()
    err().print(f"the callback signing secret was made {when(info.created_at)} UTC")


@callbacks_app.command("log")
def log(
    workflow: WorkflowArg,
    run_id: Annotated[str, typer.Argument(help="Run id.")],
) -> None:
    """A run's callback: its state and every attempt with the receiver's answer."""
    with client() as c:
        found = c.callbacks.deliveries(c.workflows.find(workflow).id, run_id)
    if wants_json():
        print_json(found)
        return
    if not found:
        err().print("this run was started without a callback_url")
        return
    for delivery in found:
        err().print(f"callback to {delivery.url}: {delivery.state}")
        print_table(
            ("attempt", "at (UTC)", "status", "ms", "answer or error"),
            (
                (
                    a.attempt,
                    when(a.at),
                    a.status_code if a.status_code is not None else "-",
                    a.duration_ms,
                    (a.error or a.response or "")[:80],
                )
                for a in delivery.attempts
            ),
        )
