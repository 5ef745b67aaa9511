"""The SDK reference in docs/node-packages.md is what scripts/gen_sdk_docs.py renders."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_sdk_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location(
        "gen_sdk_docs", ROOT / "scripts" / "gen_sdk_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = (ROOT / "docs" / "node-packages.md").read_text(encoding="utf-8")
    assert module.START in page and module.END in page
    assert module.render(page) == page, "run: .venv/bin/python scripts/gen_sdk_docs.py"
    for name in ("NodePackage", "NodeContext", "run_node", "SDK_VERSION"):
        assert f"#### `{name}`" in page
