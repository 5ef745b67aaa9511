"""The ``nodeloom`` command's client and administration commands, added to the app that
``nodeloom/cli.py`` builds (which keeps ``serve``, ``db`` and ``provider``).

    login / logout                        store an API key for a server (0600)
    workflows list|show|push|pull|delete  workflows as JSON files
    run WORKFLOW --wait --download DIR    run, follow live, save the outputs
    runs list|show|cancel|events          a workflow's runs
    webhooks create|list|enable|disable|delete
    schedules create|list|show|update|pause|resume|delete   cron triggers
    callbacks secret [--rotate] | log WORKFLOW RUN          signed run callbacks
    approvals list|approve|reject         Approval nodes waiting for a person
    keys create|list|revoke               API keys (with a log-in token)
    credentials create|list|show|update|delete|test   provider credentials
    accounts create|set|list              server-side administration, on the database

--url and --api-key (else NODELOOM_URL / NODELOOM_API_KEY, else the stored login: the same
order as the Python client) and --json are options of the root, given before the command;
after it, they are still accepted (commands/common.py). See docs/cli.md.
"""

from __future__ import annotations

from typing import Annotated

import typer

from nodeloom.commands import (
    accounts,
    approvals,
    assets,
    credentials,
    keys,
    runs,
    schedules,
    webhooks,
    workflows,
)
from nodeloom.commands.common import (
    ApiKeyOption,
    JsonOption,
    UrlOption,
    client_options,
    root_options,
)
from nodeloom.commands.login import login_command, logout_command
from nodeloom.version import __version__


def _version(value: bool) -> None:
    if value:
        print(f"nodeloom {__version__}")
        raise typer.Exit()


def _root(
    ctx: typer.Context,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    as_json: JsonOption = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Nodeloom: workflow automation for generative media."""
    root_options(ctx, url, api_key, as_json)


def register(app: typer.Typer) -> None:
    app.callback()(_root)
    app.command("login")(login_command)
    app.command("logout")(logout_command)
    app.command("run")(client_options(runs.run_command))
    app.add_typer(workflows.app, name="workflows")
    app.add_typer(runs.app, name="runs")
    app.add_typer(webhooks.app, name="webhooks")
    app.add_typer(assets.app, name="assets")
    app.add_typer(schedules.app, name="schedules")
    app.add_typer(schedules.callbacks_app, name="callbacks")
    app.add_typer(approvals.app, name="approvals")
    app.add_typer(keys.app, name="keys")
    app.add_typer(credentials.app, name="credentials")
    app.add_typer(accounts.app, name="accounts")
