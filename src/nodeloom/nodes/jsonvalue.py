"""JSON values carried in text artifacts (``Kind.JSON``): parsing with limits, and the
check every json output passes before it becomes an artifact.

A JSON document is parsed where its node runs (a sandbox process, or inline for a value
known to be small): never a parse of unbounded size on the server's event loop. The
limits make a hostile document fail its node with a code of its own, never the process:
Python's parser raises ``RecursionError`` long before the stack ends, and the depth of
what it returns is then measured without recursion.
"""

from __future__ import annotations

import json
from typing import Any

from nodeloom.sdk._node import NodeFailure

MAX_JSON_BYTES = 8 * 1024 * 1024  # of one document parsed or produced
MAX_JSON_DEPTH = 64  # nested arrays and objects (the API refuses request bodies deeper too)


def depth(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        current, level = stack.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        level += 1
        deepest = max(deepest, level)
        if level > MAX_JSON_DEPTH:
            return level
        stack.extend((child, level) for child in children)
    return deepest


def check_depth(value: Any, what: str = "the JSON value") -> None:
    if depth(value) > MAX_JSON_DEPTH:
        raise NodeFailure(
            f"{what} nests arrays and objects more than {MAX_JSON_DEPTH} levels deep",
            "json_too_deep",
        )


def check_size(size: int, what: str = "the JSON text") -> None:
    if size > MAX_JSON_BYTES:
        raise NodeFailure(f"{what} is larger than {MAX_JSON_BYTES} bytes", "json_too_large")


def parse(text: str, what: str = "the input") -> Any:
    """``text`` as a JSON value; a NodeFailure ``invalid_json`` says where it went wrong
    (line, column and character position), ``json_too_large``/``json_too_deep`` when it is
    over the limits."""
    check_size(len(text.encode("utf-8", "surrogatepass")), f"{what} (JSON)")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NodeFailure(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno} "
            f"(character {exc.pos})",
            "invalid_json",
        ) from None
    except RecursionError:
        raise NodeFailure(
            f"{what} nests arrays and objects more than {MAX_JSON_DEPTH} levels deep",
            "json_too_deep",
        ) from None
    check_depth(value, what)
    return value


def dump(value: Any) -> str:
    """``value`` as compact JSON text, within the limits."""
    check_depth(value, "the JSON output")
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    check_size(len(text.encode("utf-8", "surrogatepass")), "the JSON output")
    return text


def as_text(value: Any) -> str:
    """A value where text is wanted: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else dump(value)
