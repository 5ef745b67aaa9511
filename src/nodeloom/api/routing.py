"""The route class of every router: bodies that FastAPI itself parses into a model (sign-up,
log-in, keys, webhook settings) are read with a size cap and pass the same JSON rules as the
bodies we parse by hand (``json_guard``) before FastAPI sees them.

Without it FastAPI reads a body of any size into memory, and a NUL or a value nested 300
deep would reach the database or the response encoder.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from nodeloom.api import json_guard
from nodeloom.api.body import read_limited

MAX_MODEL_BODY = 64 * 1024  # the largest of these bodies is a few hundred bytes


class GuardedRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler  # no body, or one the endpoint reads by hand (api/body.py)

        async def guarded(request: Request) -> Response:
            raw = await read_limited(request, MAX_MODEL_BODY)
            # FastAPI reads the body through request.body(), which returns this cache.
            request._body = raw
            if raw.strip():
                try:
                    value = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    # FastAPI answers invalid JSON itself (400, see api/problems.py), but its
                    # parser lets lone surrogates through.
                    json_guard.refuse_lone_surrogates(raw)
                else:
                    json_guard.check(raw, value)
            return await handler(request)

        return guarded
