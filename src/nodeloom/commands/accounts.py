"""``nodeloom accounts create|set|list``: server-side administration, straight on the
database (no server needed).

Each command says which data directory (or database URL) it uses, because running it from
the wrong directory is the usual mistake: the embedded default is ``./data``. Commands that
only read or change existing accounts never create an empty database there; they fail,
naming what they looked for.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from nodeloom.auth.principal import Plan
from nodeloom.commands.common import err, fail, json_option, print_table, wants_json
from nodeloom.commands.login import read_secret
from nodeloom.errors import ConfigurationError
from nodeloom.schemas.accounts import AccountOut, _email
from nodeloom.settings import Settings

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    # Imported where used: the database stack (and argon2) would slow every other command.
    from nodeloom.db.engine import Database

app = typer.Typer(help="Accounts (server-side administration).", no_args_is_help=True)
T = TypeVar("T")


def _where(settings: Settings) -> str:
    if not settings.is_sqlite:
        url = settings.effective_database_url
        return f"database {url.split('@')[-1]} (NODELOOM_DATABASE_URL)"
    return f"data directory {settings.data_dir.resolve()} (NODELOOM_DATA_DIR)"


def _sqlite_file(settings: Settings) -> Path | None:
    if not settings.is_sqlite:
        return None
    return Path(settings.effective_database_url.split(":///", 1)[1])


def open_settings(*, create: bool) -> Settings:
    """Settings for an accounts command, having said where it works. ``create=False``: the
    database must already exist (nothing is created for a command that only reads)."""
    settings = Settings()
    err().print(f"using {_where(settings)}", markup=False)
    db_file = _sqlite_file(settings)
    if db_file is not None and not db_file.exists():
        if not create:
            fail(
                f"no database at {db_file}.\nSet NODELOOM_DATA_DIR to the server's data "
                "directory (or run this where its ./data is), or create an account first."
            )
        err().print(f"creating a new database at {db_file}", markup=False)
    from nodeloom.db.migrate import upgrade

    if create:
        try:
            settings.prepare()
        except ConfigurationError as exc:
            fail(f"configuration error: {exc}", 2)
    upgrade(settings.effective_database_url)
    return settings


def _with_db(settings: Settings, action: Callable[[Database], Awaitable[T]]) -> T:
    from nodeloom.db.engine import Database

    async def run() -> T:
        db = Database(settings)
        try:
            return await action(db)
        finally:
            await db.dispose()

    return asyncio.run(run())


def _parse_plan(plan: str | None) -> str | None:
    if plan is None:
        return None
    try:
        return Plan(plan.lower()).value
    except ValueError as exc:
        raise typer.BadParameter(f"plan must be one of {', '.join(p.value for p in Plan)}") from exc


@app.command("create")
def accounts_create(
    email: Annotated[str, typer.Option(help="Log-in e-mail.")],
    password: Annotated[
        str | None,
        typer.Option(
            help="8 to 128 characters. Better left out: it is then prompted for, or read from "
            "stdin when stdin is not a terminal (shell history keeps arguments).",
            show_default=False,
        ),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin.")
    ] = False,
    plan: Annotated[str, typer.Option(help="free, pro, business or enterprise.")] = "free",
    credits: Annotated[int, typer.Option(help="Initial credits.", min=0)] = 0,
) -> None:
    """Create an account."""
    try:
        address = _email(email)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    plan_value = _parse_plan(plan) or "free"
    if password is None:
        password = read_secret("Password", from_stdin=password_stdin, confirm=True)
    if not 8 <= len(password) <= 128:
        raise typer.BadParameter("password must be 8 to 128 characters")
    settings = open_settings(create=True)
    from nodeloom.auth.passwords import hash_password
    from nodeloom.store import accounts as account_store

    password_hash = hash_password(password)

    def create(conn: Connection) -> str | None:
        if account_store.by_email(conn, address) is not None:
            return None
        account = account_store.create(
            conn, email=address, password_hash=password_hash, plan=plan_value, credits=credits
        )
        return str(account.id)

    async def action(db: Database) -> str | None:
        return await db.write(create)

    account_id = _with_db(settings, action)
    if account_id is None:
        fail(f"an account with e-mail {address} already exists")
    err().print(f"created account {address} ({plan_value}, {credits} credits)", markup=False)
    print(account_id)


@app.command("set")
def accounts_set(
    email: Annotated[str, typer.Option(help="The account's e-mail.")],
    plan: Annotated[str | None, typer.Option(help="New plan.")] = None,
    credits: Annotated[
        int | None, typer.Option(help="New balance (recorded as a grant).", min=0)
    ] = None,
    disabled: Annotated[
        bool | None,
        typer.Option(
            "--disabled/--enabled",
            help="Disable the account (every key and token refused, open streams closed) "
            "or enable it again.",
        ),
    ] = None,
    reset_password: Annotated[
        bool,
        typer.Option(
            "--reset-password",
            help="Set a new password: prompted for, or read from stdin when it is not a "
            "terminal. Tokens issued before stop working.",
        ),
    ] = False,
) -> None:
    """Change an account; takes effect on its next request (open streams within a second)."""
    plan_value = _parse_plan(plan)
    address = email.strip().lower()
    password_hash = None
    if reset_password:
        password = read_secret("New password", from_stdin=False, confirm=True)
        if not 8 <= len(password) <= 128:
            raise typer.BadParameter("password must be 8 to 128 characters")
        from nodeloom.auth.passwords import hash_password

        password_hash = hash_password(password)
    settings = open_settings(create=False)
    from nodeloom.auth import revocation
    from nodeloom.store import accounts as account_store

    def change(conn: Connection) -> bool:
        account = account_store.by_email(conn, address)
        if account is None:
            return False
        if plan_value is not None:
            account_store.set_plan(conn, account.id, plan_value)
        if credits is not None:
            account_store.set_credits(conn, account.id, credits)
        if password_hash is not None:
            version = account_store.set_password(conn, account.id, password_hash)
            revocation.record(conn, revocation.jwt_scope(account.id, version - 1))
        if disabled is not None:
            account_store.set_disabled(conn, account.id, disabled)
            if disabled:
                revocation.record(conn, revocation.account_scope(account.id))
        return True

    async def action(db: Database) -> bool:
        return await db.write(change)

    if not _with_db(settings, action):
        fail(f"no account with e-mail {address}")
    err().print(f"updated {address}", markup=False)


@app.command("list")
@json_option
def accounts_list() -> None:
    """List accounts with plan and balance (full ids)."""
    settings = open_settings(create=False)
    from nodeloom.store import accounts as account_store

    async def action(db: Database) -> list[AccountOut]:
        rows = await db.read(account_store.list_all)
        return [AccountOut.model_validate(row) for row in rows]

    accounts = _with_db(settings, action)
    if wants_json():
        sys.stdout.write(json.dumps([a.model_dump(mode="json") for a in accounts], indent=2) + "\n")
        return
    print_table(
        ("id", "email", "plan", "credits", "created (UTC)"),
        (
            (a.id, a.email, a.plan, a.credits_balance, a.created_at.strftime("%Y-%m-%d %H:%M:%S"))
            for a in accounts
        ),
    )
