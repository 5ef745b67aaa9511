"""The extra text nodes: transforms (with a regex time limit), split, JSON extract, counts."""

from __future__ import annotations

import json

import pytest

from nodeloom.nodes import media
from nodeloom.nodes.text_extra import (
    JsonExtract,
    TextJoin,
    TextSplit,
    TextTransform,
    TextTransformParams,
    WordCount,
    transform,
)
from nodeloom.sdk._node import NodeFailure
from tests.nodes.conftest import Artifacts, run_node


@pytest.mark.parametrize(
    ("params", "text", "expected"),
    [
        ({"operation": "lower"}, "ÀÉÎ Ж", "àéî ж"),
        ({"operation": "title"}, "hello wörld", "Hello Wörld"),
        ({"operation": "trim"}, "  x \n", "x"),
        ({"operation": "collapse_whitespace"}, "a \n\t b", "a b"),
        ({"operation": "replace", "find": "a.b", "replace": "\\1"}, "xa.by", "x\\1y"),
        (
            {"operation": "replace", "find": "CAT", "replace": "dog", "ignore_case": True},
            "Cat cat",
            "dog dog",
        ),
        (
            {"operation": "regex_replace", "find": r"(\w+)@(\w+)", "replace": r"\2 at \1"},
            "me@host",
            "host at me",
        ),
        ({"operation": "regex_extract", "find": r"\d+"}, "a1 b22 c333", "1\n22\n333"),
        ({"operation": "truncate", "max_length": 5}, "abcdefgh", "abcd…"),
        ({"operation": "reverse"}, "abc", "cba"),
    ],
)  # fmt: skip
def test_transform(params: dict[str, object], text: str, expected: str) -> None:
    assert transform(text, TextTransformParams.model_validate(params)) == expected


def test_catastrophic_regex_is_stopped() -> None:
    params = TextTransformParams(operation="regex_replace", find=r"(a|aa)+$", replace="")
    with pytest.raises(NodeFailure, match="took longer"):
        transform("a" * 40 + "b", params)


def test_bad_regex_is_a_param_problem() -> None:
    params = TextTransformParams(operation="regex_replace", find="(", replace="")
    assert TextTransform().param_problems(params)


async def test_join_split_extract_count(ctx: media.LocalContext, artifacts: Artifacts) -> None:
    joined = await run_node(
        TextJoin(),
        ctx,
        {"separator": ", "},
        {"texts": [artifacts.text("a"), artifacts.text(" "), artifacts.text("b")]},
    )
    assert joined.data == b"a, b"
    second = await run_node(
        TextSplit(), ctx, {"separator": "", "index": 1}, {"text": artifacts.text("x  y z")}
    )
    assert second.data == b"y"
    with pytest.raises(NodeFailure, match="piece 9 does not exist"):
        await run_node(TextSplit(), ctx, {"index": 9}, {"text": artifacts.text("x")})
    doc = artifacts.text(json.dumps({"a": [{"b": 1}, {"b": 2}], "s": "plain"}))
    assert (
        await run_node(JsonExtract(), ctx, {"expression": "a[].b"}, {"text": doc})
    ).data == b"[1, 2]"
    assert (await run_node(JsonExtract(), ctx, {"expression": "s"}, {"text": doc})).data == b"plain"
    with pytest.raises(NodeFailure, match="matches nothing"):
        await run_node(JsonExtract(), ctx, {"expression": "nope"}, {"text": doc})
    with pytest.raises(NodeFailure, match="not JSON"):
        await run_node(JsonExtract(), ctx, {}, {"text": artifacts.text("{")})
    assert JsonExtract().param_problems(
        JsonExtract.spec.params.model_validate({"expression": "a[["})
    )
    counts = await run_node(
        WordCount(), ctx, {"unit": "all"}, {"text": artifacts.text("Hi there. Bye!\nok")}
    )
    assert counts.data is not None
    assert json.loads(counts.data) == {"words": 4, "characters": 17, "lines": 2, "sentences": 3}
