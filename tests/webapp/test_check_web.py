"""scripts/check_web.sh on a machine without npm: CI must fail (a runner without Node.js never
reports a web app it did not check), a plain machine passes but says what it skipped. npm is
hidden by running the script with a PATH that holds only bash and the tools it calls."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_web.sh"


@pytest.fixture
def no_npm_path(tmp_path: Path) -> str:
    """A PATH with bash and dirname, and no npm."""
    for tool in ("bash", "dirname"):
        found = shutil.which(tool)
        assert found is not None
        (tmp_path / tool).symlink_to(found)
    return str(tmp_path)


def _run(path: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "NODELOOM_REQUIRE_SERVICES")}
    return subprocess.run(
        [shutil.which("bash") or "bash", str(SCRIPT)],
        env={**base, "PATH": path, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    "env",
    [{"CI": "true"}, {"CI": "1"}, {"NODELOOM_REQUIRE_SERVICES": "1"}],
    ids=["CI=true", "CI=1", "NODELOOM_REQUIRE_SERVICES=1"],
)
def test_ci_without_npm_fails(no_npm_path: str, env: dict[str, str]) -> None:
    done = _run(no_npm_path, **env)
    assert done.returncode == 1
    assert "npm is required" in done.stderr


@pytest.mark.parametrize("env", [{}, {"CI": "false"}], ids=["no CI", "CI=false"])
def test_a_plain_machine_without_npm_says_what_it_skipped(
    no_npm_path: str, env: dict[str, str]
) -> None:
    done = _run(no_npm_path, **env)
    assert done.returncode == 0
    assert "SKIPPED" in done.stderr
    for check in ("ESLint", "Prettier", "TypeScript", "Vitest"):
        assert check in done.stderr
