"""The gallery of public apps, for anyone: ``GET /api/v1/public/apps`` lists the published
apps whose owners made them ``public``, paged newest first, and ``/gallery`` is the page
that shows them (the visitor's small web entry, as an app's page). Each app is shown as its
page introduces it (title, description, cover, link), never its form, workflow or owner.
An app that is unpublished, made private or link-only, or deleted is gone from the next
read: the list is read from the apps table at each request, nothing is cached."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, HTMLResponse

from nodeloom.api.deps import CtxDep
from nodeloom.api.paging import PageDep
from nodeloom.api.routes.public_apps import cover_url
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.urls import public_base
from nodeloom.api.webapp import NO_CACHE, SECURITY_HEADERS, app_page
from nodeloom.schemas.apps import PublicAppCard
from nodeloom.store import apps as app_store

router = APIRouter(route_class=GuardedRoute, tags=["apps"])
page_router = APIRouter(route_class=GuardedRoute)


@router.get("/public/apps", response_model=list[PublicAppCard])
async def public_apps(request: Request, ctx: CtxDep, page: PageDep) -> list[dict[str, Any]]:
    """Public, published apps of every account, newest first; no credential needed. The
    next page is in the ``Link: <...>; rel="next"`` header."""
    rows = await ctx.db.read(lambda c: app_store.public_page(c, page.limit, page.cursor))
    base = public_base(ctx.settings.base_url, request.scope)
    return [
        {
            "slug": row.slug,
            "title": row.title,
            "description": row.description,
            "cover_url": cover_url(ctx, row),
            "url": f"{base}/apps/{row.slug}",
            "password_required": row.password_hash is not None,
        }
        for row in page.rows(rows)
    ]


@page_router.api_route("/gallery", methods=["GET", "HEAD"], include_in_schema=False)
async def gallery_page(ctx: CtxDep) -> Response:
    """The gallery's page: the visitor's entry (``app.html``), which reads the list itself."""
    headers = {**SECURITY_HEADERS, "Cache-Control": NO_CACHE}
    built = app_page(ctx.settings.web_dist_dir)
    if built is None:
        return HTMLResponse("<!doctype html><title>Apps</title>", headers=headers)
    return FileResponse(built, headers=headers)
