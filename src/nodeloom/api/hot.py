"""The requests a busy server answers most, without the framework's per-request work:
a webhook trigger, an execute and a run's status poll (``HOT_ENDPOINTS``).

FastAPI matches a request against every route in turn, solves a dependency graph, then
validates and serializes the endpoint's answer through its response model: about a fifth of
a loaded server's CPU on a trigger. Here the endpoint functions of those three routes are
called with what FastAPI would have given them; their answers are already plain JSON
values, encoded once.

Nothing about these requests is written down twice. At start-up ``derive`` finds the three
routes on the app by their endpoint functions and takes from each what it declares: the
path template (its compiled matcher and parameter converters), the methods, the success
status, the response class, and the parameters and dependencies of the endpoint, which are
turned into a plan that fills its arguments (the bearer credential, the principal and its
rate-limit hit, headers with their limits) by calling the same dependency functions
FastAPI would call. Changing a route's path, status or dependencies changes the hot path
with it; a hot endpoint with no route, or one declaring something the plan cannot fill
(a body model, a cookie, a plain ``def`` dependency), stops ``create_app`` with
``HotRouteError``. A request whose parameters FastAPI would refuse (an ``Idempotency-Key``
over its declared length) is left to the app, so the refusal is FastAPI's own.

The routes stay declared on the app, which is how the OpenAPI document describes them and
how every request is answered when ``NODELOOM_HOT_PATHS`` is off; tests/api/test_hot_paths.py
sends the same requests both ways and requires the same answers (ADR 0009).

This middleware is the innermost of the app's own (api/app.py), so draining, the NUL check
and the RateLimit-* headers apply here as everywhere; errors become problem+json through the
same handlers (the app's ``exception_handlers``), and an unexpected one propagates, as
from a route.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.models import Dependant
from fastapi.routing import iter_route_contexts
from starlette._utils import get_route_path
from starlette.convertors import Convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from nodeloom.api import problems
from nodeloom.api.routes import runs, webhooks
from nodeloom.metrics import Metrics

HOT_ENDPOINTS: tuple[Callable[..., Any], ...] = (webhooks.trigger, runs.execute, runs.get_run)
HOT_REQUESTS = "nodeloom_hot_requests_total"


class HotRouteError(RuntimeError):
    """The app's routes do not declare a hot endpoint in a way the hot path can answer."""


class _LeaveToApp(Exception):
    """A parameter FastAPI would refuse: the app answers the request itself."""


@dataclass
class _Call:
    """What one request's plan works with: FastAPI's per-request cache of dependency values
    and the response whose headers and status an endpoint may set (made when declared)."""

    request: Request
    path_params: dict[str, Any]
    cache: dict[Callable[..., Any], Any]
    response: Response | None = None


# Fills the keyword arguments of one function (an endpoint or a dependency).
Filler = Callable[[_Call], Awaitable[dict[str, Any]]]
_Getter = Callable[[_Call], Awaitable[Any]]


@dataclass(frozen=True)
class HotRoute:
    name: str
    methods: frozenset[str]
    path_regex: re.Pattern[str]
    convertors: dict[str, Convertor[Any]]
    endpoint: Callable[..., Awaitable[Any]]
    arguments: Filler
    status_code: int | None
    response_class: type[Response]
    # Routes before this one that can match some of its paths: the router tries them first,
    # so a path one of them matches is left to the app (none today).
    shadows: tuple[re.Pattern[str], ...]

    def match(self, scope: Scope) -> dict[str, Any] | None:
        path = get_route_path(scope)  # as the router: without the root path, if any
        found = self.path_regex.match(path)
        if found is None or any(shadow.match(path) for shadow in self.shadows):
            return None
        return {k: self.convertors[k].convert(v) for k, v in found.groupdict().items()}

    async def answer(self, request: Request, path_params: dict[str, Any]) -> Response:
        """What FastAPI's request handler answers, without its validation of the answer."""
        call = _Call(request, path_params, {})
        content = await self.endpoint(**await self.arguments(call))
        if isinstance(content, Response):
            return content
        status = (call.response and call.response.status_code) or self.status_code or 200
        response = self.response_class(content, status_code=status)
        if call.response is not None:
            response.headers.raw.extend(call.response.headers.raw)
        return response


def derive(routes: Sequence[BaseRoute]) -> list[HotRoute]:
    """The hot routes as the app declares them, in ``HOT_ENDPOINTS`` order; the first route
    of an endpoint wins, as in the router."""
    found: dict[Callable[..., Any], HotRoute] = {}
    earlier: list[Any] = []
    for context in iter_route_contexts(routes):
        endpoint = context.endpoint
        if endpoint in HOT_ENDPOINTS and endpoint not in found:
            found[endpoint] = _compile(context, _shadows(context, earlier))
        earlier.append(context)
    missing = [_qualname(e) for e in HOT_ENDPOINTS if e not in found]
    if missing:
        raise HotRouteError(
            f"no route on the app has the endpoint {', '.join(missing)}; the hot paths "
            "answer only requests the app declares (api/hot.py, HOT_ENDPOINTS)"
        )
    return [found[e] for e in HOT_ENDPOINTS]


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


_PARAMETER = re.compile(r"{[^}]*}")


def _shadows(context: Any, earlier: list[Any]) -> tuple[re.Pattern[str], ...]:
    """The path patterns of ``earlier`` routes that share a method with ``context`` and
    match an instance of its path template, or whose own template it matches ("1" for each
    parameter: a string, an int and a float converter all take it). Over-inclusive at
    worst, which only leaves more requests to the app."""

    def instance(template: str) -> str:
        return _PARAMETER.sub("1", template)

    shadows = []
    for other in earlier:
        regex = getattr(other, "path_regex", None)
        path = getattr(other, "path", None)
        methods = getattr(other, "methods", None)  # None: every method (a mount)
        if regex is None or path is None or isinstance(other.original_route, WebSocketRoute):
            continue
        if methods is not None and not set(methods) & set(context.methods):
            continue
        if regex.match(instance(context.path)) or context.path_regex.match(instance(path)):
            shadows.append(regex)
    return tuple(shadows)


def _compile(context: Any, shadows: tuple[re.Pattern[str], ...]) -> HotRoute:
    where = f"{_qualname(context.endpoint)} ({context.path})"
    dependant: Dependant = context.dependant
    if context.body_field is not None:
        raise HotRouteError(f"{where}: a body model is validated by FastAPI only")
    response_class = context.response_class
    if isinstance(response_class, DefaultPlaceholder):
        response_class = response_class.value
    return HotRoute(
        name=context.endpoint.__name__,
        methods=frozenset(context.methods),
        path_regex=context.path_regex,
        convertors=dict(context.param_convertors),
        endpoint=context.endpoint,
        arguments=_filler(dependant, where),
        status_code=context.status_code,
        response_class=response_class,
        shadows=shadows,
    )


def _filler(dependant: Dependant, where: str) -> Filler:
    """A function filling the arguments ``dependant`` declares, built once."""
    unsupported = [
        name
        for name, present in (
            ("body", dependant.body_params),
            ("cookie", dependant.cookie_params),
            ("WebSocket", dependant.websocket_param_name),
            ("BackgroundTasks", dependant.background_tasks_param_name),
            ("SecurityScopes", dependant.security_scopes_param_name),
        )
        if present
    ]
    if unsupported:
        raise HotRouteError(f"{where}: declares {', '.join(unsupported)} parameters")
    getters: list[tuple[str | None, _Getter]] = []
    for name in {dependant.request_param_name, dependant.http_connection_param_name} - {None}:
        assert name is not None
        getters.append((name, _the_request))
    if dependant.response_param_name:
        getters.append((dependant.response_param_name, _the_response))
    # Parameters before dependencies: one FastAPI would refuse leaves the request to the
    # app before a dependency has done anything (counted a rate-limit hit), and the app
    # then answers in its own order (a missing credential is 401 whatever else is wrong).
    for source, fields in (
        ("path", dependant.path_params),
        ("query", dependant.query_params),
        ("header", dependant.header_params),
    ):
        getters.extend((field.name, _parameter(field, source)) for field in fields)
    # A dependency without a name (``dependencies=[...]`` on the route or its router) runs
    # for what it does, and its value is not an argument.
    getters.extend((sub.name, _dependency(sub, where)) for sub in dependant.dependencies)

    async def fill(call: _Call) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, get in getters:
            value = await get(call)
            if name is not None:
                values[name] = value
        return values

    return fill


async def _the_request(call: _Call) -> Request:
    return call.request


async def _the_response(call: _Call) -> Response:
    if call.response is None:
        call.response = Response()
        del call.response.headers["content-length"]
        call.response.status_code = None  # type: ignore[assignment]  # "not set", as FastAPI
    return call.response


def _dependency(sub: Dependant, where: str) -> _Getter:
    function = sub.call
    if function is None or not _is_coroutine(function):
        what = getattr(function, "__qualname__", repr(function))
        raise HotRouteError(f"{where}: the dependency {what} is not an async function")
    arguments = _filler(sub, where)

    async def get(call: _Call) -> Any:
        if sub.use_cache and function in call.cache:
            return call.cache[function]
        value = await function(**await arguments(call))
        if sub.use_cache:
            call.cache[function] = value
        return value

    return get


def _is_coroutine(function: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - an instance with an async __call__
    )


def _parameter(field: Any, source: str) -> _Getter:
    """A declared parameter, validated as FastAPI validates it (its type and limits)."""
    name = field.name if source == "path" else field.alias

    def read(call: _Call) -> Any:
        if source == "path":
            return call.path_params.get(name)
        values = call.request.query_params if source == "query" else call.request.headers
        return values.get(name)

    info = field.field_info
    if source == "path" and info.annotation is str and not info.metadata:
        # The path's converter made it a string already: nothing left to check.
        async def get_path(call: _Call) -> Any:
            return call.path_params[name]

        return get_path

    async def get(call: _Call) -> Any:
        raw = read(call)
        if raw is None:
            if field.field_info.is_required():
                raise _LeaveToApp
            return field.field_info.get_default(call_default_factory=True)
        value, errors = field.validate(raw, {}, loc=(source, field.alias))
        if errors:
            raise _LeaveToApp
        return value

    return get


class HotPaths:
    def __init__(self, app: ASGIApp, routes: list[HotRoute], metrics: Metrics) -> None:
        self.app = app
        self.routes = routes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for route in self.routes:
                if scope["method"] not in route.methods:
                    continue
                path_params = route.match(scope)
                if path_params is None:
                    continue
                request = Request(scope, receive)
                try:
                    response = await route.answer(request, path_params)
                except _LeaveToApp:
                    break
                except Exception as exc:
                    self._count(route)
                    response = await problems.respond_to(_handlers(scope), request, exc)
                else:
                    self._count(route)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _count(self, route: HotRoute) -> None:
        self.metrics.inc(HOT_REQUESTS, help_="Requests answered by the hot paths", route=route.name)


def _handlers(scope: Scope) -> dict[type[Exception], problems.Handler]:
    """The app's exception handlers, as its routes' errors meet them: the catch-all (500)
    is the server-error middleware's, outside every other, so an unexpected error
    propagates from here as it does from a route."""
    return {
        cls: handler
        for cls, handler in scope["app"].exception_handlers.items()
        if isinstance(cls, type) and cls is not Exception
    }
