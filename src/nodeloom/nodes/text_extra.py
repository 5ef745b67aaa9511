"""More text nodes: transform, join, split-and-pick, JSON extract (JMESPath), counting.

Written against the public SDK only (``nodeloom.sdk``), as a node package would be; they stay
built in. A test checks they import nothing else of ``nodeloom``.

User-supplied regular expressions run on the ``regex`` module with a timeout, because a
pathological pattern (catastrophic backtracking) would otherwise pin a worker thread forever;
the standard ``re`` module cannot be interrupted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

import jmespath
import regex  # type: ignore[import-untyped]
from jmespath.exceptions import JMESPathError
from pydantic import Field

from nodeloom.sdk import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeType,
    Params,
    Produced,
    input_text,
    spec_family,
)

REGEX_TIMEOUT = 1.0  # seconds
MAX_OUTPUT_CHARS = 10_000_000


_spec = spec_family("text", Kind.TEXT, Cost(credits=0))


def _compile(pattern: str, ignore_case: bool) -> Any:
    try:
        return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
    except regex.error as exc:
        raise NodeFailure(f"bad regular expression: {exc}") from exc


def _produce(text: str) -> Produced:
    if len(text) > MAX_OUTPUT_CHARS:
        raise NodeFailure(f"the result exceeds {MAX_OUTPUT_CHARS:,} characters", "limit_exceeded")
    return Produced.text(text)


Operation = Literal[
    "upper", "lower", "title", "capitalize", "trim", "collapse_whitespace", "replace",
    "regex_replace", "regex_extract", "truncate", "reverse",
]  # fmt: skip


class TextTransformParams(Params):
    operation: Operation = Field(default="trim", description="What to do with the text.")
    find: str = Field(default="", max_length=10_000, description="Text or pattern to find.")
    replace: str = Field(
        default="", max_length=10_000, description="Replacement (regex: \\1 or \\g<name>)."
    )
    ignore_case: bool = Field(default=False, description="Case-insensitive find.")
    max_length: Annotated[int, Field(ge=0, le=10_000_000)] = Field(
        default=280, description="truncate: the longest result, an ellipsis included."
    )


def transform(text: str, params: TextTransformParams) -> str:
    op = params.operation
    simple: dict[str, Callable[[str], str]] = {
        "upper": str.upper,
        "lower": str.lower,
        "title": str.title,
        "capitalize": str.capitalize,
        "trim": str.strip,
        "reverse": lambda s: s[::-1],
        "collapse_whitespace": lambda s: " ".join(s.split()),
    }
    if op in simple:
        return simple[op](text)
    if op == "truncate":
        if len(text) <= params.max_length:
            return text
        return text[: max(0, params.max_length - 1)].rstrip() + "…"
    if op == "replace" and not params.ignore_case:
        return text.replace(params.find, params.replace) if params.find else text
    pattern = regex.escape(params.find) if op == "replace" else params.find
    if not pattern:
        raise NodeFailure("set `find` to the pattern to look for")
    compiled = _compile(pattern, params.ignore_case)
    try:
        if op == "regex_extract":
            return "\n".join(m.group(0) for m in compiled.finditer(text, timeout=REGEX_TIMEOUT))
        if op == "regex_replace":
            return str(compiled.sub(params.replace, text, timeout=REGEX_TIMEOUT))
        literal = params.replace  # plain replace: no backreferences in the replacement
        return str(compiled.sub(lambda _m: literal, text, timeout=REGEX_TIMEOUT))
    except TimeoutError as exc:
        raise NodeFailure(f"the regular expression took longer than {REGEX_TIMEOUT:g} s") from exc
    except (regex.error, IndexError) as exc:
        raise NodeFailure(f"bad replacement: {exc}") from exc


class TextTransform(NodeType):
    spec = _spec(
        "TextTransform",
        "Transform text",
        "Change case, trim, collapse spaces, replace (plain or regex), extract regex matches, "
        "truncate or reverse.",
        TextTransformParams,
        Input("text", Kind.TEXT),
    )

    def param_problems(self, params: TextTransformParams) -> list[str]:
        if params.operation in ("regex_replace", "regex_extract") and params.find:
            try:
                regex.compile(params.find)
            except regex.error as exc:
                return [f"bad regular expression: {exc}"]
        return []

    async def run(
        self, ctx: NodeContext, params: TextTransformParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        return _produce(await ctx.to_thread(transform, text, params))


class TextJoinParams(Params):
    separator: str = Field(default="\n", max_length=1000, description="Put between the texts.")
    skip_empty: bool = Field(default=True, description="Leave out empty texts.")


class TextJoin(NodeType):
    spec = _spec(
        "TextJoin",
        "Join texts",
        "Join several texts, in edge order, with a separator.",
        TextJoinParams,
        Input("texts", Kind.TEXT, multiple=True),
    )

    async def run(
        self, ctx: NodeContext, params: TextJoinParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        value = inputs.get("texts")
        refs = value if isinstance(value, list) else [value] if value is not None else []
        parts = [ref.read_text() for ref in refs]
        if params.skip_empty:
            parts = [p for p in parts if p.strip()]
        return _produce(params.separator.join(parts))


class TextSplitParams(Params):
    separator: str = Field(
        default="\n", max_length=1000, description="Split on this (empty: on any whitespace)."
    )
    index: int = Field(default=0, description="Which piece to keep; negative counts from the end.")
    strip: bool = Field(default=True, description="Trim spaces around pieces; drop empty ones.")


class TextSplit(NodeType):
    spec = _spec(
        "TextSplit",
        "Split and pick",
        "Split text on a separator and keep one piece (e.g. the first line, the last word).",
        TextSplitParams,
        Input("text", Kind.TEXT),
    )

    async def run(
        self, ctx: NodeContext, params: TextSplitParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        pieces = text.split(params.separator) if params.separator else text.split()
        if params.strip:
            pieces = [p.strip() for p in pieces if p.strip()]
        try:
            return Produced.text(pieces[params.index])
        except IndexError:
            raise NodeFailure(
                f"piece {params.index} does not exist: the text has {len(pieces)} pieces"
            ) from None


class JsonExtractParams(Params):
    expression: str = Field(
        default="@", min_length=1, max_length=2000, description="JMESPath, e.g. items[0].name."
    )
    missing: Literal["fail", "empty"] = Field(
        default="fail", description="When nothing matches: fail the node, or output ''."
    )


class JsonExtract(NodeType):
    spec = _spec(
        "JsonExtract",
        "JSON extract",
        "Pick a value out of JSON text with a JMESPath expression. Strings come out as plain "
        "text, anything else as JSON.",
        JsonExtractParams,
        Input("text", Kind.TEXT),
    )

    def param_problems(self, params: JsonExtractParams) -> list[str]:
        try:
            jmespath.compile(params.expression)
        except JMESPathError as exc:
            return [f"bad JMESPath expression: {exc}"]
        return []

    async def run(
        self, ctx: NodeContext, params: JsonExtractParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise NodeFailure(f"the input is not JSON: {exc}") from exc
        try:
            result = jmespath.search(params.expression, document)
        except JMESPathError as exc:
            raise NodeFailure(f"JMESPath error: {exc}") from exc
        if result is None:
            if params.missing == "empty":
                return Produced.text("")
            raise NodeFailure(f"{params.expression!r} matches nothing in the input")
        if isinstance(result, str):
            return Produced.text(result)
        return _produce(json.dumps(result, ensure_ascii=False))


class WordCountParams(Params):
    unit: Literal["words", "characters", "lines", "sentences", "all"] = Field(
        default="words", description="What to count; all gives a JSON object with every count."
    )


def counts(text: str) -> dict[str, int]:
    return {
        "words": len(text.split()),
        "characters": len(text),
        "lines": len(text.splitlines()),
        "sentences": len([s for s in regex.split(r"(?<=[.!?…])\s+", text.strip()) if s]),
    }


class WordCount(NodeType):
    spec = _spec(
        "WordCount",
        "Count words",
        "Count words, characters, lines or sentences; the number comes out as text.",
        WordCountParams,
        Input("text", Kind.TEXT),
    )

    async def run(
        self, ctx: NodeContext, params: WordCountParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        numbers = counts(input_text(inputs) or "")
        if params.unit == "all":
            return Produced.text(json.dumps(numbers))
        return Produced.text(str(numbers[params.unit]))


NODES: list[NodeType] = [TextTransform(), TextJoin(), TextSplit(), JsonExtract(), WordCount()]
