"""``nodeloom provider ...``: keep the provider API key encrypted in the data directory.

The key is read from standard input (piped) or a hidden prompt, never from the command line,
where it would land in shell history and ``ps`` output. It is stored Fernet-encrypted with the
server secret in ``<data_dir>/provider_key.enc`` (mode 0600); ``NODELOOM_PROVIDER_API_KEY``,
when set, takes precedence over the file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from nodeloom.auth.tokens import encrypt
from nodeloom.nodes.providers import api_key, key_file
from nodeloom.settings import Settings

provider_app = typer.Typer(
    help="Configure the OpenAI-compatible AI provider.", no_args_is_help=True
)


def _write_private(path: Path, text: str) -> None:
    """Write a 0600 file atomically: created private, then renamed over the old one."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # in case the temp file already existed with other bits
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@provider_app.command("set-key")
def set_key() -> None:
    """Read the provider API key from stdin (or a hidden prompt) and store it encrypted."""
    if sys.stdin.isatty():
        key = typer.prompt("Provider API key", hide_input=True)
    else:
        key = sys.stdin.readline()
    key = key.strip()
    if not key:
        typer.echo("no key given", err=True)
        raise typer.Exit(code=1)
    settings = Settings().prepare()
    path = key_file(settings)
    _write_private(path, encrypt(settings.secret, key))
    typer.echo(f"provider key stored encrypted in {path}")


@provider_app.command("status")
def status() -> None:
    """Show whether a provider is configured (never the key itself)."""
    settings = Settings().prepare()
    typer.echo(f"base URL: {settings.provider_base_url or '(not set)'}")
    if settings.provider_api_key is not None:
        source = "NODELOOM_PROVIDER_API_KEY"
    elif api_key(settings):
        source = str(key_file(settings))
    else:
        source = "none"
    typer.echo(f"key: {source}")


@provider_app.command("clear-key")
def clear_key() -> None:
    """Remove the stored key file."""
    settings = Settings().prepare()
    key_file(settings).unlink(missing_ok=True)
    typer.echo("provider key file removed")
