"""Finding the output a node keeps in what a hosted model returned: Replicate's ``output``
(a URL, a list of URLs, a string, a list of strings that make a text...) or fal's result
object (``{"images": [{"url": ...}]}``, ``{"video": {"url": ...}}``...)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from nodeloom.nodes.adapters import policy
from nodeloom.sdk._node import Kind, NodeFailure, Produced

PATH_MAX = 200


def _is_file(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://", "data:"))


def files(value: Any) -> Iterator[str]:
    """Every file URL in ``value``, in order: a URL string, or the ``url`` of an object
    (fal's ``File``), anywhere in lists and objects."""
    if isinstance(value, str) and _is_file(value):
        yield value
    elif isinstance(value, dict):
        url = value.get("url")
        if isinstance(url, str) and _is_file(url):
            yield url
            return
        for item in value.values():
            yield from files(item)
    elif isinstance(value, list):
        for item in value:
            yield from files(item)


def at_path(value: Any, path: str) -> Any:
    """``value`` at a dotted ``path`` (``images.0.url``); NodeFailure when it is not there."""
    current = value
    for part in path.split("."):
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            raise NodeFailure(f"the model's output has nothing at {path!r}")
    return current


def _text(value: Any) -> str | None:
    """The text a model answered, when it answered text rather than a file."""
    if isinstance(value, str) and not _is_file(value):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if not any(_is_file(v) for v in value):
            return "".join(value)  # a language model's tokens
    if isinstance(value, dict):
        for key in ("text", "output", "transcription"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return None


async def pick_output(
    ctx: policy.ProviderContext,
    api: policy.Provider,
    output: Any,
    kind: Kind,
    index: int = 0,
    path: str = "",
) -> Produced:
    """The ``index``-th file of ``output`` (at ``path`` in it, if given) as an artifact of
    ``kind``; for a text node, the text itself when the model answered text."""
    value = at_path(output, path) if path else output
    if kind == Kind.TEXT:
        text = _text(value)
        if text is not None:
            return Produced.text(text)
    found = list(files(value))
    if not found:
        if kind == Kind.TEXT and value is not None:
            return Produced.text(json.dumps(value, ensure_ascii=False))
        raise policy.ProviderError(f"{api.name} returned no file: {json.dumps(value)[:200]}")
    if index >= len(found):
        raise NodeFailure(f"output_index is {index} but {api.name} returned {len(found)} file(s)")
    await policy.report(ctx, 0.99)
    return await api.download(ctx, found[index], kind)
