"""The SDK's surface, its version check and its test helpers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nodeloom.sdk
from nodeloom.sdk import (
    SDK_VERSION,
    Cost,
    Input,
    Kind,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
)
from nodeloom.sdk._version import sdk_range_problem
from nodeloom.sdk.testing import TestContext, artifact, produced_bytes, run_node

SRC = Path(nodeloom.sdk.__file__).resolve().parents[1]


class TestVersionRange:
    @pytest.mark.parametrize("declared", [">=1.0,<2", ">=1", "==1.0.0", ">0.9, <1.1", "<=1.0"])
    def test_admits(self, declared: str) -> None:
        assert sdk_range_problem(declared, "1.0.0") is None

    @pytest.mark.parametrize("declared", [">=2", "<1", ">=0.1,<1", "!=1.0.0", ">1.0"])
    def test_excludes(self, declared: str) -> None:
        problem = sdk_range_problem(declared, "1.0.0")
        assert problem is not None and "this server offers SDK 1.0.0" in problem

    @pytest.mark.parametrize("declared", ["", "~=1.0", "1.0", ">=x", None, 3])
    def test_malformed_or_missing(self, declared: object) -> None:
        problem = sdk_range_problem(declared, "1.0.0")
        assert problem is not None and "this server offers" not in problem

    def test_the_version_is_semantic(self) -> None:
        major, minor, patch = SDK_VERSION.split(".")
        assert all(part.isdigit() for part in (major, minor, patch))


class _Count(NodeType):
    spec = NodeSpec(
        type="Count",
        version=1,
        category="text",
        title="Count",
        description="Counts the characters.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=Params,
        cost=Cost(credits=0),
    )

    async def run(self, ctx, params, inputs):  # type: ignore[no-untyped-def]
        await ctx.progress(0.5)
        (ctx.scratch_dir / "note").write_text("x")
        return Produced.text(str(len(inputs["text"].read_text())))


class TestHelpers:
    def test_run_node_gives_inputs_progress_and_scratch(self, tmp_path: Path) -> None:
        ctx = TestContext(tmp_path)
        text = artifact("héllo".encode(), "text/plain", tmp_path)
        produced = run_node(_Count(), {}, {"text": text}, tmp_path, context=ctx)
        assert produced_bytes(produced) == b"5"
        assert ctx.progress_reports == [0.5]
        assert (ctx.scratch_dir / "note").read_text() == "x"

    def test_a_required_input_must_be_given(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="'text' is required"):
            run_node(_Count(), {}, {}, tmp_path)


def _private(module: str) -> bool:
    """A module of ours that is not the SDK."""
    ours = module == "nodeloom" or module.startswith("nodeloom.")
    return ours and not (module == "nodeloom.sdk" or module.startswith("nodeloom.sdk."))


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and _private(node.module):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _private(alias.name)]
    return found


def test_the_examples_and_our_sdk_families_import_only_the_sdk() -> None:
    root = SRC.parents[1] / "examples" / "node-packages"
    families = [SRC / "nodes" / name for name in ("text_extra.py", "image_filters.py")]
    files = [*root.rglob("*.py"), *families]
    assert len(files) > len(families)
    assert {str(f): _private_imports(f) for f in files} == {str(f): [] for f in files}
