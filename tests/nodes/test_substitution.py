"""Templates that only substitute values render on the event loop without Jinja: for every
such template and every input, the result must be exactly what Jinja (the sandboxed,
bounded environment the sandbox uses) renders."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodeloom.nodes import substitution
from nodeloom.nodes.text import MAX_TEMPLATE_OUTPUT, check_template, render_template
from nodeloom.sdk._node import NodeFailure

KEYS = st.sampled_from(["a", "b", "city", "items", "_x", "upper", "0", "keys"])
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
STEP = st.one_of(
    KEYS.map(lambda k: f".{k}" if k.isidentifier() else f"['{k}']"),
    KEYS.map(lambda k: f"['{k}']"),
    KEYS.map(lambda k: f'["{k}"]'),
    st.integers(-2, 3).map(lambda i: f"[{i}]"),
)
EXPRESSION = st.builds(
    lambda name, steps, left, right: "{{" + left + name + "".join(steps) + right + "}}",
    st.sampled_from(["text", "input"]),
    st.lists(STEP, max_size=3),
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(["", " ", "\n"]),
)
LITERAL = st.text(st.characters(blacklist_characters="{}\r"), max_size=8) | st.sampled_from(
    ["}", "}}", "{", "a}b", "\n"]
)
TEMPLATE = st.lists(st.one_of(LITERAL, EXPRESSION), max_size=6).map("".join)


def jinja(source: str, variables: dict[str, Any]) -> str | None:
    try:
        return render_template(source, variables)
    except NodeFailure:
        return None


@settings(max_examples=400, deadline=None)
@given(TEMPLATE, st.text(max_size=6), st.dictionaries(KEYS, JSON, max_size=4))
def test_substitution_renders_what_jinja_renders(
    source: str, text: str, data: dict[str, Any]
) -> None:
    parsed = substitution.parse(source)
    variables = {"text": text, "input": data}
    if parsed is None:
        return  # Jinja's job, in the sandbox
    try:
        ours = substitution.render(parsed, variables, MAX_TEMPLATE_OUTPUT)
    except substitution.Ambiguous:
        return
    assert ours == jinja(source, variables)


# Any text made of the characters that matter to both parsers.
SCRAMBLED = st.text(
    alphabet=list("{}%#-+ texinput.[]'\"0123456789aT\n\r\t\\|()\u00a0\uff13\u0663"),
    max_size=30,
)


@settings(max_examples=2000, deadline=None)
@given(st.one_of(TEMPLATE, SCRAMBLED))
def test_what_substitution_accepts_jinja_compiles(source: str) -> None:
    """Saving a workflow skips the sandbox's syntax check for these templates."""
    if substitution.parse(source) is not None:
        assert check_template(source) is None, source


@pytest.mark.parametrize(
    "source",
    [
        "Hello {{ text }}!",
        "{{ input.city }} / {{ input['b'] }} / {{ input.list[0] }}",
        "no expression at all\n",
        "{{text}}{{ text }}",
    ],
)
def test_plain_substitutions_are_recognised(source: str) -> None:
    assert substitution.parse(source) is not None


@pytest.mark.parametrize(
    "source",
    [
        "{% for i in range(10) %}x{% endfor %}",
        "{{ text * 100 }}",
        "{{ text | upper }}",
        "{{ text.upper() }}",
        "{{- text }}",
        "{# comment #}{{ text }}",
        "{{ other }}",
        "line\r\nbreak {{ text }}",
        "{{ text ",
        "{{ input[01] }}",
        "{{ input[\uff13] }}",
        "{{\u00a0text }}",
        "{{ text }}" * 500,  # longer than MAX_INLINE_SOURCE
    ],
)
def test_anything_beyond_substitution_goes_to_jinja(source: str) -> None:
    assert substitution.parse(source) is None


def test_output_is_capped_while_it_is_built() -> None:
    parsed = substitution.parse("{{ text }}" * 50)
    assert parsed is not None
    with pytest.raises(NodeFailure):
        substitution.render(parsed, {"text": "x" * 1000, "input": {}}, max_output=10_000)


def test_what_depends_on_python_attributes_is_left_to_jinja() -> None:
    for source, data in [("{{ input.items }}", {}), ("{{ input.a.b }}", {})]:
        parsed = substitution.parse(source)
        assert parsed is not None
        with pytest.raises(substitution.Ambiguous):
            substitution.render(parsed, {"text": "", "input": data}, MAX_TEMPLATE_OUTPUT)
