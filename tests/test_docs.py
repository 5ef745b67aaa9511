"""The docs stand alone: they name no document outside the repository, and every repository
path they mention exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "examples" / "README.md"]
PAGES += sorted((ROOT / "docs").rglob("*.md"))
SOURCES = sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))
OUTSIDE = re.compile(r"SPEC §|seed §|the seed\b|\bSPEC\.md|STYLE\.md|PITFALLS\.md|shared/")
REPO_PATH = re.compile(r"`((?:docs|src|tests|scripts|examples|bench)/[\w./-]+)`")


def test_nothing_cites_documents_outside_the_repository() -> None:
    for path in PAGES + SOURCES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not OUTSIDE.search(line), f"{path.relative_to(ROOT)}:{number}: {line}"


def test_repository_paths_in_the_docs_exist() -> None:
    for page in PAGES:
        for match in REPO_PATH.finditer(page.read_text(encoding="utf-8")):
            target = match.group(1).split("::")[0].rstrip(".")
            assert (ROOT / target).exists(), f"{page.relative_to(ROOT)} names {target}"


def test_the_module_map_matches_the_tree() -> None:
    """docs/architecture.md's module map names every module of the package, with its
    docstring's first sentence; regenerate with scripts/gen_module_map.py."""
    spec = importlib.util.spec_from_file_location(
        "gen_module_map", ROOT / "scripts" / "gen_module_map.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.undocumented() == [], "every module says what it is in its docstring"
    assert module.current() == module.render(), "run: .venv/bin/python scripts/gen_module_map.py"
