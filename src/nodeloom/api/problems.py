"""The one place that turns an exception into an RFC 9457 problem+json response."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from nodeloom.api.responses import dumps
from nodeloom.errors import FieldError, ProblemError

log = logging.getLogger("nodeloom.api")

PROBLEM_TYPE_BASE = "https://nodeloom.dev/problems/"
_HTTP_CODES = {
    400: ("invalid_request", "Invalid request"),
    401: ("unauthorized", "Unauthorized"),
    403: ("forbidden", "Forbidden"),
    404: ("not_found", "Not found"),
    405: ("method_not_allowed", "Method not allowed"),
    406: ("not_acceptable", "Not acceptable"),
    409: ("conflict", "Conflict"),
    413: ("payload_too_large", "Payload too large"),
    415: ("unsupported_media_type", "Unsupported media type"),
    429: ("rate_limited", "Too many requests"),
    500: ("internal_error", "Internal server error"),
    503: ("service_unavailable", "Service unavailable"),
}


def problem_response(
    status: int,
    code: str,
    title: str,
    detail: str,
    *,
    errors: list[FieldError] | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Response:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + code,
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    if extra:
        body.update(extra)
    if errors:
        body["errors"] = [e.as_dict() for e in errors]
    return Response(
        dumps(body), status_code=status, headers=headers, media_type="application/problem+json"
    )


def from_problem(exc: ProblemError) -> Response:
    return problem_response(
        exc.status,
        exc.code,
        exc.title,
        exc.detail,
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


def install(app: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        return from_problem(exc)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = _validation_errors(exc)
        content_type = request.headers.get("content-type", "")
        if request.method in {"POST", "PUT", "PATCH"} and "json" not in content_type.lower():
            return problem_response(
                400,
                "invalid_request",
                "Invalid request",
                "Send the body as JSON with Content-Type: application/json.",
                errors=errors,
            )
        detail = "; ".join(
            f"{e.pointer or 'body'}: {e.message}" if e.pointer else e.message for e in errors
        )
        return problem_response(
            400, "invalid_request", "Invalid request", detail or "invalid request", errors=errors
        )

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code, title = _HTTP_CODES.get(exc.status_code, ("error", "Error"))
        detail = exc.detail if isinstance(exc.detail, str) else title
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"No resource at {request.url.path}."
        if exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}."
        return problem_response(
            exc.status_code, code, title, detail, headers=dict(exc.headers or {})
        )

    async def on_integrity(request: Request, exc: Exception) -> Response:
        log.info("integrity conflict on %s %s: %s", request.method, request.url.path, exc)
        return problem_response(
            409, "conflict", "Conflict", "The request conflicts with the current state."
        )

    async def on_operational(request: Request, exc: Exception) -> Response:
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        return problem_response(
            503,
            "service_unavailable",
            "Service unavailable",
            "The database is busy or unreachable; retry shortly.",
            headers={"Retry-After": "1"},
        )

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem_response(
            500, "internal_error", "Internal server error", "An unexpected error occurred."
        )

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(IntegrityError, on_integrity)
    app.add_exception_handler(OperationalError, on_operational)
    app.add_exception_handler(DBAPIError, on_operational)
    app.add_exception_handler(Exception, on_unexpected)
