"""The ``nodeloom`` command: serve, worker, db, accounts."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from nodeloom.auth.passwords import hash_password
from nodeloom.auth.principal import Plan
from nodeloom.db.engine import Database
from nodeloom.db.migrate import upgrade
from nodeloom.errors import ConfigurationError
from nodeloom.nodes.provider_cli import provider_app
from nodeloom.schemas.accounts import _email
from nodeloom.settings import Settings
from nodeloom.store import accounts as account_store

app = typer.Typer(help="Nodeloom: workflow automation for generative media.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
accounts_app = typer.Typer(help="Accounts (server-side administration).", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(accounts_app, name="accounts")
app.add_typer(provider_app, name="provider")
console = Console()


def _settings() -> Settings:
    try:
        return Settings().prepare()
    except ConfigurationError as exc:
        console.print(f"[red]configuration error:[/red] {exc}")
        raise typer.Exit(2) from exc


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
) -> None:
    """Migrate the database, then serve the API (and, embedded, run workflows)."""
    import uvicorn

    from nodeloom.api.app import create_app

    settings = _settings()
    _configure_logging(settings.log_level)
    upgrade(settings.effective_database_url)
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds) + 5,
        # Events are small JSON; per-connection deflate state doubled memory per socket and
        # pushed p99 delivery past 50 ms with 1,000 subscribers (bench/bench_events.py).
        ws_per_message_deflate=False,
    )


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration."""
    settings = _settings()
    upgrade(settings.effective_database_url)
    console.print("database is up to date")


async def _with_db(settings: Settings, action: object) -> object:
    db = Database(settings)
    try:
        assert callable(action)
        return await action(db)
    finally:
        await db.dispose()


def _parse_plan(plan: str | None) -> str | None:
    if plan is None:
        return None
    try:
        return Plan(plan.lower()).value
    except ValueError as exc:
        raise typer.BadParameter(f"plan must be one of {', '.join(p.value for p in Plan)}") from exc


@accounts_app.command("create")
def accounts_create(
    email: Annotated[str, typer.Option(help="Log-in e-mail.")],
    password: Annotated[
        str, typer.Option(help="8 to 128 characters.", prompt=True, hide_input=True)
    ],
    plan: Annotated[str, typer.Option(help="free, pro, business or enterprise.")] = "free",
    credits: Annotated[int, typer.Option(help="Initial credits.", min=0)] = 0,
) -> None:
    """Create an account."""
    settings = _settings()
    upgrade(settings.effective_database_url)
    if not 8 <= len(password) <= 128:
        raise typer.BadParameter("password must be 8 to 128 characters")
    try:
        address = _email(email)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    plan_value = _parse_plan(plan) or "free"
    password_hash = hash_password(password)

    async def action(db: Database) -> str | None:
        async with db.write() as session:
            if await account_store.by_email(session, address) is not None:
                return None
            account = await account_store.create(
                session,
                email=address,
                password_hash=password_hash,
                plan=plan_value,
                credits=credits,
            )
            return account.id

    account_id = asyncio.run(_with_db(settings, action))
    if account_id is None:
        console.print(f"[red]an account with e-mail {address} already exists[/red]")
        raise typer.Exit(1)
    console.print(f"created account {account_id} ({address}, {plan_value}, {credits} credits)")


@accounts_app.command("set")
def accounts_set(
    email: Annotated[str, typer.Option(help="The account's e-mail.")],
    plan: Annotated[str | None, typer.Option(help="New plan.")] = None,
    credits: Annotated[
        int | None, typer.Option(help="New balance (recorded as a grant).", min=0)
    ] = None,
) -> None:
    """Change an account's plan or credit balance; takes effect on its next request."""
    settings = _settings()
    upgrade(settings.effective_database_url)
    plan_value = _parse_plan(plan)
    address = email.strip().lower()

    async def action(db: Database) -> bool:
        async with db.write() as session:
            account = await account_store.by_email(session, address)
            if account is None:
                return False
            if plan_value is not None:
                await account_store.set_plan(session, account.id, plan_value)
            if credits is not None:
                await account_store.set_credits(session, account.id, credits)
            return True

    if not asyncio.run(_with_db(settings, action)):
        console.print(f"[red]no account with e-mail {address}[/red]")
        raise typer.Exit(1)
    console.print(f"updated {address}")


@accounts_app.command("list")
def accounts_list() -> None:
    """List accounts with plan and balance."""
    settings = _settings()
    upgrade(settings.effective_database_url)

    async def action(db: Database) -> list[tuple[str, str, str, int, str]]:
        async with db.read() as session:
            rows = await account_store.list_all(session)
        return [(a.id, a.email, a.plan, a.credits_balance, a.created_at.isoformat()) for a in rows]

    rows = asyncio.run(_with_db(settings, action))
    assert isinstance(rows, list)
    table = Table("id", "email", "plan", "credits", "created_at")
    for row in rows:
        table.add_row(row[0], row[1], row[2], str(row[3]), row[4])
    console.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
