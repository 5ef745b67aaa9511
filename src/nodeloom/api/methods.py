"""Which methods the API answers at a path, for a 405's ``Allow`` header.

Starlette answers 405 from the first route whose path matched, so ``Allow`` named only that
route's methods (``GET`` on ``/workflows``, which also takes ``POST``), and a path whose
only routes take other methods than GET was answered by the web app's catch-all GET route
as an unknown API path (404 on ``GET /webhooks/<token>``). Both ask here instead: every
API route whose path matches, whatever its method.
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute

API_ROOT = "/api/"


def allowed(routes: Iterable[BaseRoute], path: str) -> list[str]:
    """The methods of the API routes matching ``path``, sorted; empty when none does (the
    web app's catch-all GET route is not an API route)."""
    methods: set[str] = set()
    if not path.startswith(API_ROOT):
        return []
    # FastAPI includes routers lazily: their routes are reached through route contexts.
    for route in iter_route_contexts(list(routes)):
        regex, taken = getattr(route, "path_regex", None), route.methods
        if regex is not None and taken and route.path != "/{path:path}" and regex.match(path):
            methods |= taken
    return sorted(methods)
