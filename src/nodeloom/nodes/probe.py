"""``python -m nodeloom.nodes.probe module:attr``: import one node package's entry point in a
throwaway process, so that an import that hangs or crashes is found before the server
imports it (see nodes/packages.py). Exit status 0 when it imported."""

from __future__ import annotations

import sys

from nodeloom.nodes.packages import _load


def main() -> int:
    # The parent times the package's import from this byte on (packages._probe).
    sys.stdout.buffer.write(b".")
    sys.stdout.buffer.flush()
    _load(sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
