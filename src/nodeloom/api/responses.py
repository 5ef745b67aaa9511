"""JSON responses encoded with orjson (UTC datetimes as RFC 3339 with a Z)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from starlette.responses import JSONResponse


def _default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot encode {type(value).__name__}")


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_default, option=orjson.OPT_UTC_Z)


def rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class OrjsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return dumps(content)
