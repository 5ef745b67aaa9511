"""The API's OpenAPI document, built once per process and answered by every app.

FastAPI's document, completed with what it cannot see: bodies parsed by hand, the events'
schemas, the problems each operation answers (api/problems.py).

The document depends only on the routes it describes, and every app of a process documents
the same shared routes (api/route_table.py; an app's own routes, the web app's, are left out
of it), so the first app to be asked builds it and the others answer the same one. It is
shared: read it, never change it (FastAPI hands out its cached document the same way). An
app with a documented route of its own gets a document of its own instead.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute

from nodeloom.api import problems
from nodeloom.api.route_table import api_routes
from nodeloom.schemas.approvals import ApprovalDecision
from nodeloom.schemas.events import openapi_schemas as event_schemas
from nodeloom.schemas.runs import ExecuteRequest, RetryRequest
from nodeloom.schemas.workflows import RestoreRequest, WorkflowCreate, WorkflowUpdate

TITLE = "Nodeloom"
DESCRIPTION = "Workflow automation for generative-media pipelines."
# Routes that read their body by hand still describe it (with the approvals' decision body).
_MANUAL_BODIES = (
    WorkflowCreate,
    WorkflowUpdate,
    ExecuteRequest,
    RestoreRequest,
    RetryRequest,
    ApprovalDecision,
)


def install(app: FastAPI) -> None:
    """Answer ``app.openapi()`` (and so ``/api/v1/openapi.json``) with the API's document."""

    def openapi() -> dict[str, Any]:
        if not app.openapi_schema:
            shared = api_routes()
            own = [r for r in app.routes if not any(r is s for s in shared) and _documented(r)]
            app.openapi_schema = (
                _build(app.version, app.routes) if own else _shared_document(app.version)
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _build(version: str, routes: Sequence[BaseRoute]) -> dict[str, Any]:
    """The document of ``routes``."""
    schema = get_openapi(title=TITLE, version=version, description=DESCRIPTION, routes=routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in _MANUAL_BODIES:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in model_schema.pop("$defs", {}).items():
            components.setdefault(name, sub)
        components[model.__name__] = model_schema
    for name, sub in event_schemas().items():
        components.setdefault(name, sub)
    problems.document_problems(schema)
    return schema


@functools.cache
def _shared_document(version: str) -> dict[str, Any]:
    return _build(version, api_routes())


def _documented(route: BaseRoute) -> bool:
    """Whether ``route`` (an included router: any of its routes) appears in the document."""
    return any(getattr(c, "include_in_schema", False) for c in iter_route_contexts([route]))
