"""The one place that turns an exception into an RFC 9457 problem+json response."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from nodeloom.api import methods
from nodeloom.api.responses import dumps
from nodeloom.api.urls import public_base
from nodeloom.errors import FieldError, ProblemError
from nodeloom.problem_catalog import PROBLEMS, type_uri

log = logging.getLogger("nodeloom.api")

# Framework errors (routing, 405) by status; any other status falls back to the code of its
# class, so every code answered is one of problem_catalog's.
_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    500: "internal_error",
    503: "service_unavailable",
}


PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "RFC 9457 problem details. Switch on `code`, a stable snake_case string.",
    "type": "object",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "code": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "errors": {
            "type": "array",
            "description": "Validation errors, each located by a JSON Pointer into the request.",
            "items": {
                "type": "object",
                "required": ["pointer", "message"],
                "properties": {"pointer": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
    "additionalProperties": True,
}
# What every operation can answer, by its shape (see document_problems).
_COMMON_DESCRIPTIONS = {
    400: "Invalid parameters or body (invalid_request)",
    401: "Missing or invalid credentials (unauthorized)",
    404: "No such resource in the caller's account (not_found)",
    429: "Rate limit exceeded (rate_limited); see Retry-After",
}


def document_problems(schema: dict[str, Any]) -> dict[str, Any]:
    """Make the OpenAPI document tell the truth about errors, once for every operation.

    FastAPI documents a 422 with its own body on every operation with parameters; this API
    answers 400 instead, everywhere. This drops the 422s, adds the errors each operation can
    answer by its shape (400 with parameters or a body; 401 and 429 with security; 404 with
    path parameters), and gives every 4xx/5xx response the ``Problem`` schema as
    ``application/problem+json``. Route-specific errors are declared with ``responses=`` on
    the route (a description is enough; the content is filled in here).
    """
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = PROBLEM_SCHEMA
    problem_content = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses: dict[str, Any] = operation["responses"]
            # FastAPI's own 422 (validation) is never answered; a 422 a route declares is.
            if responses.get("422", {}).get("description") == "Validation Error":
                responses.pop("422")
            parameters = operation.get("parameters", [])
            common: list[int] = []
            if parameters or "requestBody" in operation:
                common.append(400)
            if operation.get("security"):
                common += [401, 429]
            if any(p.get("in") == "path" for p in parameters):
                common.append(404)
            for code in common:
                responses.setdefault(str(code), {"description": _COMMON_DESCRIPTIONS[code]})
            for key, response in responses.items():
                if key[0] in "45":
                    response["content"] = dict(problem_content)
            operation["responses"] = dict(sorted(responses.items()))
    text = str(schema.get("paths"))
    for name in ("HTTPValidationError", "ValidationError"):
        if f"#/components/schemas/{name}" not in text:
            components.pop(name, None)
    return schema


def problem_response(
    status: int,
    code: str,
    title: str,
    detail: str,
    *,
    base_url: str,
    errors: list[FieldError] | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Response:
    """``type`` is this server's page about ``code`` (``/api/v1/problems/{code}``)."""
    body: dict[str, Any] = {
        "type": type_uri(base_url, code),
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    if extra:
        body.update(extra)
    if errors:
        body["errors"] = [e.as_dict() for e in errors]
    response = Response(
        dumps(body), status_code=status, headers=headers, media_type="application/problem+json"
    )
    # Also set by SecurityHeaders (api/middleware.py), but a 500 is sent by Starlette's
    # outermost error middleware, outside every middleware the app adds.
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def from_problem(exc: ProblemError, base_url: str) -> Response:
    return problem_response(
        exc.status,
        exc.code,
        exc.title,
        exc.detail,
        base_url=base_url,
        errors=exc.errors,
        headers=exc.headers,
        extra=exc.extra,
    )


def _validation_errors(exc: RequestValidationError) -> list[FieldError]:
    errors: list[FieldError] = []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ())]
        where = loc[0] if loc else "body"
        rest = loc[1:]
        if err.get("type") == "json_invalid":
            errors.append(FieldError("", "the request body is not valid JSON"))
            continue
        if where == "body":
            pointer = "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in rest)
            errors.append(FieldError(pointer if rest else "", str(err.get("msg"))))
        else:
            errors.append(FieldError(f"{where}:{'.'.join(rest)}", str(err.get("msg"))))
    return errors


Handler = Callable[[Request, Exception], Awaitable[Response]]


def install(app: FastAPI, base_url: str | None) -> None:
    for exc_type, handler in exception_handlers(base_url).items():
        app.add_exception_handler(exc_type, handler)


async def respond_to(
    handlers: dict[type[Exception], Handler], request: Request, exc: Exception
) -> Response:
    """The response the app's handlers give ``exc`` (the nearest class in its MRO), for code
    that answers outside the framework's exception middleware (api/hot.py)."""
    for cls in type(exc).__mro__:
        handler = handlers.get(cls)
        if handler is not None:
            return await handler(request, exc)
    raise exc


def exception_handlers(configured_base: str | None) -> dict[type[Exception], Handler]:
    """Every exception a request may end with, mapped to its problem+json answer.
    ``configured_base`` is ``NODELOOM_BASE_URL``; unset, each answer's ``type`` is on the
    address its request was sent to (api/urls.py)."""

    def base(request: Request) -> str:
        return public_base(configured_base, request.scope)

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        return from_problem(exc, base(request))

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = _validation_errors(exc)
        content_type = request.headers.get("content-type", "")
        # Only a problem of the body itself can come from sending it as something else; a
        # header or query parameter that failed is named below whatever the body's type.
        about_body = any(":" not in e.pointer for e in errors)
        if (
            about_body
            and request.method in {"POST", "PUT", "PATCH"}
            and "json" not in content_type.lower()
        ):
            return problem_response(
                400,
                "invalid_request",
                "Invalid request",
                "Send the body as JSON with Content-Type: application/json.",
                base_url=base(request),
                errors=errors,
            )
        detail = "; ".join(
            f"{e.pointer or 'body'}: {e.message}" if e.pointer else e.message for e in errors
        )
        return problem_response(
            400,
            "invalid_request",
            "Invalid request",
            detail or "invalid request",
            base_url=base(request),
            errors=errors,
        )

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        status, path = exc.status_code, request.url.path
        headers = dict(exc.headers or {})
        if status == 405 and path.startswith(methods.API_ROOT):
            # Allow names every API route's methods at the path; a path no API route
            # takes (one the web app's GET fallback matched) is unknown, not 405.
            every = methods.allowed(request.app.routes, path)
            if every:
                headers["Allow"] = ", ".join(every)
            else:
                status = 404
                headers.pop("Allow", None)
        fallback = "internal_error" if status >= 500 else "invalid_request"
        code = _HTTP_CODES.get(status, fallback)
        title = PROBLEMS[code].title
        detail = exc.detail if isinstance(exc.detail, str) else title
        if status == 404 and (exc.status_code == 405 or detail == "Not Found"):
            detail = f"No resource at {path}."
        if status == 405:
            detail = f"{request.method} is not allowed on {path}."
        return problem_response(
            status,
            code,
            title,
            detail,
            base_url=base(request),
            headers=headers,
        )

    async def on_integrity(request: Request, exc: Exception) -> Response:
        log.info("integrity conflict on %s %s: %s", request.method, request.url.path, exc)
        return problem_response(
            409,
            "conflict",
            "Conflict",
            "The request conflicts with the current state.",
            base_url=base(request),
        )

    async def on_operational(request: Request, exc: Exception) -> Response:
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        return problem_response(
            503,
            "service_unavailable",
            "Service unavailable",
            "The database is busy or unreachable; retry shortly.",
            base_url=base(request),
            headers={"Retry-After": "1"},
        )

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem_response(
            500,
            "internal_error",
            "Internal server error",
            "An unexpected error occurred.",
            base_url=base(request),
        )

    return {
        ProblemError: on_problem,
        RequestValidationError: on_validation,
        StarletteHTTPException: on_http,
        IntegrityError: on_integrity,
        OperationalError: on_operational,
        DBAPIError: on_operational,
        Exception: on_unexpected,
    }
