"""This server process as the others on the same host see it: a token, alive exactly as long
as the process holds an exclusive ``flock`` on ``<data_dir>/processes/<token>.lock``.

The kernel releases the lock the instant the process dies, however it dies, so another
process can tell a live owner from a dead one at once and without any clock: it tries to take
the lock. This is how processes sharing one SQLite file (one host by nature) know whose runs
they may adopt (dispatch/local.py) and whose scratch space they may remove (scratch.py).
Processes on several hosts use the job queue's worker heartbeats instead (dispatch/queue.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from pathlib import Path


class ProcessIdentity:
    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir / "processes"
        # The pid tells an operator which process it is; the random part, that it is not an
        # earlier process that had the same pid.
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._fd: int | None = None

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / f"{self.token}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.dir / f"{self.token}.lock").unlink()
            os.close(self._fd)
            self._fd = None

    def is_alive(self, token: str) -> bool:
        """Whether the process named by ``token`` still runs (on this host)."""
        if token == self.token:
            return True
        if not token or "/" in token or token.startswith("."):
            return False
        path = self.dir / f"{token}.lock"
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            path.unlink(missing_ok=True)  # its owner is gone; so is its lock file
            return False
        finally:
            os.close(fd)
