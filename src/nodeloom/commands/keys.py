"""``nodeloom keys create|list|revoke``. The server manages keys with a log-in token (JWT)
only; these commands use ``--api-key`` when given (it must then be a JWT), else the token
``nodeloom login`` stored, else ``NODELOOM_API_KEY``, and when the stored token has expired
they ask for the password again (in a terminal)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Annotated

import typer

from nodeloom.client import Client, _config
from nodeloom.commands.common import (
    ClientTyper,
    err,
    handled,
    print_listing,
    print_made,
    target,
    when,
)
from nodeloom.commands.login import read_secret

app = ClientTyper(help="API keys of your account (managed with a log-in token).")


@contextlib.contextmanager
def token_client() -> Iterator[Client]:
    given = target()
    url, api_key = given.url, given.api_key
    with handled():
        if api_key is None:
            stored = _config.stored_login(url or os.environ.get(_config.URL_ENV))
            if stored is not None and stored.valid_token:
                url, api_key = stored.url, stored.valid_token
            elif stored is not None and sys.stdin.isatty():
                err().print(f"log-in token expired; password for {stored.email}:")
                password = read_secret("Password", from_stdin=False)
                with Client.login(stored.url, stored.email, password) as fresh:
                    stored.token, stored.token_expires_at = fresh.credential, fresh.token_expires_at
                _config.save_login(stored)
                url, api_key = stored.url, stored.token
        with Client(url, api_key) as opened:
            yield opened


@app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="What the key is for.")],
) -> None:
    """Create an API key. The key is printed once, now; store it safely."""
    with token_client() as c:
        key = c.keys.create(name)
    print_made(key, f"created API key {key.id} ({key.name}); it is shown only this once:", key.key)


@app.command("list")
def list_keys() -> None:
    """Your API keys (their prefixes; the keys themselves are never shown again)."""
    with token_client() as c:
        keys = c.keys.list()
    print_listing(
        keys,
        ("id", "name", "prefix", "created (UTC)", "last used (UTC)", "revoked (UTC)"),
        lambda k: (
            k.id,
            k.name,
            k.prefix,
            when(k.created_at),
            when(k.last_used_at),
            when(k.revoked_at),
        ),
    )


@app.command("revoke")
def revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (see `keys list`).")],
) -> None:
    """Revoke a key: the very next request with it gets 401."""
    with token_client() as c:
        c.keys.revoke(key_id)
    err().print(f"revoked API key {key_id}")
