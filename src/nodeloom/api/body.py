"""Reading JSON bodies by hand, with a size cap enforced while reading.

``await request.body()`` would buffer whatever the client sends before we could look at its
size; here the stream is read chunk by chunk and refused as soon as it passes the limit,
whatever Content-Length claims (or when the body is chunked and has none).
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from nodeloom.api import json_guard
from nodeloom.errors import FieldError, InvalidRequest, PayloadTooLarge, UnsupportedMediaType

THREAD_PARSE_BYTES = 256 * 1024
_Body = TypeVar("_Body", bound=BaseModel)


def body_doc(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    """The ``openapi_extra`` of a route that reads its JSON body by hand (so FastAPI cannot
    document it): the body is ``model``, and ``required`` says whether it may be left out."""
    return {
        "requestBody": {
            "required": required,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
            },
        }
    }


def validated(model: type[_Body], raw: Any) -> _Body:
    """A body read by hand (None: none sent) as ``model``, or InvalidRequest naming each
    problem by its JSON pointer."""
    try:
        return model.model_validate(raw or {})
    except ValidationError as exc:
        errors = [
            FieldError("/" + "/".join(str(p) for p in e["loc"]), e["msg"])
            for e in exc.errors(include_url=False)
        ]
        raise InvalidRequest(
            "; ".join(f"{e.pointer}: {e.message}" for e in errors), errors=errors
        ) from exc


def is_json_content_type(value: str | None) -> bool:
    if not value:
        return False
    media = value.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def read_limited(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"The body is larger than {max_bytes} bytes.")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"The body is larger than {max_bytes} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(
    request: Request,
    max_bytes: int,
    *,
    require_json_type: bool = False,
    require_object: bool = True,
    allow_empty: bool = False,
) -> Any:
    if require_json_type and not is_json_content_type(request.headers.get("content-type")):
        raise UnsupportedMediaType("Send the body as Content-Type: application/json.")
    raw = await read_limited(request, max_bytes)
    return await parse_json_off_loop(raw, require_object=require_object, allow_empty=allow_empty)


async def parse_json_off_loop(
    raw: bytes, *, require_object: bool = True, allow_empty: bool = False
) -> Any:
    """``parse_json``; a large body takes milliseconds to parse and check, so it is done in
    a worker thread instead of on the event loop."""
    if len(raw) > THREAD_PARSE_BYTES:
        return await asyncio.to_thread(
            parse_json, raw, require_object=require_object, allow_empty=allow_empty
        )
    return parse_json(raw, require_object=require_object, allow_empty=allow_empty)


def parse_json(raw: bytes, *, require_object: bool = True, allow_empty: bool = False) -> Any:
    """A request body as JSON, or InvalidRequest saying what is wrong with it."""
    if not raw.strip():
        if allow_empty:
            return None
        raise InvalidRequest(
            "A JSON body is required.", errors=[FieldError("", "the body is empty")]
        )
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        json_guard.refuse_lone_surrogates(raw)
        raise InvalidRequest(
            "The body is not valid JSON.", errors=[FieldError("", f"invalid JSON: {exc}")]
        ) from exc
    if require_object and not isinstance(value, dict):
        raise InvalidRequest(
            "The body must be a JSON object.", errors=[FieldError("", "expected an object")]
        )
    json_guard.check(raw, value)
    return value
