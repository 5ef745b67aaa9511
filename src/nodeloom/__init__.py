"""Nodeloom: self-hostable workflow automation for generative-media pipelines.

``nodeloom.run(...)`` is the client's one-liner (``nodeloom.client.run``); it is imported on
first use, so the server never loads the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodeloom.version import __version__ as __version__

if TYPE_CHECKING:
    from nodeloom.client import run as run


def __getattr__(name: str) -> Any:
    if name == "run":
        from nodeloom.client import run

        return run
    raise AttributeError(f"module 'nodeloom' has no attribute {name!r}")
