"""A file received whole from a client (api/uploads.py) or fetched for a run input."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class ReceivedFile:
    """A file received whole: where it is, its size and sha256, its first bytes."""

    path: Path
    field: str
    filename: str | None
    size: int = 0
    sha256: str = ""
    head: bytes = b""
