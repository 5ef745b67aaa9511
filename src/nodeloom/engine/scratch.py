"""Scratch space for node executions: ``<data>/tmp/<process token>/node-<id>``.

Each server process owns one folder, named by its token (engine/process.py). A process
killed with SIGKILL cannot clean up after itself, so every process, when it starts, removes
the folders of processes that are no longer alive — never those of a live process sharing
the data directory.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from nodeloom.engine.process import ProcessIdentity


class ScratchSpace:
    def __init__(self, data_dir: Path, identity: ProcessIdentity) -> None:
        self.base = data_dir / "tmp"
        self.identity = identity
        self.root = self.base / identity.token

    def open(self) -> Path:
        self.base.mkdir(parents=True, exist_ok=True)
        self.sweep()
        self.root.mkdir(mode=0o700, exist_ok=True)
        return self.root

    def node_dir(self) -> Path:
        """A fresh path for one node execution; created by whoever first writes to it."""
        return self.root / f"node-{uuid.uuid4().hex}"

    def sweep(self) -> int:
        """Remove what dead processes left behind; the number of entries removed."""
        removed = 0
        for entry in self.base.iterdir():
            if entry.is_dir() and self.identity.is_alive(entry.name):
                continue
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed += 1
        return removed

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
