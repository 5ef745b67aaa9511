"""One real ``nodeloom serve`` on a free port for the client and CLI tests (shared by the
package to save start-up time); each test signs up its own account, so tests never see each
other's workflows. The user's real config directory and NODELOOM_URL / NODELOOM_API_KEY are
kept out of every test."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodeloom.client import Client
from tests import launcher
from tests.conftest import PASSWORD
from tests.live import account as signed_up
from tests.runs_helpers import e, g, n
from tests.server import ServerProcess

NODELOOM = str(Path(sys.executable).parent / "nodeloom")  # the installed entry point
_emails = itertools.count(1)


@dataclass
class Account:
    email: str
    password: str
    jwt: str
    api_key: str


@dataclass
class Live:
    server: ServerProcess

    @property
    def url(self) -> str:
        return self.server.base_url

    @property
    def data_dir(self) -> Path:
        return self.server.data_dir

    def account(self) -> Account:
        email = f"user{next(_emails)}-{os.getpid()}@example.com"
        with httpx.Client(base_url=self.url, timeout=10) as http:
            jwt, key = signed_up(http, email)
        return Account(email, PASSWORD, jwt, key)


def start_server(data_dir: Path, **env: str) -> ServerProcess:
    server = ServerProcess(
        data_dir,
        env={
            "NODELOOM_SIGNUP_ENABLED": "true",
            "NODELOOM_SIGNUP_PLAN": "business",
            "NODELOOM_SIGNUP_CREDITS": "1000",
            "NODELOOM_RATE_LIMIT_API_KEY": "1000000",
            "NODELOOM_RATE_LIMIT_JWT": "1000000",
            "NODELOOM_LOG_LEVEL": "WARNING",
            **env,
        },
    )
    server.start()
    return server


@pytest.fixture(scope="package")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(tmp_path_factory.mktemp("client-server")) as server:
        yield server


@contextlib.contextmanager
def live_server(data_dir: Path, **env: str) -> Iterator[Live]:
    """A started server (``start_server``) whose first account, the owner (enterprise), is
    taken: tests get sign-ups. Stopped afterwards."""
    server = start_server(data_dir, **env)
    try:
        live = Live(server)
        live.account()
        yield live
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads or writes the real ~/.config/nodeloom or the caller's credentials."""
    config = tmp_path / "config"
    monkeypatch.setenv("NODELOOM_CONFIG_DIR", str(config))
    for name in ("NODELOOM_URL", "NODELOOM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return config


@pytest.fixture
def account(live: Live) -> Account:
    return live.account()


@pytest.fixture
def nl(live: Live, account: Account) -> Iterator[Client]:
    with Client(live.url, account.api_key) as client:
        yield client


def cli(
    *args: str,
    env: dict[str, str | None] | None = None,
    stdin: str | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``nodeloom ARGS`` in a process of its own (forked from the launcher, tests/launcher.py),
    stdout and stderr files (not a terminal). In ``env``, None removes a variable."""
    changes = {"NODELOOM_URL": None, "NODELOOM_API_KEY": None, **(env or {})}
    full_env = {k: v for k, v in os.environ.items() if k not in changes}
    full_env.update({k: v for k, v in changes.items() if v is not None})
    return launcher.run(list(args), full_env, stdin, timeout=120, cwd=cwd)


def greeting() -> dict[str, Any]:
    return g(
        [
            n("in", "TextInput", text="world"),
            n("tpl", "TextTemplate", template="Hello {{ text }}!"),
        ],
        [e("in", "tpl")],
    )
