"""The launcher (tests/launcher.py) forks commands for the suite instead of starting
interpreters: a forked command must answer exactly as the installed entry point does, and
its exit, a signal included, must come back as ``subprocess`` reports it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import launcher
from tests.server import ServerProcess

NODELOOM = str(Path(sys.executable).parent / "nodeloom")


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["no-such-command"],
        ["accounts", "list"],
        ["workflows", "list", "--url", "http://127.0.0.1:9", "--api-key", "nlk_x"],
    ],
)
def test_a_forked_command_answers_as_the_entry_point_does(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "NODELOOM_DATA_DIR": str(tmp_path), "NODELOOM_CONFIG_DIR": str(tmp_path)}
    real = subprocess.run(
        [NODELOOM, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    forked = launcher.run(args, env, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )


def test_the_environment_and_stdin_are_the_ones_given(tmp_path: Path) -> None:
    env = {**os.environ, "NODELOOM_DATA_DIR": str(tmp_path / "given")}
    done = launcher.run(
        ["accounts", "create", "--email", "a@example.com", "--password-stdin"],
        env,
        stdin="correct horse battery\n",
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "given").is_dir()  # the database went where this environment said
    listed = launcher.run(["accounts", "list"], env)
    assert "a@example.com" in listed.stdout


def test_a_killed_server_reports_the_signal(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path)
    server.start()
    assert server.proc is not None and server.proc.poll() is None
    server.kill()
    assert server.proc.returncode == -signal.SIGKILL
