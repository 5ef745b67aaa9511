"""Gzip for the web build's hashed files (``/assets/``), compressed once and kept.

A workflow app's page is opened on phones: its scripts are three times smaller gzipped (the
React chunk 220 kB -> 68 kB), and nothing in front of ``nodeloom serve`` may compress for
it. The files under ``/assets/`` never change under a name (the name carries a hash of the
content), so each is compressed on its first request and the bytes are kept for the life of
the process: a build's text files are well under a megabyte gzipped in all. Only text types
are compressed; images and fonts are compressed already. Nothing else is: API answers are
small or streamed, and compressing a stream (Server-Sent Events) would hold its frames.
"""

from __future__ import annotations

import gzip
import threading
from pathlib import Path

MIN_SIZE = 1024  # below a packet, compressing saves nothing a visitor would notice
TEXT_SUFFIXES = {".js", ".mjs", ".css", ".svg", ".json", ".html", ".txt", ".map", ".wasm"}
LEVEL = 6
_kept: dict[tuple[str, int, int], bytes] = {}
_lock = threading.Lock()


def accepts_gzip(accept_encoding: str | None) -> bool:
    """The client takes gzip (``Accept-Encoding``, a ``q=0`` refusal respected)."""
    for part in (accept_encoding or "").split(","):
        name, _, params = part.strip().partition(";")
        if name.strip().lower() in ("gzip", "*"):
            q = params.strip().removeprefix("q=").strip() if "q=" in params else "1"
            try:
                return float(q) > 0
            except ValueError:
                return False
    return False


def gzipped(path: Path) -> bytes | None:
    """The file's bytes gzip-compressed, or None when it is not worth it (not text, small,
    or not smaller compressed). Kept by path, size and modification time, so a file that a
    new build replaced under the same name is compressed again."""
    if path.suffix.lower() not in TEXT_SUFFIXES:
        return None
    stat = path.stat()
    if stat.st_size < MIN_SIZE:
        return None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _lock:
        kept = _kept.get(key)
    if kept is None:
        raw = path.read_bytes()
        kept = gzip.compress(raw, LEVEL, mtime=0)
        if len(kept) >= len(raw):
            kept = b""
        with _lock:
            _kept[key] = kept
    return kept or None
