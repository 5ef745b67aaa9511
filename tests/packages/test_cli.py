"""``nodeloom nodes list`` and ``nodeloom nodes new``, run as the installed command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Installs node packages into the environment every process shares, which every other
# test's app would discover meanwhile: run alone, after the parallel part (ADR 0051).
pytestmark = pytest.mark.serial

NODELOOM = str(Path(sys.executable).with_name("nodeloom"))


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODELOOM_")}
    env.update({"NODELOOM_DATA_DIR": str(tmp_path)}, **extra)
    return env


def test_list_shows_each_type_with_its_package(watermark_installed: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [NODELOOM, "nodes", "list", "--json"],
        env=_env(tmp_path),
        capture_output=True,
        check=True,
        timeout=120,
    )
    rows = {row["type"]: row for row in json.loads(out.stdout)}
    assert rows["watermark.Watermark"] == {
        "type": "watermark.Watermark",
        "package": "nodeloom-watermark",
        "version": "0.1.0",
        "status": "available",
        "reason": None,
    }
    assert rows["ImageResize"]["package"] == "(built in)"


def test_list_shows_a_disabled_package(watermark_installed: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [NODELOOM, "nodes", "list", "--json"],
        env=_env(tmp_path, NODELOOM_DISABLED_NODE_PACKAGES="nodeloom-watermark"),
        capture_output=True,
        check=True,
        timeout=120,
    )
    rows = {row["type"]: row for row in json.loads(out.stdout)}
    assert "watermark.Watermark" not in rows
    assert rows["watermark.*"]["status"] == "disabled"
    assert "NODELOOM_DISABLED_NODE_PACKAGES" in rows["watermark.*"]["reason"]


def test_new_writes_a_package_whose_tests_pass(tmp_path: Path) -> None:
    target = tmp_path / "pkg"
    subprocess.run(
        [NODELOOM, "nodes", "new", "studio_fx", "--dir", str(target)],
        env=_env(tmp_path),
        check=True,
        timeout=60,
    )
    pyproject = (target / "pyproject.toml").read_text()
    assert 'name = "nodeloom-studio-fx"' in pyproject
    assert 'studio_fx = "nodeloom_studio_fx:package"' in pyproject
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=target,
        env={**_env(tmp_path), "PYTHONPATH": str(target / "src")},
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"2 passed" in result.stdout


def test_new_refuses_a_bad_name_and_a_used_directory(tmp_path: Path) -> None:
    bad = subprocess.run(
        [NODELOOM, "nodes", "new", "Bad-Name", "--dir", str(tmp_path / "x")],
        env=_env(tmp_path),
        capture_output=True,
        timeout=60,
    )
    assert bad.returncode == 2 and b"is not a namespace" in bad.stderr
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "file").write_text("mine")
    used = subprocess.run(
        [NODELOOM, "nodes", "new", "ok", "--dir", str(tmp_path / "used")],
        env=_env(tmp_path),
        capture_output=True,
        timeout=60,
    )
    assert used.returncode == 1 and (tmp_path / "used" / "file").read_text() == "mine"
