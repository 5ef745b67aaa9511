"""Where the client finds its server and credential, and what ``nodeloom login`` stores.

The order, for both the library and the CLI: explicit arguments (``--url`` / ``--api-key``),
then ``NODELOOM_URL`` / ``NODELOOM_API_KEY``, then the login stored for that URL, then the
default login. The store is ``credentials.json`` in the user's config directory
(``~/.config/nodeloom`` on Linux; ``NODELOOM_CONFIG_DIR`` overrides it), written 0600 in a
0700 directory, because it holds an API key and a JWT.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

DEFAULT_URL = "http://127.0.0.1:8000"
CONFIG_DIR_ENV = "NODELOOM_CONFIG_DIR"
URL_ENV = "NODELOOM_URL"
API_KEY_ENV = "NODELOOM_API_KEY"
FILE_NAME = "credentials.json"


def config_dir() -> Path:
    override = os.environ.get(CONFIG_DIR_ENV)
    return Path(override) if override else Path(click.get_app_dir("nodeloom"))


def credentials_path() -> Path:
    return config_dir() / FILE_NAME


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url.removesuffix("/api/v1")


@dataclass
class StoredLogin:
    """One server's login. ``api_key`` authenticates everything except key management,
    which needs ``token`` (a JWT, valid until ``token_expires_at``, epoch seconds)."""

    url: str
    email: str
    api_key: str
    api_key_id: str
    token: str | None = None
    token_expires_at: float | None = None

    @property
    def valid_token(self) -> str | None:
        if self.token and (self.token_expires_at or 0) > time.time() + 30:
            return self.token
        return None


def _read() -> dict[str, Any]:
    try:
        data = json.loads(credentials_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def stored_login(url: str | None = None) -> StoredLogin | None:
    """The login stored for ``url``, or the default one when ``url`` is None."""
    data = _read()
    servers = data.get("servers")
    if not isinstance(servers, dict):
        return None
    key = normalize_url(url) if url else data.get("default")
    entry = servers.get(key) if isinstance(key, str) else None
    if not isinstance(entry, dict):
        return None
    try:
        return StoredLogin(**entry)
    except TypeError:
        return None


def save_login(login: StoredLogin) -> Path:
    """Store ``login`` (and make it the default) with owner-only permissions."""
    data = _read()
    servers = data.get("servers")
    if not isinstance(servers, dict):
        servers = {}
    servers[login.url] = asdict(login)
    return _write({"default": login.url, "servers": servers})


def forget_login(url: str) -> bool:
    data = _read()
    servers = data.get("servers")
    if not isinstance(servers, dict) or servers.pop(normalize_url(url), None) is None:
        return False
    if data.get("default") == normalize_url(url):
        data["default"] = next(iter(servers), None)
    _write({"default": data.get("default"), "servers": servers})
    return True


def _write(data: dict[str, Any]) -> Path:
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        path.parent.chmod(0o700)
    # mkstemp creates the file 0600; the rename replaces the old file in one step.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".credentials-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


@dataclass(frozen=True)
class Target:
    """The server and credential a client talks to, and where each came from."""

    url: str
    api_key: str | None
    source: str


def resolve(url: str | None = None, api_key: str | None = None) -> Target:
    """Arguments, then environment, then the stored login (see the module docstring)."""
    source = "argument"
    if api_key is None and os.environ.get(API_KEY_ENV):
        api_key, source = os.environ[API_KEY_ENV], API_KEY_ENV
    url = url or os.environ.get(URL_ENV) or None
    stored = stored_login(url)
    if url is None:
        url = stored.url if stored else DEFAULT_URL
    if api_key:
        return Target(normalize_url(url), api_key, source)
    if stored is not None:
        return Target(normalize_url(url), stored.api_key, f"login stored in {credentials_path()}")
    return Target(normalize_url(url), None, "none")
