"""``nodeloom credentials create|list|show|update|delete|test``: provider credentials of
the account.

Secret fields are never taken from arguments (shell history and ``ps`` would show them):
each is prompted for without echo, or read from stdin, one line per secret field, when stdin
is not a terminal or ``--secret-stdin`` is given. Non-secret fields are ``--field
name=value``. The server never shows a secret back; ``hint`` is its masked form."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from nodeloom.commands.common import (
    ClientTyper,
    LimitOption,
    client,
    err,
    fail,
    print_json,
    print_listing,
    print_made,
    take,
    wants_json,
    when,
)
from nodeloom.schemas.credentials import KINDS

app = ClientTyper(help="Provider credentials of your account (docs/providers.md).")

CredentialArg = Annotated[str, typer.Argument(help="Credential id.")]
FieldOption = Annotated[
    list[str] | None,
    typer.Option("--field", help="A non-secret field, name=value (repeatable): base_url=..."),
]
SecretOption = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        help="An optional secret field to ask for as well (repeatable), e.g. password.",
    ),
]
SecretStdinOption = Annotated[
    bool,
    typer.Option("--secret-stdin", help="Read the secret fields from stdin, one per line."),
]


def _fields(kind: str, pairs: list[str] | None) -> dict[str, Any]:
    secret = KINDS[kind].SECRET
    fields: dict[str, Any] = {}
    for pair in pairs or []:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            fail(f"--field takes name=value, not {pair!r}")
        if name in secret:
            fail(f"{name} is secret: it is asked for, or read from stdin, never an argument")
        fields[name] = value
    return fields


def _secret_names(kind: str, extra: list[str] | None, *, required: bool) -> list[str]:
    model = KINDS[kind]
    names = [
        name
        for name, info in model.model_fields.items()
        if name in model.SECRET and info.is_required() and required
    ]
    for name in extra or []:
        if name not in model.SECRET:
            fail(f"{name} is not a secret field of a {kind} credential")
        if name not in names:
            names.append(name)
    return names


def _read_secrets(names: list[str], from_stdin: bool) -> dict[str, str]:
    values: dict[str, str] = {}
    for name in names:
        if from_stdin or not sys.stdin.isatty():
            line = sys.stdin.readline()
            if not line:
                fail(f"expected {name} on stdin (one secret field per line)")
            values[name] = line.rstrip("\r\n")
        else:
            values[name] = typer.prompt(name, hide_input=True)
    return values


def _kind(kind: str) -> str:
    if kind not in KINDS:
        fail(f"unknown kind {kind!r}; one of: {', '.join(KINDS)}")
    return kind


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="A name for the credential.")],
    kind: Annotated[str, typer.Option(help=f"One of: {', '.join(KINDS)}.")],
    field: FieldOption = None,
    secret: SecretOption = None,
    secret_stdin: SecretStdinOption = False,
) -> None:
    """Store a credential; its secret fields are asked for (or read from stdin)."""
    fields = _fields(_kind(kind), field)
    fields.update(_read_secrets(_secret_names(kind, secret, required=True), secret_stdin))
    with client() as c:
        made = c.credentials.create(name, kind, fields)
    print_made(made, f"created {made.kind} credential {made.id} ({made.hint})", made.id)


@app.command("list")
def list_credentials(
    limit: LimitOption = 100,
) -> None:
    """The account's credentials, newest first (secrets masked)."""
    with client() as c:
        items = take(c.credentials.list(), limit)
    print_listing(
        items,
        ("id", "name", "kind", "secret", "last used (UTC)", "fields"),
        lambda i: (
            i.id,
            i.name,
            i.kind,
            i.hint,
            when(i.last_used_at),
            " ".join(f"{k}={v}" for k, v in i.fields.items()),
        ),
    )


@app.command("show")
def show(credential: CredentialArg) -> None:
    """One credential as JSON (its secret masked)."""
    with client() as c:
        print_json(c.credentials.get(credential))


@app.command("update")
def update(
    credential: CredentialArg,
    name: Annotated[str | None, typer.Option(help="A new name.")] = None,
    field: FieldOption = None,
    rotate: Annotated[
        bool, typer.Option("--rotate", help="Replace the secret: its fields are asked for.")
    ] = False,
    secret: SecretOption = None,
    secret_stdin: SecretStdinOption = False,
) -> None:
    """Rename, change non-secret fields, or rotate the secret (the next run uses it)."""
    with client() as c:
        kind = c.credentials.get(credential).kind
        fields = _fields(kind, field)
        names = _secret_names(kind, secret, required=rotate)
        fields.update(_read_secrets(names, secret_stdin))
        changed = c.credentials.update(credential, name=name, fields=fields or None)
    if wants_json():
        print_json(changed)
        return
    err().print(f"updated credential {changed.id} ({changed.hint})")


@app.command("delete")
def delete(credential: CredentialArg) -> None:
    """Delete a credential: workflows naming it are refused at execute until changed."""
    with client() as c:
        c.credentials.delete(credential)
    err().print(f"deleted credential {credential}")


@app.command("test")
def test(
    credential: CredentialArg,
) -> None:
    """Ask the provider whether it accepts the credential; exit status 1 when not."""
    with client() as c:
        result = c.credentials.test(credential)
    if wants_json():
        print_json(result)
    else:
        status = f" (HTTP {result.status})" if result.status is not None else ""
        err().print(f"{'ok' if result.ok else 'not ok'}{status}: {result.message}")
    if not result.ok:
        raise typer.Exit(1)
