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
    answers 400 instead (SPEC §0). This drops the 422s, adds the errors each operation can
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
            responses.pop("422", None)
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
