"""JSON responses encoded with orjson (UTC datetimes as RFC 3339 with a Z)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse


def _default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot encode {type(value).__name__}")


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_default, option=orjson.OPT_UTC_Z)


class OrjsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return dumps(content)
