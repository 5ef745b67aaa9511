"""Node packages installed into this interpreter's environment with pip, as an operator would.

The examples are installed once for this test package (a fixture of ``package`` scope, so
they are uninstalled as soon as its last test is done and the rest of the suite sees the
built-in catalog); ``install`` is also for the packages a test module builds itself. pip's
build isolation fetches setuptools from the configured index: the one in the project's
environment is too old to build an editable wheel on its own."""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "node-packages"
WATERMARK = EXAMPLES / "nodeloom-watermark"
QRCODE = EXAMPLES / "nodeloom-qrcode"


def install(path: Path, *, deps: bool = False) -> None:
    """``pip install -e path``; with ``deps``, its dependencies from the index too."""
    no_deps = [] if deps else ["--no-deps"]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", *no_deps, "-e", str(path)],
        check=True,
        timeout=300,
    )
    # An editable install takes effect through a .pth file, read at interpreter start.
    site.addsitedir(sysconfig.get_paths()["purelib"])


def uninstall(name: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "uninstall", "-q", "-y", name], check=True, timeout=120
    )


@pytest.fixture(scope="package")
def watermark_installed() -> Iterator[Path]:
    install(WATERMARK)
    try:
        yield WATERMARK
    finally:
        uninstall("nodeloom-watermark")


@pytest.fixture(scope="package")
def qrcode_installed() -> Iterator[Path]:
    """The example that wraps a library from PyPI (qrcode), installed with it."""
    install(QRCODE, deps=True)
    try:
        yield QRCODE
    finally:
        uninstall("nodeloom-qrcode")
