"""Discovery of installed node packages and the rules that refuse one, seen through the real
app: a bad package is logged and left out, never a reason for the server not to start."""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from nodeloom.nodes.registry import build_registry
from nodeloom.settings import Settings
from tests.conftest import User
from tests.packages.conftest import install, uninstall
from tests.runs_helpers import create_workflow, e, execute, g, n, wait_for_run

# Installs node packages into the environment every process shares, which every other
# test's app would discover meanwhile: run alone, after the parallel part (ADR 0051).
pytestmark = pytest.mark.serial

BROKEN = "zz-nodeloom-test-broken"

_MODULES = {
    "hangs.py": "import time\n\ntime.sleep(3600)\n",
    "raises.py": "raise RuntimeError('boom at import')\n",
    "nothing.py": "package = 42\n",
    "common.py": """
        from nodeloom.sdk import (
            Cost, Input, Kind, NodePackage, NodeSpec, NodeType, Output, Params, Produced,
        )

        class Echo(NodeType):
            spec = NodeSpec(
                type="Echo", version=1, category="text", title="Echo", description="Echo.",
                inputs=(Input("text", Kind.TEXT),), output=Output(Kind.TEXT), params=Params,
                cost=Cost(credits=0),
            )

            async def run(self, ctx, params, inputs):
                return Produced(data=inputs["text"].read_bytes())
    """,
    "spy.py": """
        import functools
        import json
        import os
        import types

        from nodeloom.sdk import NodePackage, Produced
        from zz_broken.common import Echo

        class Spy(Echo):
            spec = Echo.spec.__class__(**{**Echo.spec.__dict__, "type": "Spy"})

            async def run(self, ctx, params, inputs):
                classes, strings = reach(ctx)
                seen = {
                    "context": sorted(n for n in dir(ctx) if not n.startswith("_")),
                    "environment": sorted(k for k in os.environ if k.startswith("NODELOOM_")),
                    "classes": sorted(classes),
                    "strings": sorted(strings),
                }
                return Produced(data=json.dumps(seen).encode())

        def reach(root):
            # What the context hands over: every object reachable from it through instance
            # attributes (private ones too), bound methods' objects, closures and
            # containers; not through modules, classes or a function's globals.
            classes, strings, seen, todo = set(), set(), set(), [root]
            while todo:
                obj = todo.pop()
                if id(obj) in seen or isinstance(obj, (type, types.ModuleType)):
                    continue
                seen.add(id(obj))
                if isinstance(obj, str):
                    strings.add(obj)
                    continue
                if isinstance(obj, (bytes, int, float, bool, type(None))):
                    continue
                classes.add(type(obj).__name__)
                if isinstance(obj, dict):
                    todo.extend([*obj.keys(), *obj.values()])
                elif isinstance(obj, (list, tuple, set, frozenset)):
                    todo.extend(obj)
                elif isinstance(obj, types.MethodType):
                    todo.extend([obj.__self__, obj.__func__])
                elif isinstance(obj, types.FunctionType):
                    todo.extend(c.cell_contents for c in obj.__closure__ or ())
                elif isinstance(obj, functools.partial):
                    todo.extend([obj.func, *obj.args, *obj.keywords.values()])
                else:
                    todo.extend(getattr(obj, "__dict__", {}).values())
                    for slot in getattr(type(obj), "__slots__", ()):
                        if hasattr(obj, slot):
                            todo.append(getattr(obj, slot))
            return classes, strings

        package = NodePackage(sdk=">=1.0,<2", nodes=[Spy()])
    """,
    "oldsdk.py": """
        from nodeloom.sdk import NodePackage
        from zz_broken.common import Echo

        package = NodePackage(sdk=">=0.1,<1", nodes=[Echo()])
    """,
    "dup.py": """
        from nodeloom.sdk import NodePackage
        from zz_broken.common import Echo

        package = NodePackage(sdk=">=1.0,<2", nodes=[Echo()])
    """,
}

_PYPROJECT = f"""
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{BROKEN}"
version = "0.0.1"

[project.entry-points."nodeloom.nodes"]
hangs = "zz_broken.hangs:package"
raises = "zz_broken.raises:package"
nothing = "zz_broken.nothing:package"
oldsdk = "zz_broken.oldsdk:package"
spy = "zz_broken.spy:package"
watermark = "zz_broken.dup:package"
Bad-Name = "zz_broken.dup:package"

[tool.setuptools.packages.find]
where = ["src"]
"""


@pytest.fixture(scope="module")
def broken_installed(
    watermark_installed: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    root = tmp_path_factory.mktemp("broken")
    (root / "pyproject.toml").write_text(_PYPROJECT)
    package = root / "src" / "zz_broken"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, text in _MODULES.items():
        (package / name).write_text(textwrap.dedent(text))
    install(root)
    try:
        yield
    finally:
        uninstall(BROKEN)


@pytest.fixture
def settings_overrides() -> dict[str, object]:
    return {"node_package_import_timeout": 3.0}


class TestRefusals:
    async def test_the_server_starts_and_lists_what_loaded(
        self,
        broken_installed: None,
        client: httpx.AsyncClient,
        owner: User,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        r = await client.get("/api/v1/node-types", headers=owner.headers)
        assert r.status_code == 200
        types = {t["type"]: t for t in r.json()}
        mark = types["watermark.Watermark"]
        assert mark["package"] == {
            "name": "nodeloom-watermark",
            "version": "0.1.0",
            "namespace": "watermark",
        }
        assert mark["available"] and mark["status"] == "available"
        assert types["ImageResize"]["package"] is None
        old = types["oldsdk.Echo"]
        assert old["status"] == "unavailable" and not old["available"]
        assert "built for SDK >=0.1,<1" in old["unavailable_reason"]
        assert "1.0.0" in old["unavailable_reason"]
        # Neither the packages whose import failed nor the ones refused have types.
        assert not {"hangs.Echo", "raises.Echo", "nothing.Echo", "Bad-Name.Echo"} & set(types)
        # The namespace already claimed by the watermark package stays its.
        assert [t for t in types if t.startswith("watermark.")] == ["watermark.Watermark"]

    def test_every_refusal_is_logged_with_its_reason(
        self, broken_installed: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        settings = Settings(data_dir=tmp_path, node_package_import_timeout=2.5)
        with caplog.at_level(logging.INFO, logger="nodeloom.nodes.packages"):
            registry = build_registry(settings=settings)
        by_namespace = {p.namespace: p for p in registry.packages if p.name == BROKEN}
        assert by_namespace["hangs"].status == "refused"
        assert "longer than 2.5 s" in (by_namespace["hangs"].reason or "")
        assert by_namespace["raises"].status == "refused"
        assert "boom at import" in (by_namespace["raises"].reason or "")
        assert "is not a nodeloom.sdk.NodePackage" in (by_namespace["nothing"].reason or "")
        assert by_namespace["oldsdk"].status == "incompatible"
        assert "already used by package nodeloom-watermark" in (
            by_namespace["watermark"].reason or ""
        )
        assert "namespace 'Bad-Name'" in (by_namespace["Bad-Name"].reason or "")
        logged = "\n".join(r.getMessage() for r in caplog.records)
        for namespace in ("hangs", "raises", "nothing", "oldsdk", "watermark", "Bad-Name"):
            assert f"(namespace {namespace}) not loaded" in logged
        assert "nodeloom-watermark 0.1.0 loaded: watermark.Watermark" in logged


class TestOperatorChoice:
    def test_allow_list_loads_only_the_named_packages(
        self, watermark_installed: Path, tmp_path: Path
    ) -> None:
        settings = Settings(data_dir=tmp_path, node_packages="some-other-package")  # type: ignore[arg-type]
        registry = build_registry(settings=settings)
        assert "watermark.Watermark" not in registry
        (info,) = [p for p in registry.packages if p.name == "nodeloom-watermark"]
        assert info.status == "disabled" and info.reason == "not in NODELOOM_NODE_PACKAGES"

    def test_a_disabled_package_is_not_loaded(
        self, watermark_installed: Path, tmp_path: Path
    ) -> None:
        settings = Settings(
            data_dir=tmp_path,
            node_packages="nodeloom-watermark",  # type: ignore[arg-type]
            disabled_node_packages="Nodeloom_Watermark",  # type: ignore[arg-type]
        )
        registry = build_registry(settings=settings)
        assert "watermark.Watermark" not in registry
        assert [p.status for p in registry.packages if p.name == "nodeloom-watermark"] == [
            "disabled"
        ]

    def test_allowed_by_name_it_loads(self, watermark_installed: Path, tmp_path: Path) -> None:
        settings = Settings(data_dir=tmp_path, node_packages="nodeloom_watermark")  # type: ignore[arg-type]
        assert "watermark.Watermark" in build_registry(settings=settings)

    def test_the_built_in_catalog_alone_has_no_packages(self, watermark_installed: Path) -> None:
        registry = build_registry()
        assert registry.packages == [] and "watermark.Watermark" not in registry


async def test_a_package_node_sees_only_its_own_context(
    broken_installed: None, client: httpx.AsyncClient, owner: User
) -> None:
    graph = g([n("in", "TextInput", key="text"), n("spy", "spy.Spy")], [e("in", "spy")])
    wf = await create_workflow(client, owner, graph)
    r = await execute(client, owner, wf, {"input": {"text": "x", "unwired": "UNWIRED-7f3a"}})
    assert r.status_code == 202, r.text
    run = await wait_for_run(client, owner, wf, r.json()["run_id"], timeout=60)
    assert run["status"] == "completed", run
    art = {nr["node_id"]: nr["artifact_id"] for nr in run["node_runs"]}["spy"]
    seen = (await client.get(f"/api/v1/artifacts/{art}", headers=owner.headers)).json()
    assert seen["context"] == [
        "limits",
        "node_id",
        "progress",
        "run_id",
        "scratch_dir",
        "to_thread",
    ]
    # The sandbox's environment names the packages to import, and nothing else of ours.
    assert seen["environment"] == ["NODELOOM_SANDBOX_NODE_PACKAGES"]
    # Nor is anything else reachable from the context: not the run's input beyond the
    # node's own, not the account, not the settings.
    assert not any("UNWIRED-7f3a" in text for text in seen["strings"]), seen["strings"]
    assert not any(owner.id in text for text in seen["strings"]), seen["strings"]
    assert "Settings" not in seen["classes"], seen["classes"]
    assert "_Context" not in seen["classes"], seen["classes"]
