"""The SDK's version and the check of a package's declared range against it."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

SDK_VERSION = "1.0.0"

_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+){0,2})\s*$")
_OPS: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}


def _parts(version: str) -> tuple[int, ...]:
    numbers = [int(p) for p in version.split(".")]
    return tuple(numbers + [0] * (3 - len(numbers)))


def sdk_range_problem(declared: object, version: str = SDK_VERSION) -> str | None:
    """Why ``declared`` (``">=1.0,<2"``) does not admit ``version``, or None when it does.

    Versions are compared as three numbers, a missing one counting as 0, so ``<2`` excludes
    2.0.0 and everything after it."""
    if not isinstance(declared, str) or not declared.strip():
        return "it declares no SDK range (NodePackage.sdk, for example '>=1.0,<2')"
    current = _parts(version)
    for clause in declared.split(","):
        match = _CLAUSE.match(clause)
        if match is None:
            return f"its SDK range {declared!r} is not of the form '>=1.0,<2'"
        op, bound = match.groups()
        if not _OPS[op](current, _parts(bound)):
            return f"it was built for SDK {declared} and this server offers SDK {version}"
    return None
