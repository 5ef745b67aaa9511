"""The web app and the API docs page, served by the same process as the API.

``make install`` builds ``web/`` into the package folder ``nodeloom/web_dist`` (not committed);
this module serves it at ``/``:

- files under ``/assets/`` carry a content hash in their names, so they are cached for a
  year (``immutable``), and the text ones are sent gzip-compressed to clients that take it
  (compressed once per process, api/compressed.py); ``index.html`` is ``no-cache``, so a new
  build is seen at once;
- any other GET path that is not a file is a client-side route: it gets ``index.html``
  (the SPA fallback), so reload and deep links work;
- nothing under ``/api/`` is ever answered from here (an unknown API path stays a
  problem+json 404), and the probes (``/healthz``, ``/readyz``, ``/metrics``) are routes
  registered before this one;
- every page carries a strict Content-Security-Policy (scripts and styles only from this
  origin, nothing inline), ``frame-ancestors 'none'`` and ``Referrer-Policy: no-referrer``.
  React sets element styles through the CSSOM, which the policy does not restrict.

Without a build (no Node.js on the machine) ``/`` answers a short page saying how to build
the UI; the API works either way. ``/api/v1/docs`` is Swagger UI from the
``swagger-ui-bundle-v2`` package, so it works offline and without Node.js too.
"""

from __future__ import annotations

import asyncio
import mimetypes
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from swagger_ui_bundle import swagger_ui_path

from nodeloom.api import compressed, methods
from nodeloom.errors import NotFound

DEFAULT_DIST = Path(__file__).resolve().parent.parent / "web_dist"
DOCS_PATH = "/api/v1/docs"
IMMUTABLE = "public, max-age=31536000, immutable"
NO_CACHE = "no-cache"
READ = ["GET", "HEAD"]
CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "media-src 'self' blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
_DOCS_ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}
_DOCS_HTML = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Nodeloom API</title>
<link rel="icon" type="image/png" href="{DOCS_PATH}/assets/favicon-32x32.png">
<link rel="stylesheet" href="{DOCS_PATH}/assets/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-openapi-url="/api/v1/openapi.json"></div>
<script src="{DOCS_PATH}/assets/swagger-ui-bundle.js"></script>
<script src="{DOCS_PATH}/assets/init.js"></script>
</body>
</html>
"""
# A file, not an inline script, so the page keeps the strict script-src.
_DOCS_INIT = """window.addEventListener("load", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.getAttribute("data-openapi-url"),
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: false,
  });
});
"""
_NOT_BUILT_HTML = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Nodeloom</title></head>
<body>
<h1>Nodeloom is running; its web app is not built</h1>
<p>The API works: it is at <code>/api/v1</code>, documented at
<a href="/api/v1/docs">/api/v1/docs</a>.</p>
<p>To get the web app, install Node.js (20 or newer) with npm, then run
<code>make install</code> (or <code>make run</code>) in the repository: it builds
<code>web/</code> into the package and this page becomes the app.</p>
</body>
</html>
"""


def app_page(dist: Path | None) -> Path | None:
    """The built page of workflow apps (``app.html``, its own small entry), if built."""
    page = (dist or DEFAULT_DIST).resolve() / "app.html"
    return page if page.is_file() else None


def embeddable_headers(frame_ancestors: list[str]) -> dict[str, str]:
    """The page's security headers, embeddable by exactly ``frame_ancestors`` (origins,
    checked when the app was saved): CSP ``frame-ancestors``, without X-Frame-Options
    (which cannot name origins). None given: nobody may embed it, as every other page."""
    headers = dict(SECURITY_HEADERS)
    if frame_ancestors:
        allowed = "frame-ancestors " + " ".join(frame_ancestors)
        headers["Content-Security-Policy"] = CSP.replace("frame-ancestors 'none'", allowed)
        del headers["X-Frame-Options"]
    return headers


async def _asset(found: Path, request: Request) -> Response:
    """A hashed file of the build: cached for a year, gzip-compressed when the client takes
    it and it is text (api/compressed.py)."""
    headers = {"Cache-Control": IMMUTABLE}
    packed = await asyncio.to_thread(compressed.gzipped, found)
    if packed is None:
        return FileResponse(found, headers=headers)
    headers["Vary"] = "Accept-Encoding"
    if not compressed.accepts_gzip(request.headers.get("accept-encoding")):
        return FileResponse(found, headers=headers)
    media_type = mimetypes.guess_type(found.name)[0] or "application/octet-stream"
    headers["Content-Encoding"] = "gzip"
    return Response(packed, media_type=media_type, headers=headers)


def _secured(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


def _inside(root: Path, relative: str) -> Path | None:
    """The file ``relative`` names under ``root``, or None (missing, or outside root)."""
    try:
        path = (root / relative).resolve()
    except (OSError, ValueError):
        return None
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


def install(app: FastAPI, dist: Path | None = None) -> None:
    """Add the docs page and the web app. Call after every API router is included: the
    app's catch-all route must come last."""
    root = (dist or DEFAULT_DIST).resolve()
    swagger = Path(str(swagger_ui_path))

    @app.api_route(DOCS_PATH, methods=READ, include_in_schema=False)
    async def docs_page() -> Response:
        return _secured(HTMLResponse(_DOCS_HTML, headers={"Cache-Control": NO_CACHE}))

    @app.api_route(DOCS_PATH + "/assets/{name}", methods=READ, include_in_schema=False)
    async def docs_asset(name: str) -> Response:
        if name == "init.js":
            return _secured(
                Response(
                    _DOCS_INIT, media_type="text/javascript", headers={"Cache-Control": NO_CACHE}
                )
            )
        if name not in _DOCS_ASSETS:
            raise NotFound("No such file.")
        return _secured(
            FileResponse(
                swagger / name,
                media_type=_DOCS_ASSETS[name],
                headers={"Cache-Control": "public, max-age=86400"},
            )
        )

    @app.api_route("/{path:path}", methods=READ, include_in_schema=False)
    async def web_app(path: str, request: Request) -> Response:
        if path == "api" or path.startswith("api/"):
            if methods.allowed(app.routes, request.url.path):
                # An API path that other methods take (a webhook's POST): 405 with Allow.
                raise StarletteHTTPException(405)
            raise NotFound(f"No route {request.url.path}.")
        index = root / "index.html"
        if not index.is_file():
            if path.startswith("assets/"):
                raise NotFound("No such file.")
            return _secured(HTMLResponse(_NOT_BUILT_HTML, headers={"Cache-Control": NO_CACHE}))
        if path and path != "index.html":
            found = _inside(root, path)
            if found is not None and path.startswith("assets/"):
                return _secured(await _asset(found, request))
            if found is not None:
                return _secured(FileResponse(found, headers={"Cache-Control": NO_CACHE}))
            if path.startswith("assets/"):
                raise NotFound("No such file.")
        return _secured(FileResponse(index, headers={"Cache-Control": NO_CACHE}))
