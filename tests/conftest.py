"""Fixtures: a real app on a real database (SQLite per test; PostgreSQL where parametrized),
reached over HTTP through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shutil
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx
import pytest
import sqlalchemy as sa
from argon2 import PasswordHasher
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import create_async_engine

from nodeloom.api.app import create_app
from nodeloom.auth import passwords
from nodeloom.db.migrate import upgrade
from nodeloom.settings import Settings
from tests.pg_databases import PostgresDatabases, admin, url_of
from tests.providers.fakes import FakeFal, FakeReplicate
from tests.services import POSTGRES_ADMIN_URL, require_postgres

TEST_SECRET = "test-secret-" + "x" * 40
PASSWORD = "correct horse battery"

# Passwords hashed in this process use argon2id at its lowest cost (one pass over 8 KiB, one
# lane) instead of the RFC 9106 low-memory profile (three passes over 64 MiB, four lanes): the
# same algorithm, hash format, salt and tag length, and the same hash_password/verify_password
# code, but about a millisecond instead of 0.2-1.5 s per call on a 2-core machine, and most tests
# sign up and log in at least once. The timing dummy hash keeps the real cost, and so do the
# `nodeloom serve` processes that tests start (tests/server.py).
passwords._hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file, copied for each test (migrating per test is slow)."""
    path = tmp_path_factory.mktemp("template") / "nodeloom.db"
    upgrade(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A migrated PostgreSQL database that each test clones with CREATE DATABASE ... TEMPLATE."""
    require_postgres()
    name = f"nl_tpl_{uuid.uuid4().hex[:12]}"

    def create() -> None:
        asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
        upgrade(_pg_url(name))

    # Requested from inside async fixtures: asyncio.run needs a thread without a loop.
    _in_thread(create)
    yield name
    _in_thread(lambda: asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')))


def _in_thread(fn: Callable[[], None]) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(fn).result()


_pg_url = url_of  # the names other test modules import
_admin = admin


async def drop_connections(database_url: str) -> int:
    """End every server connection to ``database_url``'s database (a restart of PostgreSQL
    or a proxy dropping idle connections, as the app meets them): how many were ended."""
    name = database_url.rsplit("/", 1)[1]
    engine = create_async_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            ended = await conn.execute(
                sa.text(
                    "select pg_terminate_backend(pid) from pg_stat_activity"
                    " where datname = :name and pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
            return len(ended.all())
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """Overridden with params=["sqlite", "postgres"] by modules that run on both."""
    return str(request.param)


@pytest.fixture
async def database_url(
    backend: str, tmp_path: Path, sqlite_template: Path, request: pytest.FixtureRequest
) -> AsyncIterator[str | None]:
    if backend == "sqlite":
        shutil.copy(sqlite_template, tmp_path / "nodeloom.db")
        yield None
        return
    async with request.getfixturevalue("postgres_databases").lease() as url:
        yield url


@pytest.fixture(scope="session")
def postgres_databases(postgres_template: str) -> Iterator[PostgresDatabases]:
    """The PostgreSQL databases this test process lends its tests (tests/pg_databases.py)."""
    databases = PostgresDatabases(postgres_template)
    yield databases
    _in_thread(lambda: asyncio.run(databases.drop_all()))


@contextlib.asynccontextmanager
async def postgres_database(template: str | None = None) -> AsyncIterator[str]:
    """A database of its own (a clone of ``template``, else empty), dropped afterwards."""
    name = f"nl_t_{uuid.uuid4().hex[:12]}"
    clone = f' TEMPLATE "{template}"' if template else ""
    await _admin(f'CREATE DATABASE "{name}"{clone}')
    try:
        yield _pg_url(name)
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {}


@pytest.fixture
def settings(
    tmp_path: Path, database_url: str | None, settings_overrides: dict[str, object]
) -> Settings:
    values: dict[str, object] = {
        "data_dir": tmp_path,
        "secret_key": TEST_SECRET,
        "base_url": "http://testserver",
    }
    if database_url:
        values["database_url"] = database_url
    values.update(settings_overrides)
    return Settings(**values).prepare()  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def started_app(settings: Settings) -> AsyncIterator[FastAPI]:
    """``create_app(settings)`` with its lifespan running, as a server runs it."""
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    async with started_app(settings) as application:
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


@dataclass
class User:
    id: str
    email: str
    jwt: str
    api_key: str

    @property
    def jwt_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.jwt}"}

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


async def make_user(client: httpx.AsyncClient, email: str) -> User:
    r = await client.post("/api/v1/auth/signup", json={"email": email, "password": PASSWORD})
    assert r.status_code == 201, r.text
    account_id = r.json()["id"]
    r = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert r.status_code == 200, r.text
    jwt = r.json()["access_token"]
    r = await client.post(
        "/api/v1/api-keys", json={"name": "test"}, headers={"Authorization": f"Bearer {jwt}"}
    )
    assert r.status_code == 201, r.text
    return User(account_id, email, jwt, r.json()["key"])


@pytest.fixture(scope="module")
def fakes_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the provider fakes keep the media they answer with, one folder per module."""
    return tmp_path_factory.mktemp("fakes")


@pytest.fixture
def replicate_fake(fakes_dir: Path) -> Iterator[FakeReplicate]:
    """A fake of Replicate's HTTP API on 127.0.0.1 (tests/providers/fakes.py)."""
    fake = FakeReplicate(fakes_dir)
    yield fake
    fake.stop()


@pytest.fixture
def fal_fake(fakes_dir: Path) -> Iterator[FakeFal]:
    """A fake of fal's queue API on 127.0.0.1 (tests/providers/fakes.py)."""
    fake = FakeFal(fakes_dir)
    yield fake
    fake.stop()


@pytest.fixture
async def owner(client: httpx.AsyncClient) -> User:
    """The first account (sign-up always allowed for it)."""
    return await make_user(client, "owner@example.com")


@pytest.fixture
async def other(client: httpx.AsyncClient, app: FastAPI, owner: User) -> User:
    """A second account, created with sign-up switched on for the moment."""
    settings: Settings = app.state.ctx.settings
    settings.signup_enabled = True
    try:
        return await make_user(client, "other@example.com")
    finally:
        settings.signup_enabled = False


def text_graph(template: str = "Hello {{ text }}!") -> dict[str, object]:
    return {
        "nodes": [
            {
                "id": "in",
                "type": "TextInput",
                "position": {"x": 0, "y": 0},
                "data": {"text": "world"},
            },
            {
                "id": "tpl",
                "type": "TextTemplate",
                "position": {"x": 200, "y": 0},
                "data": {"template": template},
            },
        ],
        "edges": [{"id": "e1", "source": "in", "target": "tpl"}],
        "viewport": {"x": 0, "y": 0, "zoom": 1},
    }


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked slow (they start server processes, browsers or CLI subprocesses)
    first: pytest-xdist hands modules out in the order of their first test (``make test``'s
    ``--dist loadfile --no-loadscope-reorder``), and a long module started last would leave
    the other workers idle while it ends the run."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: object) -> Iterator[None]:
    """When a test times out, the stacks of its event loop's tasks too: pytest-timeout prints
    the threads' stacks, and a test that hangs in an ``await`` shows there only as an event
    loop waiting (a teardown once hung 300 s that way, and nothing said on what)."""
    yield
    handler = signal.getsignal(signal.SIGALRM)
    if not callable(handler):
        return

    def dump_tasks_then(signum: int, frame: FrameType | None) -> None:
        _print_tasks()
        handler(signum, frame)

    signal.signal(signal.SIGALRM, dump_tasks_then)


def _print_tasks() -> None:
    loop = asyncio._get_running_loop()  # the signal arrives on the loop's own thread
    if loop is None:
        return
    tasks = asyncio.all_tasks(loop)
    print(f"\n+++ Timeout: {len(tasks)} asyncio tasks of the running loop +++", file=sys.stderr)
    for task in tasks:
        task.print_stack(file=sys.stderr)
