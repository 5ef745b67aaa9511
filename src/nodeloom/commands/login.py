"""``nodeloom login`` / ``logout``: keep an API key (and a JWT for key management) for a
server in the user's config directory, 0600."""

from __future__ import annotations

import socket
import sys
from typing import Annotated

import typer

from nodeloom.client import Client, _config
from nodeloom.client.errors import NotFound, Unauthorized
from nodeloom.commands.common import UrlOption, err, fail, handled, target


def read_secret(prompt: str, *, from_stdin: bool, confirm: bool = False) -> str:
    """A password: from the first line of stdin (scripts), else prompted without echo.

    Never an argument by default: shell history and ``ps`` would show it.
    """
    if from_stdin or not sys.stdin.isatty():
        line = sys.stdin.readline()
        if not line:
            fail("expected the password on stdin")
        return line.rstrip("\r\n")
    value: str = typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm)
    return value


def login_command(
    url: UrlOption = None,
    email: Annotated[
        str | None, typer.Option(help="Log-in e-mail (prompted when omitted).")
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin.")
    ] = False,
) -> None:
    """Log in and store an API key for this server (0600, in the user's config directory)."""
    url = url or target().url
    resolved = _config.resolve(url, None)
    if url is None and sys.stdin.isatty():
        url = typer.prompt("Server URL", default=resolved.url)
    url = _config.normalize_url(url or resolved.url)
    previous = _config.stored_login(url)
    if email is None:
        email = typer.prompt("E-mail", default=previous.email if previous else None)
    password = read_secret("Password", from_stdin=password_stdin)
    with handled():
        with Client.login(url, email, password) as session:
            key = session.keys.create(f"nodeloom-cli@{socket.gethostname()}"[:200])
            if previous is not None and previous.api_key_id != key.id:
                try:
                    session.keys.revoke(previous.api_key_id)  # the key it replaces
                except (NotFound, Unauthorized):
                    pass
        login = _config.StoredLogin(
            url=url,
            email=email,
            api_key=key.key,
            api_key_id=key.id,
            token=session.credential,
            token_expires_at=session.token_expires_at,
        )
        path = _config.save_login(login)
    err().print(f"logged in to {url} as {email}; API key {key.prefix}… stored in {path}")


def logout_command(url: UrlOption = None) -> None:
    """Revoke the stored API key (when the stored log-in token still allows it) and forget
    the login."""
    url = url or target().url
    stored = _config.stored_login(url)
    if stored is None:
        fail("not logged in" + (f" to {url}" if url else ""))
    token = stored.valid_token
    if token is not None:
        with handled(), Client(stored.url, token) as session:
            try:
                session.keys.revoke(stored.api_key_id)
            except NotFound:
                pass
        note = "API key revoked"
    else:
        note = f"the log-in token expired, so API key {stored.api_key_id} was not revoked"
    _config.forget_login(stored.url)
    err().print(f"logged out of {stored.url} ({note})")
