"""Templates that only substitute values (``Hello {{ text }} from {{ input.city }}``) rendered
without Jinja, so they can run on the server's event loop instead of in a sandbox process.

Most TextTemplate nodes are like that, and for them the sandbox round trip was most of a
node's cost. Rendering one is a single pass over its parts whose output is capped as it
grows, so no such template can hold the loop: the hostile ones (loops, arithmetic, filters,
calls) are exactly those this parser refuses, and they still render in the sandbox.

``parse`` accepts only literal text and ``{{ name(.attr | ['key'] | [index])* }}`` with
``name`` being ``text`` or ``input``, in a source of at most ``MAX_INLINE_SOURCE``
characters; anything else (``{%``, ``{#``, filters, whitespace control, ``\\r``, indexes
Jinja would not read as integers, non-ASCII digits or spaces inside an expression) is None.
``render`` gives what Jinja gives for such a template, and raises ``Ambiguous`` when
Jinja's answer would depend on Python attributes (``input.items`` of a dict is its method)
or be an error (an attribute of an undefined value): the caller then renders it the Jinja
way, in the sandbox. tests/nodes/test_substitution.py checks the two
against each other.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeloom.sdk._node import NeedsSandbox, NodeFailure

NAMES = frozenset({"text", "input"})
# Longer sources are left to Jinja, in the sandbox: parsing is linear, but repeated for every
# node of every run (and of every save) it is time the event loop does not have, and a
# hostile graph can hold hundreds of templates of 100,000 characters. Shorter ones are
# parsed once (cached).
MAX_INLINE_SOURCE = 4096

# ASCII only: Unicode digits and spaces are Jinja's to judge. An index is written as Jinja
# reads an integer (no leading zeros).
_PATH = re.compile(
    r"""\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)
        (?P<steps>(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\s*(?:'[^'\\]*'|"[^"\\]*"|-?(?:0|[1-9][0-9]*))\s*\])*)\s*""",
    re.X | re.A,
)
_STEP = re.compile(
    r"""\.(?P<attr>[A-Za-z_][A-Za-z0-9_]*)|\[\s*(?:'(?P<sq>[^'\\]*)'|"(?P<dq>[^"\\]*)"|(?P<index>-?(?:0|[1-9][0-9]*)))\s*\]""",
    re.A,
)


class Ambiguous(NeedsSandbox):
    """Jinja's result would depend on more than the data; render with Jinja instead."""


@dataclass(frozen=True)
class Step:
    key: str | int
    attribute: bool  # ``.key`` (Jinja tries the attribute first) or ``[key]`` (item first)


@dataclass(frozen=True)
class Substitution:
    parts: tuple[str | tuple[str, tuple[Step, ...]], ...]


_UNDEFINED = object()


def parse(source: str) -> Substitution | None:
    if len(source) > MAX_INLINE_SOURCE:
        return None
    return _parse_cached(source)


@functools.lru_cache(maxsize=256)
def _parse_cached(source: str) -> Substitution | None:
    return _parse(source)


def _parse(source: str) -> Substitution | None:
    if "{%" in source or "{#" in source or "\r" in source:
        return None
    parts: list[str | tuple[str, tuple[Step, ...]]] = []
    position = 0
    # One pass with str.find (a non-greedy regex over "{{{{{{..." was quadratic: seconds
    # for a template of 40,000 characters, on the event loop).
    while (start := source.find("{{", position)) >= 0:
        end = source.find("}}", start + 2)
        if end < 0:  # an expression that never closes: Jinja's syntax error, not ours
            return None
        path = _PATH.fullmatch(source, start + 2, end)
        if path is None or path.group("name") not in NAMES:
            return None
        if start > position:
            parts.append(source[position:start])
        parts.append((path.group("name"), _steps(path.group("steps"))))
        position = end + 2
    if position < len(source):
        parts.append(source[position:])
    return Substitution(tuple(parts))


def _steps(text: str) -> tuple[Step, ...]:
    steps = []
    for step in _STEP.finditer(text):
        if step.group("attr") is not None:
            steps.append(Step(step.group("attr"), attribute=True))
        elif step.group("index") is not None:
            steps.append(Step(int(step.group("index")), attribute=False))
        else:
            key = step.group("sq") if step.group("sq") is not None else step.group("dq")
            steps.append(Step(key, attribute=False))
    return tuple(steps)


def render(template: Substitution, variables: Mapping[str, Any], max_output: int) -> str:
    out: list[str] = []
    size = 0
    for part in template.parts:
        if isinstance(part, str):
            piece = part
        else:
            name, steps = part
            value = _resolve(variables.get(name, _UNDEFINED), steps)
            piece = "" if value is _UNDEFINED else str(value)
        size += len(piece)
        if size > max_output:
            raise NodeFailure(f"template output exceeds {max_output} characters")
        out.append(piece)
    return "".join(out)


def _resolve(value: Any, steps: tuple[Step, ...]) -> Any:
    for step in steps:
        if value is _UNDEFINED:
            raise Ambiguous  # Jinja raises UndefinedError here; let it say so
        value = _step(value, step)
    return value


_PLAIN = (str, int, float, bool, type(None), list)


def _step(value: Any, step: Step) -> Any:
    key = step.key
    if isinstance(value, dict):
        if isinstance(key, str) and hasattr(value, key):
            raise Ambiguous  # ``.items`` / ``['items']``: Jinja may return the method
        return value.get(key, _UNDEFINED) if isinstance(key, str) else _UNDEFINED
    if isinstance(value, list | str) and isinstance(key, int) and not step.attribute:
        try:
            return value[key]
        except IndexError:
            return _UNDEFINED
    if isinstance(value, _PLAIN) and isinstance(key, str):
        if hasattr(value, key):
            raise Ambiguous
        return _UNDEFINED
    raise Ambiguous
