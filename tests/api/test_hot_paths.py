"""The hot paths (api/hot.py) answer exactly as FastAPI does.

For each hot request (a webhook trigger, an execute, a run's status poll), one scenario
sends the same sequence of requests, the success and every refusal it can give, to an app
with the hot paths on and to one with them off, each on a fresh database of the backend.
The answers must be the same: status, headers (RateLimit-*, Retry-After and Location
compared after the ids and seconds that differ between two runs are normalised) and the
body's bytes (ids, timestamps and durations normalised). Each request's expected status and
problem code is checked too, so an answer both paths get wrong the same way still fails,
and the hot-path counter must show that the hot path answered what it should (and nothing,
when off). A scenario's answers are kept for the module, so the on and off tests of one
request and backend share the two runs.

Also here: a hot endpoint without a route stops ``create_app``, and a route's declared path
and status are what the hot path follows.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.routing import iter_route_contexts

from nodeloom.api import hot
from nodeloom.api.app import create_app
from nodeloom.api.routes import runs, webhooks
from nodeloom.auth.signatures import HEADER, sign
from nodeloom.settings import Settings
from nodeloom.store.runs import RUNS
from tests.api.test_webhooks import SECRET, make_webhook, set_credits, set_plan
from tests.conftest import TEST_SECRET, User, make_user, postgres_database, text_graph
from tests.runs_helpers import create_workflow

API_KEY_LIMIT = 60
WEBHOOK_LIMIT = 6
MB = 1_048_576


@dataclass
class World:
    """What a scenario sets up before it sends its cases."""

    app: FastAPI
    client: httpx.AsyncClient
    owner: User
    other: User
    workflow_id: str
    second_workflow_id: str
    other_workflow_id: str
    token: str
    inactive_token: str
    signed_token: str
    run_id: str
    broken_run_id: str  # a run whose stored error is not an object: reading it fails

    def execute_url(self, workflow_id: str | None = None) -> str:
        return f"/api/v1/workflows/{workflow_id or self.workflow_id}/execute"

    def status_url(self, workflow_id: str | None = None, run_id: str | None = None) -> str:
        return f"/api/v1/workflows/{workflow_id or self.workflow_id}/runs/{run_id or self.run_id}"

    def trigger_url(self, token: str | None = None) -> str:
        return f"/api/v1/webhooks/{token or self.token}"

    def hot_answered(self, route: str) -> float:
        return float(self.app.state.ctx.metrics.value(hot.HOT_REQUESTS, route=route))


Send = Callable[[World], Awaitable[httpx.Response]]


@dataclass(frozen=True)
class Case:
    name: str
    send: Send
    status: int | None  # None: only the same both ways (see HEAD below)
    code: str | None = None  # the problem's code, when the answer is a problem
    hot: bool = True  # answered by the hot path when it is on (else left to the app)


@dataclass(frozen=True)
class Answer:
    name: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: str
    seconds: dict[str, int] = field(compare=False)  # RateLimit-Reset, Retry-After
    elapsed: float = field(compare=False)  # seconds since the scenario's first request
    hot: bool = field(compare=False)


JSON = {"Content-Type": "application/json"}


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


async def _chunks(size: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < size:
        chunk = min(256 * 1024, size - sent)
        sent += chunk
        yield b" " * chunk


async def _until_refused(send: Send, w: World, attempts: int) -> httpx.Response:
    for _ in range(attempts):
        r = await send(w)
        if r.status_code == 429:
            return r
    return r


async def _with_plan(w: World, plan: str, send: Send) -> httpx.Response:
    await set_plan(w.app, w.owner, plan)
    try:
        return await send(w)
    finally:
        await set_plan(w.app, w.owner, "enterprise")


async def _without_credits(w: World, send: Send) -> httpx.Response:
    await set_credits(w.app, w.owner, 0)
    try:
        return await send(w)
    finally:
        await set_credits(w.app, w.owner, 10_000)


def _body(kwargs: dict[str, Any]) -> dict[str, Any]:
    """httpx arguments for one request; ``chunked=n`` streams n bytes without a length."""
    extra = dict(kwargs)
    chunked = extra.pop("chunked", None)
    if chunked is not None:
        extra["content"] = _chunks(chunked)
    return extra


def _trigger(token: str | None = None, **kwargs: Any) -> Send:
    kwargs.setdefault("content", _json({"text": "hi"}))
    kwargs.setdefault("headers", JSON)
    return lambda w: w.client.post(w.trigger_url(token), **_body(kwargs))


TRIGGER_CASES = [
    Case("accepted", _trigger(), 202),
    Case("unknown query parameters", lambda w: w.client.post(
        w.trigger_url() + "?foo=bar&foo=baz", content=_json({}), headers=JSON), 202),
    Case("an Idempotency-Key is not the trigger's", _trigger(
        headers={**JSON, "Idempotency-Key": "k1"}), 202),
    Case("the same Idempotency-Key again", _trigger(
        headers={**JSON, "Idempotency-Key": "k1"}), 202),
    Case("unknown token", _trigger("A" * 43), 404, "not_found"),
    Case("malformed token", _trigger("short"), 404, "not_found"),
    Case("inactive webhook", lambda w: _trigger(w.inactive_token)(w), 403, "webhook_inactive"),
    Case("plan without webhooks", lambda w: _with_plan(w, "free", _trigger()),
         403, "plan_upgrade_required"),
    Case("no Content-Type", _trigger(headers={}), 415, "unsupported_media_type"),
    Case("text/plain", _trigger(headers={"Content-Type": "text/plain"}),
         415, "unsupported_media_type"),
    Case("unsigned trigger of a signed webhook", lambda w: _trigger(w.signed_token)(w),
         403, "forbidden"),
    Case("signed", lambda w: _trigger(w.signed_token, headers={
        **JSON, HEADER: sign(SECRET, b'{"text":"hi"}', int(time.time()))})(w), 202),
    Case("wrong signature", lambda w: _trigger(w.signed_token, headers={
        **JSON, HEADER: sign(SECRET, b"{}", int(time.time()))})(w), 403, "forbidden"),
    Case("declared over 1 MB", _trigger(content=b" " * (MB + 1)), 413, "payload_too_large"),
    Case("chunked over 1 MB", _trigger(chunked=MB + 1), 413, "payload_too_large"),
    Case("bad JSON", _trigger(content=b"{nope"), 400, "invalid_request"),
    Case("not an object", _trigger(content=b"[1, 2]"), 400, "invalid_request"),
    Case("empty body", _trigger(content=b""), 400, "invalid_request"),
    Case("NUL in a string", _trigger(content=b'{"a": "\\u0000"}'), 400, "invalid_request"),
    Case("nested too deep", _trigger(content=b'{"a":' * 70 + b"1" + b"}" * 70),
         400, "invalid_request"),
    Case("insufficient credits", lambda w: _without_credits(w, _trigger()),
         402, "insufficient_credits"),
    # GET and HEAD of a path that has only a POST route: 405 with Allow: POST, through
    # the web app's fallback (api/webapp.py, api/methods.py); not the hot path's to
    # decide, only the same both ways.
    Case("HEAD", lambda w: w.client.head(w.trigger_url()), None, hot=False),
    Case("GET", lambda w: w.client.get(w.trigger_url()), None, hot=False),
    Case("PUT", lambda w: w.client.put(w.trigger_url(), content=b"{}", headers=JSON),
         405, "method_not_allowed", hot=False),
    # No API route takes the path with a trailing slash: 404 (the fallback's GET/HEAD
    # route matched it, so the router did not redirect to the route without the slash).
    Case("trailing slash", lambda w: w.client.post(
        w.trigger_url() + "/", content=b"{}", headers=JSON), None, hot=False),
    Case("rate limited", lambda w: _until_refused(_trigger(), w, WEBHOOK_LIMIT + 1),
         429, "rate_limited"),
]  # fmt: skip


def _execute(
    body: Any = None, *, user: str = "owner", headers: dict[str, str] | None = None, **kwargs: Any
) -> Send:
    def send(w: World) -> Awaitable[httpx.Response]:
        sent = {**(getattr(w, user).headers if user else {}), **(headers or {})}
        extra = _body(kwargs)
        if "content" not in extra:
            extra["json"] = body
        return w.client.post(w.execute_url(), headers=sent, **extra)

    return send


EXECUTE_CASES = [
    Case("accepted, no body", _execute(), 202),
    Case("accepted, input", _execute({"input": {"text": "x"}, "cache": False}), 202),
    Case("accepted with a JWT", lambda w: w.client.post(
        w.execute_url(), headers=w.owner.jwt_headers), 202),
    Case("unknown query parameters", lambda w: w.client.post(
        w.execute_url() + "?foo=1", headers=w.owner.headers), 202),
    Case("text/plain body", _execute(content=b'{"input": {}}',
         headers={"Content-Type": "text/plain"}), 202),
    Case("Idempotency-Key", _execute(headers={"Idempotency-Key": "key-1"}), 202),
    Case("Idempotency-Key replayed", _execute(headers={"Idempotency-Key": "key-1"}), 202),
    Case("Idempotency-Key with another body", _execute(
        {"cache": False}, headers={"Idempotency-Key": "key-1"}), 422, "idempotency_key_reused"),
    Case("empty Idempotency-Key", _execute(headers={"Idempotency-Key": ""}), 202),
    Case("lower-case bearer", lambda w: w.client.post(
        w.execute_url(), headers={"Authorization": f"bearer {w.owner.api_key}"}), 202),
    Case("NUL in the input", _execute({"input": {"text": "\u0000"}}), 400, "invalid_request"),
    Case("Idempotency-Key over 255 characters", _execute(
        headers={"Idempotency-Key": "k" * 256}), 400, "invalid_request", hot=False),
    Case("no credential", _execute(user=""), 401, "unauthorized"),
    Case("invalid API key", _execute(user="", headers={"Authorization": "Bearer nlk_nope"}),
         401, "unauthorized"),
    Case("not a bearer credential", _execute(user="", headers={"Authorization": "Basic eDp5"}),
         401, "unauthorized"),
    Case("unknown workflow", lambda w: w.client.post(
        w.execute_url("0" * 32), headers=w.owner.headers), 404, "not_found"),
    Case("another account's workflow", lambda w: w.client.post(
        w.execute_url(), headers=w.other.headers), 404, "not_found"),
    Case("bad JSON", _execute(content=b"{nope", headers=JSON), 400, "invalid_request"),
    Case("not an object", _execute([1, 2]), 400, "invalid_request"),
    Case("invalid input", _execute({"cache": "maybe", "input": 3}), 400, "invalid_request"),
    Case("over 1 MB", _execute(content=b" " * (MB + 1), headers=JSON),
         413, "payload_too_large"),
    Case("chunked over 1 MB", _execute(chunked=MB + 1, headers=JSON),
         413, "payload_too_large"),
    Case("insufficient credits", lambda w: _without_credits(w, _execute()),
         402, "insufficient_credits"),
    Case("HEAD", lambda w: w.client.head(w.execute_url(), headers=w.owner.headers),
         None, hot=False),
    Case("GET", lambda w: w.client.get(w.execute_url(), headers=w.owner.headers),
         None, hot=False),
    Case("trailing slash", lambda w: w.client.post(
        w.execute_url() + "/", headers=w.owner.headers), None, hot=False),
    Case("rate limited", lambda w: _until_refused(lambda w: w.client.post(
        w.execute_url("0" * 32), headers=w.owner.headers), w, API_KEY_LIMIT + 1),
         429, "rate_limited"),
]  # fmt: skip


def _status(user: str = "owner", **kwargs: Any) -> Send:
    def send(w: World) -> Awaitable[httpx.Response]:
        headers = dict(getattr(w, user).headers if user else {})
        headers.update(kwargs.get("headers", {}))
        return w.client.get(w.status_url(), headers=headers)

    return send


STATUS_CASES = [
    Case("completed run", _status(), 200),
    Case("unknown query parameters", lambda w: w.client.get(
        w.status_url() + "?status=x&limit=-1", headers=w.owner.headers), 200),
    Case("with a JWT", lambda w: w.client.get(w.status_url(), headers=w.owner.jwt_headers), 200),
    Case("an Idempotency-Key is ignored", _status(headers={"Idempotency-Key": "k" * 300}), 200),
    Case("no credential", _status(user=""), 401, "unauthorized"),
    Case("invalid JWT", _status(user="", headers={"Authorization": "Bearer a.b.c"}),
         401, "unauthorized"),
    Case("another account's run", _status(user="other"), 404, "not_found"),
    Case("unknown run", lambda w: w.client.get(
        w.status_url(run_id="0" * 32), headers=w.owner.headers), 404, "not_found"),
    Case("unknown workflow", lambda w: w.client.get(
        w.status_url(workflow_id="0" * 32), headers=w.owner.headers), 404, "not_found"),
    Case("the run under another workflow", lambda w: w.client.get(
        w.status_url(workflow_id=w.second_workflow_id), headers=w.owner.headers),
         404, "not_found"),
    Case("a run the server cannot show", lambda w: w.client.get(
        w.status_url(run_id=w.broken_run_id), headers=w.owner.headers),
         500, "internal_error"),
    Case("HEAD", lambda w: w.client.head(w.status_url(), headers=w.owner.headers),
         None, hot=False),
    Case("POST", lambda w: w.client.post(w.status_url(), headers=w.owner.headers),
         405, "method_not_allowed", hot=False),
    Case("trailing slash", lambda w: w.client.get(
        w.status_url() + "/", headers=w.owner.headers), None, hot=False),
    Case("rate limited", lambda w: _until_refused(_status(), w, API_KEY_LIMIT + 1),
         429, "rate_limited"),
]  # fmt: skip

CASES = {"trigger": TRIGGER_CASES, "execute": EXECUTE_CASES, "status": STATUS_CASES}
ROUTE_NAMES = {"trigger": "trigger", "execute": "execute", "status": "get_run"}

_UUID = re.compile(rb"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_TIMESTAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
_VOLATILE = [
    (_UUID, b"<id>"),
    (_TIMESTAMP, b"<time>"),
    (re.compile(rb'"duration_ms":\d+'), b'"duration_ms":<ms>'),
    (re.compile(rb"retry in \d+ s"), b"retry in <s> s"),
]
SECONDS = ("ratelimit-reset", "retry-after")


def _normalise(world: World, raw: bytes) -> str:
    for token, name in (
        (world.token, b"<token>"),
        (world.inactive_token, b"<inactive>"),
        (world.signed_token, b"<signed>"),
    ):
        raw = raw.replace(token.encode(), name)
    for pattern, replacement in _VOLATILE:
        raw = pattern.sub(replacement, raw)
    return raw.decode()


async def _answer(world: World, route: str, case: Case, started: float) -> Answer:
    before = world.hot_answered(route)
    r = await case.send(world)
    body = await r.aread()
    headers = []
    seconds = {}
    for name, value in r.headers.multi_items():
        if name == "content-length" and r.request.method != "HEAD":  # HEAD: GET's length
            assert int(value) == len(body), f"{case.name}: Content-Length {value}, {len(body)}"
            value = str(len(_normalise(world, body).encode()))
        if name in SECONDS:
            seconds[name] = int(value)
            value = "<s>"
        headers.append((name, _normalise(world, value.encode())))
    return Answer(
        name=case.name,
        status=r.status_code,
        headers=tuple(sorted(headers)),
        body=_normalise(world, body),
        seconds=seconds,
        elapsed=time.monotonic() - started,
        hot=world.hot_answered(route) > before,
    )


@contextlib.asynccontextmanager
async def _app(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        # An unexpected error is answered 500, as a client sees it, not raised in the test.
        transport = httpx.ASGITransport(app=application, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            yield application, c


async def _world(app: FastAPI, client: httpx.AsyncClient) -> World:
    owner = await make_user(client, "owner@example.com")
    settings: Settings = app.state.ctx.settings
    settings.signup_enabled = True
    other = await make_user(client, "other@example.com")
    settings.signup_enabled = False
    workflow_id = await create_workflow(client, owner, text_graph())
    second = await create_workflow(client, owner, text_graph(), name="second")
    others = await create_workflow(client, other, text_graph())
    hook = await make_webhook(client, owner, workflow_id)
    inactive = await make_webhook(client, owner, workflow_id, active=False)
    signed = await make_webhook(client, owner, workflow_id, secret=SECRET)
    runs = []
    for _ in range(2):
        r = await client.post(f"/api/v1/workflows/{workflow_id}/execute", headers=owner.headers)
        assert r.status_code == 202, r.text
        runs.append(r.json()["run_id"])
    broken = sa.update(RUNS).where(RUNS.c.id == runs[1]).values(error=[1])
    await app.state.ctx.db.write(lambda c: c.execute(broken))
    return World(
        app=app,
        client=client,
        owner=owner,
        other=other,
        workflow_id=workflow_id,
        second_workflow_id=second,
        other_workflow_id=others,
        token=hook["token"],
        inactive_token=inactive["token"],
        signed_token=signed["token"],
        run_id=runs[0],
        broken_run_id=runs[1],
    )


async def _scenario(kind: str, settings: Settings) -> list[Answer]:
    async with _app(settings) as (app, client):
        started = time.monotonic()
        world = await _world(app, client)
        if kind == "status":  # a run of instant nodes is complete once accepted (ADR 0009)
            r = await client.get(world.status_url(), headers=world.owner.headers)
            assert r.json()["status"] == "completed", r.text
        return [await _answer(world, ROUTE_NAMES[kind], case, started) for case in CASES[kind]]


_ANSWERS: dict[tuple[str, str, bool], list[Answer]] = {}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def scenario(
    backend: str, tmp_path: Path, sqlite_template: Path, request: pytest.FixtureRequest
) -> Callable[[str, bool], Awaitable[list[Answer]]]:
    """The answers of a kind's scenario with the hot paths on or off (run once per module)."""

    async def run(kind: str, hot_paths: bool) -> list[Answer]:
        key = (kind, backend, hot_paths)
        if key not in _ANSWERS:
            data_dir = tmp_path / ("hot" if hot_paths else "framework")
            data_dir.mkdir()
            values: dict[str, Any] = {
                "data_dir": data_dir,
                "secret_key": TEST_SECRET,
                "base_url": "http://testserver",
                "hot_paths": hot_paths,
                "rate_limit_api_key": API_KEY_LIMIT,
                "rate_limit_jwt": 100_000,
                "rate_limit_webhook": WEBHOOK_LIMIT,
                # Long enough that no hit leaves the window during a scenario.
                "rate_limit_window_seconds": 3600,
            }
            if backend == "sqlite":
                shutil.copy(sqlite_template, data_dir / "nodeloom.db")
                _ANSWERS[key] = await _scenario(kind, Settings(**values).prepare())
            else:
                template = request.getfixturevalue("postgres_template")
                async with postgres_database(template) as url:
                    values["database_url"] = url
                    _ANSWERS[key] = await _scenario(kind, Settings(**values).prepare())
        return _ANSWERS[key]

    return run


@pytest.mark.parametrize("hot_paths", [True, False], ids=["hot", "framework"])
@pytest.mark.parametrize("kind", ["trigger", "execute", "status"])
async def test_same_answers_both_ways(
    kind: str, hot_paths: bool, scenario: Callable[[str, bool], Awaitable[list[Answer]]]
) -> None:
    answers = await scenario(kind, hot_paths)
    others = await scenario(kind, not hot_paths)
    for case, mine, theirs in zip(CASES[kind], answers, others, strict=True):
        assert case.status is None or mine.status == case.status, (case.name, mine)
        if case.code is not None:
            problem = orjson.loads(mine.body)
            assert problem["code"] == case.code, (case.name, problem)
            assert ("content-type", "application/problem+json") in mine.headers, case.name
        assert mine.hot == (hot_paths and case.hot), (case.name, mine.hot)
        assert mine == theirs, case.name
        assert mine.seconds.keys() == theirs.seconds.keys(), case.name
        # Seconds until a window frees a slot count from its oldest hit, made during the
        # scenario: two runs' values differ by at most how much longer one run took.
        slack = max(mine.elapsed, theirs.elapsed) + 1
        for name, value in mine.seconds.items():
            assert 0 <= value <= 3600, (case.name, name, value)
            assert abs(value - theirs.seconds[name]) <= slack, (case.name, name)


class TestDerivation:
    @pytest.fixture
    def settings_overrides(self) -> dict[str, object]:
        return {"hot_paths": True}

    async def test_follows_the_declared_path_and_status(self, app: FastAPI) -> None:
        derived = {route.endpoint: route for route in hot.derive(app.routes)}
        declared = {
            r.endpoint: r
            for r in iter_route_contexts(app.routes)
            if r.endpoint in hot.HOT_ENDPOINTS
        }
        assert set(derived) == set(declared) == set(hot.HOT_ENDPOINTS)
        for endpoint, route in derived.items():
            assert route.path_regex is declared[endpoint].path_regex
            assert route.status_code == declared[endpoint].status_code
            assert route.methods == declared[endpoint].methods
            assert route.shadows == ()  # no route before it takes any of its paths

    async def test_a_moved_route_moves_the_hot_path(self) -> None:
        router = _router(trigger=("/hooks/{token}/fire", 201))
        (route,) = [r for r in hot.derive(router.routes) if r.endpoint is webhooks.trigger]
        assert route.status_code == 201
        assert route.match({"path": "/hooks/abc/fire"}) == {"token": "abc"}
        assert route.match({"path": "/api/v1/webhooks/abc"}) is None
        behind_a_proxy = {"path": "/nodeloom/hooks/abc/fire", "root_path": "/nodeloom"}
        assert route.match(behind_a_proxy) == {"token": "abc"}

    async def test_an_earlier_route_keeps_its_paths(self) -> None:
        router = APIRouter()
        router.add_api_route("/x/{workflow_id}/runs/latest", runs.list_runs, methods=["GET"])
        router.add_api_route("/x/{workflow_id}/runs/{run_id}", runs.get_run, methods=["GET"])
        router.routes.extend(_router(get_run=None).routes)
        (route,) = [r for r in hot.derive(router.routes) if r.endpoint is runs.get_run]
        assert route.match({"path": "/x/w/runs/latest"}) is None  # the router's first match
        assert route.match({"path": "/x/w/runs/r1"}) == {"workflow_id": "w", "run_id": "r1"}
        assert [r.shadows for r in hot.derive(_router().routes)] == [(), (), ()]

    async def test_a_missing_hot_route_stops_the_app(self) -> None:
        with pytest.raises(hot.HotRouteError, match=r"routes\.runs\.get_run"):
            hot.derive(_router(get_run=None).routes)

    async def test_an_undeclarable_dependency_stops_the_app(self) -> None:
        def plain(request: Request) -> None:  # FastAPI would run it in a thread
            return None

        router = _router()
        router.add_api_route("/y/{token}", webhooks.trigger, methods=["POST"],
                             dependencies=[Depends(plain)])  # fmt: skip
        routes = [r for r in router.routes if r.path == "/y/{token}"]
        with pytest.raises(hot.HotRouteError, match="plain is not an async function"):
            hot.derive(routes + router.routes)


def _router(**declared: tuple[str, int] | None) -> APIRouter:
    """A router with the hot endpoints at the paths and statuses given (None: absent)."""
    router = APIRouter()
    defaults = {
        "trigger": (webhooks.trigger, "POST", ("/w/{token}", 202)),
        "execute": (runs.execute, "POST", ("/x/{workflow_id}/execute", 202)),
        "get_run": (runs.get_run, "GET", ("/x/{workflow_id}/runs/{run_id}", 200)),
    }
    for name, (endpoint, method, default) in defaults.items():
        path_status = declared.get(name, default)
        if path_status is not None:
            path, status_code = path_status
            router.add_api_route(path, endpoint, methods=[method], status_code=status_code)
    return router
