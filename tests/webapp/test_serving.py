"""Serving the built web app and the API docs: caching, SPA fallback, never shadowing the API,
security headers, and the page shown when the app has not been built."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from nodeloom.api.app import create_app
from nodeloom.settings import Settings
from tests.api.test_auth import assert_problem

INDEX = '<!doctype html><html><head><script type="module" src="/assets/app-3f9a1c.js"></script></head><body><div id="root"></div></body></html>'  # noqa: E501

BIG_SCRIPT = "".join(f"export const name{i} = 'value {i}';\n" for i in range(400))


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    root = tmp_path / "dist"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text(INDEX)
    (root / "assets" / "app-3f9a1c.js").write_text("console.log('app');")
    (root / "assets" / "react-77aa01.js").write_text(BIG_SCRIPT)
    (root / "assets" / "photo-5e5e5e.png").write_bytes(b"\x89PNG" + bytes(range(256)) * 20)
    (root / "favicon.svg").write_text("<svg/>")
    (tmp_path / "secret.txt").write_text("outside the bundle")
    return root


@pytest.fixture
def settings_overrides(dist: Path) -> dict[str, object]:
    return {"web_dist_dir": dist}


def assert_secured(r: httpx.Response) -> None:
    csp = r.headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["script-src"] == "'self'"  # no 'unsafe-inline', no CDN
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["default-src"] == "'self'"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["x-content-type-options"] == "nosniff"


class TestBuiltApp:
    async def test_index_is_never_cached_and_secured(self, client: httpx.AsyncClient) -> None:
        r = await client.get("/")
        assert r.status_code == 200 and r.text == INDEX
        assert r.headers["content-type"].startswith("text/html")
        assert r.headers["cache-control"] == "no-cache"
        assert_secured(r)
        head = await client.head("/workflows")
        assert head.status_code == 200 and head.headers["cache-control"] == "no-cache"

    async def test_hashed_assets_are_immutable(self, client: httpx.AsyncClient) -> None:
        r = await client.get("/assets/app-3f9a1c.js")
        assert r.status_code == 200 and r.text == "console.log('app');"
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert "javascript" in r.headers["content-type"]
        assert (await client.get("/favicon.svg")).headers["cache-control"] == "no-cache"

    @pytest.mark.parametrize(
        "path", ["/workflows", "/workflows/0b6c/runs", "/profile", "/runs/a/b", "/setup"]
    )
    async def test_client_routes_get_the_app(self, client: httpx.AsyncClient, path: str) -> None:
        r = await client.get(path)
        assert r.status_code == 200 and r.text == INDEX
        assert r.headers["cache-control"] == "no-cache"

    async def test_text_assets_are_sent_gzipped_to_clients_that_take_it(
        self, client: httpx.AsyncClient
    ) -> None:
        r = await client.get("/assets/react-77aa01.js", headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
        assert r.text == BIG_SCRIPT  # httpx decodes it
        assert int(r.headers["content-length"]) < len(BIG_SCRIPT) / 3
        assert r.headers["vary"] == "Accept-Encoding"
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert "javascript" in r.headers["content-type"]
        assert_secured(r)
        again = await client.get("/assets/react-77aa01.js", headers={"Accept-Encoding": "gzip"})
        assert again.content == r.content  # kept, the same bytes
        for refused in ("identity", "gzip;q=0", "br;q=1, gzip;q=0", ""):
            plain = await client.get(
                "/assets/react-77aa01.js", headers={"Accept-Encoding": refused}
            )
            assert "content-encoding" not in plain.headers, refused
            assert plain.text == BIG_SCRIPT and plain.headers["vary"] == "Accept-Encoding"
        head = await client.head("/assets/react-77aa01.js", headers={"Accept-Encoding": "gzip"})
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-encoding"] == "gzip"

    async def test_small_or_binary_assets_are_sent_as_they_are(
        self, client: httpx.AsyncClient
    ) -> None:
        for path in ("/assets/app-3f9a1c.js", "/assets/photo-5e5e5e.png"):
            r = await client.get(path, headers={"Accept-Encoding": "gzip"})
            assert r.status_code == 200 and "content-encoding" not in r.headers, path
            assert "vary" not in r.headers
        page = await client.get("/", headers={"Accept-Encoding": "gzip"})
        assert "content-encoding" not in page.headers

    async def test_missing_asset_is_404_not_the_app(self, client: httpx.AsyncClient) -> None:
        assert (await client.get("/assets/app-000000.js")).status_code == 404

    async def test_files_outside_the_bundle_are_not_served(self, client: httpx.AsyncClient) -> None:
        r = await client.get("/..%2Fsecret.txt")
        assert "outside the bundle" not in r.text
        r = await client.get("/assets/..%2F..%2Fsecret.txt")
        assert "outside the bundle" not in r.text

    async def test_api_and_probes_are_not_shadowed(self, client: httpx.AsyncClient) -> None:
        assert_problem(await client.get("/api/v1/nothing-here"), 404, "not_found")
        assert_problem(await client.get("/api/v2/workflows"), 404, "not_found")
        assert_problem(await client.get("/api"), 404, "not_found")
        assert_problem(await client.get("/api/v1/workflows"), 401, "unauthorized")
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).json() == {"status": "ready"}
        assert (await client.get("/metrics")).headers["content-type"].startswith("text/plain")
        assert (await client.get("/api/v1/openapi.json")).json()["openapi"].startswith("3.")

    async def test_the_app_is_not_in_the_api_document(self, client: httpx.AsyncClient) -> None:
        paths = (await client.get("/api/v1/openapi.json")).json()["paths"]
        assert "/{path}" not in paths and "/api/v1/docs" not in paths


class TestDocs:
    async def test_docs_load_swagger_ui_from_this_server(self, client: httpx.AsyncClient) -> None:
        r = await client.get("/api/v1/docs")
        assert r.status_code == 200
        assert_secured(r)
        assert "<script>" not in r.text  # every script is a file (strict CSP)
        assert "http" not in r.text  # nothing from a CDN
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "init.js"):
            assert f"/api/v1/docs/assets/{asset}" in r.text
            a = await client.get(f"/api/v1/docs/assets/{asset}")
            assert a.status_code == 200 and len(a.content) > 100
        bundle = await client.get("/api/v1/docs/assets/swagger-ui-bundle.js")
        assert "SwaggerUIBundle" in bundle.text
        assert (await client.get("/api/v1/docs/assets/index.html")).status_code == 404


class TestNotBuilt:
    @pytest.fixture
    async def bare_client(
        self, settings: Settings, tmp_path: Path
    ) -> AsyncIterator[httpx.AsyncClient]:
        settings.web_dist_dir = tmp_path / "no-build-here"
        app: FastAPI = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
                yield c

    async def test_root_explains_how_to_build(self, bare_client: httpx.AsyncClient) -> None:
        r = await bare_client.get("/")
        assert r.status_code == 200
        assert "make install" in r.text and "Node.js" in r.text
        assert_secured(r)
        assert (await bare_client.get("/workflows")).text == r.text
        assert (await bare_client.get("/assets/app.js")).status_code == 404
        # The API and its docs work without the web app.
        assert (await bare_client.get("/api/v1/docs")).status_code == 200
        assert (await bare_client.get("/api/v1/auth/setup")).status_code == 200
