"""The API's routes, assembled once per process and shared by every app ``create_app`` builds.

Including a router is cheap, but FastAPI (0.165) builds an included route's effective form
(its prefixed path, its dependency graph solved from the endpoint's signature, its body and
response fields as pydantic adapters) lazily, once per inclusion: each new app paid it again
on its first request or in ``hot.derive``, about 0.2 s of CPU for our ~90 routes, which a
test suite building an app per test paid ~2,000 times. The route objects made here are
included into a router of our own, never into an app, so they hold no reference to one
and each app's router lists the same objects: their effective forms are built once and
reused by every app of the process (FastAPI builds them under a lock).

Sharing is safe because a route carries nothing of an app: every endpoint and dependency
reads the settings and services of the app that received the request
(``request.app.state.ctx``, api/deps.py), and the exception handlers, middleware and
lifespan stay each app's own. What an app cannot have with shared routes is
``app.dependency_overrides`` (the routes' provider is this router, which has none); the
code uses none. Routes that do close over an app or its settings (the web app's, api/
webapp.py) are added by ``create_app`` to each app after these.
"""

from __future__ import annotations

import functools

from fastapi import APIRouter
from starlette.routing import BaseRoute

from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routes import (
    app_gallery,
    approvals,
    apps,
    artifacts,
    assets,
    auth,
    callbacks,
    credential_servers,
    credentials,
    events,
    health,
    keys,
    node_types,
    operator,
    problem_types,
    provider_hooks,
    public_apps,
    runs,
    schedules,
    tus,
    versions,
    webhooks,
    workflows,
)

API_PREFIX = "/api/v1"


@functools.cache
def api_routes() -> tuple[BaseRoute, ...]:
    """The routes of every router, in matching order (``/public/apps`` before ``/{slug}``).
    The router holding them mirrors what the app's own router would pass down: the app's
    default response class; FastAPI's defaults for everything else."""
    router = APIRouter(default_response_class=OrjsonResponse)
    router.include_router(health.router)
    for module in (auth, keys, workflows, versions, runs, artifacts, webhooks, events, node_types):
        router.include_router(module.router, prefix=API_PREFIX)
    for module in (assets, tus, schedules, callbacks, credentials, credential_servers):
        router.include_router(module.router, prefix=API_PREFIX)
    router.include_router(provider_hooks.router, prefix=API_PREFIX)
    for module in (problem_types, approvals, apps, app_gallery, operator, public_apps):
        router.include_router(module.router, prefix=API_PREFIX)
    router.include_router(public_apps.page_router)
    router.include_router(app_gallery.page_router)
    return tuple(router.routes)
