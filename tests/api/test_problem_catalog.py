"""The errors reference: every problem code the app can emit is in the catalog, served at
``/api/v1/problems/{code}`` (where problem ``type`` URIs point), generated into docs/errors.md,
and matched by one client exception class."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

import httpx

from nodeloom import errors as server_errors
from nodeloom.api import problems
from nodeloom.client import errors as client_errors
from nodeloom.problem_catalog import CATALOG, PROBLEMS
from tests.api.test_auth import assert_problem
from tests.conftest import User

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "nodeloom"


def _subclasses(cls: type[Any]) -> list[type[Any]]:
    found: list[type[Any]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _literal_codes(callee: str, position: int) -> set[str]:
    """String literals passed as argument ``position`` of ``callee(...)`` anywhere in src/
    (``problem_response(status, code, ...)``, ``protocol.error(code, ...)``)."""
    codes: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or len(node.args) <= position:
                continue
            arg = node.args[position]
            if ast.unparse(node.func) == callee and isinstance(arg, ast.Constant):
                codes.add(str(arg.value))
    return codes


def emittable_codes() -> dict[str, set[int]]:
    """Every problem code the app can answer with, and the statuses it comes with."""
    codes: dict[str, set[int]] = {}
    for cls in _subclasses(server_errors.ProblemError):
        codes.setdefault(cls.code, set()).add(cls.status)
    for status, code in problems._HTTP_CODES.items():
        codes.setdefault(code, set()).add(status)
    for code in _literal_codes("problem_response", 1) | _literal_codes("protocol.error", 0):
        codes.setdefault(code, set())
    return codes


class TestCatalog:
    def test_every_code_the_app_can_emit_is_listed_with_its_status(self) -> None:
        emitted = emittable_codes()
        assert {"invalid_graph", "internal_error", "method_not_allowed"} <= set(emitted)
        missing = set(emitted) - set(PROBLEMS)
        assert not missing, f"add these codes to nodeloom/problem_catalog.py: {missing}"
        for code, statuses in emitted.items():
            assert statuses <= {PROBLEMS[code].status}, (code, statuses)

    def test_nothing_listed_that_cannot_happen(self) -> None:
        assert set(PROBLEMS) <= set(emittable_codes())

    def test_every_entry_says_what_to_do(self) -> None:
        for problem in CATALOG:
            assert problem.meaning.endswith(".") and problem.remedy.endswith((".", ")"))
            assert 400 <= problem.status <= 599

    def test_one_client_exception_class_per_code(self) -> None:
        assert set(client_errors.BY_CODE) == set(PROBLEMS)
        for code, cls in client_errors.BY_CODE.items():
            assert cls.status == PROBLEMS[code].status
            server_class = next(
                (c for c in _subclasses(server_errors.ProblemError) if c.code == code), None
            )
            if server_class is not None and server_class is not server_errors.BadSignature:
                assert cls.__name__ == server_class.__name__

    def test_docs_errors_md_is_current(self) -> None:
        spec = importlib.util.spec_from_file_location(
            "gen_error_docs", ROOT / "scripts" / "gen_error_docs.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        current = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
        assert current == module.render(), "run: .venv/bin/python scripts/gen_error_docs.py"
        for problem in CATALOG:
            assert f"## {problem.code}\n" in current


class TestProblemPages:
    async def test_each_code_has_a_page(self, client: httpx.AsyncClient) -> None:
        for problem in CATALOG:
            r = await client.get(f"/api/v1/problems/{problem.code}")
            assert r.status_code == 200, r.text
            assert r.json() == problem.model_dump()
        r = await client.get("/api/v1/problems")
        assert [p["code"] for p in r.json()] == [p.code for p in CATALOG]

    async def test_a_browser_gets_html_that_needs_no_internet(
        self, client: httpx.AsyncClient
    ) -> None:
        accept = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
        r = await client.get("/api/v1/problems/insufficient_credits", headers=accept)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert "<code>required</code>" in r.text and "http" not in r.text.split("<body>")[1]
        r = await client.get("/api/v1/problems", headers=accept)
        assert r.text.count("<dt") == len(CATALOG)

    async def test_unknown_code_is_a_404_problem(self, client: httpx.AsyncClient) -> None:
        assert_problem(await client.get("/api/v1/problems/no_such_code"), 404, "not_found")

    async def test_type_uri_of_an_error_leads_to_its_page(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.get("/api/v1/workflows/nope", headers=owner.headers)
        body = assert_problem(r, 404, "not_found")
        assert body["type"] == "http://testserver/api/v1/problems/not_found"
        page = await client.get(str(body["type"]))
        assert page.json()["code"] == "not_found"

    async def test_framework_errors_use_catalog_codes(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        r = await client.delete("/api/v1/me", headers=owner.headers)
        body = assert_problem(r, 405, "method_not_allowed")
        assert body["type"].endswith("/api/v1/problems/method_not_allowed")


class TestInvalidGraphDetail:
    async def test_detail_counts_what_it_lists(
        self, client: httpx.AsyncClient, owner: User
    ) -> None:
        nodes = [
            {"id": f"n{i}", "type": "Nope", "position": {"x": 0, "y": 0}, "data": {}}
            for i in range(8)
        ]
        graph = {"nodes": nodes, "edges": [], "viewport": {"x": 0, "y": 0, "zoom": 1}}
        r = await client.post(
            "/api/v1/workflows", json={"name": "bad", "graph_json": graph}, headers=owner.headers
        )
        body = assert_problem(r, 400, "invalid_graph")
        assert len(body["errors"]) == 8
        detail = str(body["detail"])
        assert detail.startswith("The workflow is invalid (8 problems): ")
        assert detail.count("unknown node type") == 5
        assert detail.endswith("... and 3 more, all listed in errors.")

    async def test_one_problem_is_singular(self, client: httpx.AsyncClient, owner: User) -> None:
        r = await client.post("/api/v1/workflows", json={"name": "x"}, headers=owner.headers)
        detail = str(assert_problem(r, 400, "invalid_graph")["detail"])
        assert detail == "The workflow is invalid (1 problem): /graph_json: graph_json is required."
