"""Text nodes: the run's input, templating, and a delay."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import SandboxedEnvironment, safe_range
from pydantic import Field

from nodeloom.nodes import substitution
from nodeloom.nodes.inline import InlineNode
from nodeloom.sdk._node import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
    input_text,
)

MAX_TEMPLATE_OUTPUT = 1_000_000  # characters
MAX_TEMPLATE_SECONDS = 10.0  # checked between output chunks; the sandbox budget is the backstop
MAX_TEMPLATE_VALUE = 1_000_000  # items or characters of any string or list a template builds
MAX_TEMPLATE_LOOP_ITEMS = 1_000_000  # items produced by range() over one rendering
MAX_POWER_BITS = 4096
# A template that may read the run's input data names the variable `input`.
_NAMES_INPUT = re.compile(r"\binput\b")


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class TextInputParams(Params):
    key: str | None = Field(default=None, description="Take input[key] from the run's input data.")
    text: str = Field(default="", description="Used when the run has no input data.")


def text_input_value(params: TextInputParams, data: Mapping[str, Any] | None) -> str | None:
    """What a TextInput outputs for the run's input ``data``; None when ``key`` names
    nothing in it and there is no ``text`` to fall back on (the node then fails)."""
    if not data:
        return params.text
    if params.key is not None:
        if params.key in data:
            return _as_text(data[params.key])
        return params.text or None
    if "text" in data:
        return _as_text(data["text"])
    return json.dumps(data, ensure_ascii=False)


class TextInput(InlineNode):
    """Receives the run's input data: ``input[key]`` when ``key`` is set, else
    ``input["text"]``, else the whole input as JSON. With no input data (none or ``{}``),
    or when ``key`` names nothing and ``text`` is set, the ``text`` param."""

    spec = NodeSpec(
        type="TextInput",
        version=1,
        category="text",
        title="Text input",
        description="The run's input data (execute body `input` or webhook body), or fixed text.",
        inputs=(),
        output=Output(Kind.TEXT),
        params=TextInputParams,
        cost=Cost(credits=0),
        uses_run_input=True,
        sandboxed=False,  # it only copies a value out of the run's input data
    )

    def run_input_read(self, params: TextInputParams, run_input: Mapping[str, Any] | None) -> Any:
        return text_input_value(params, run_input)

    async def run(
        self, ctx: NodeContext, params: TextInputParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        value = text_input_value(params, ctx.input)
        if value is None:
            raise NodeFailure(f"the run's input data has no key {params.key!r}")
        return Produced.text(value)


class TextTemplateParams(Params):
    template: str = Field(
        default="{{ text }}",
        max_length=100_000,
        description="Jinja2 template (sandboxed). Variables: `text` (the input) and `input` "
        "(the run's input data).",
    )


class BoundedEnvironment(SandboxedEnvironment):
    """The sandbox stops attribute abuse; this also stops a template from building huge
    values. ``*``, ``**`` and ``+`` are intercepted, which also keeps Jinja from folding them
    at compile time (``{{ 'ab' * 10**9 }}`` would otherwise be computed while *compiling*),
    and the optimizer is off, so compiling costs time proportional to the source only."""

    intercepted_binops = frozenset({"*", "**", "+"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
        elif operator == "+":
            if _is_sequence(left) and _is_sequence(right):
                _check_size(len(left) + len(right))
        elif operator == "**":
            _check_power(left, right)
        return super().call_binop(context, operator, left, right)


def _is_sequence(value: Any) -> bool:
    return isinstance(value, str | bytes | list | tuple)


def _check_size(size: int) -> None:
    if size > MAX_TEMPLATE_VALUE:
        raise NodeFailure(f"the template builds a value longer than {MAX_TEMPLATE_VALUE}")


def _check_repeat(sequence: Any, times: Any) -> None:
    if _is_sequence(sequence) and isinstance(times, int) and times > 0:
        _check_size(len(sequence) * times)


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0:
        if exponent * math.log2(abs(base)) > MAX_POWER_BITS:
            raise NodeFailure(f"the template computes a number of more than {MAX_POWER_BITS} bits")


@functools.lru_cache(maxsize=1)
def _environment() -> BoundedEnvironment:
    return BoundedEnvironment(autoescape=False, keep_trailing_newline=True, optimized=False)


# Compiled templates are cached only in sandbox processes (this runs there), a few at a time:
# a compiled template can be many times the size of its source.
@functools.lru_cache(maxsize=32)
def _compile(source: str) -> Any:
    return _environment().from_string(source)


def check_template(source: str) -> str | None:
    """A syntax error message, or None. Compiling takes time proportional to the source (up
    to a second for 100,000 characters), so graph validation runs it in a sandbox process."""
    try:
        _environment().from_string(source)
    except TemplateError as exc:
        return f"template error: {exc}"
    except RecursionError:
        return "template error: the template is nested too deeply"
    return None


def _bounded_range() -> Callable[..., range]:
    """``range`` for one rendering: each range is capped by the sandbox, and all of them
    together may produce at most MAX_TEMPLATE_LOOP_ITEMS items."""
    left = MAX_TEMPLATE_LOOP_ITEMS

    def bounded(*args: int) -> range:
        nonlocal left
        items = safe_range(*args)
        left -= len(items)
        if left < 0:
            raise NodeFailure(
                f"the template's loops run over more than {MAX_TEMPLATE_LOOP_ITEMS} items"
            )
        return items

    return bounded


def render_template(source: str, variables: Mapping[str, Any]) -> str:
    """Render with bounded values, loops, output size and time (see BoundedEnvironment)."""
    try:
        template = _compile(source)
        parts: list[str] = []
        size = 0
        deadline = time.monotonic() + MAX_TEMPLATE_SECONDS
        for chunk in template.generate(**variables, range=_bounded_range()):
            size += len(chunk)
            if size > MAX_TEMPLATE_OUTPUT:
                raise NodeFailure(f"template output exceeds {MAX_TEMPLATE_OUTPUT} characters")
            if time.monotonic() > deadline:
                raise NodeFailure(f"template took longer than {MAX_TEMPLATE_SECONDS} s")
            parts.append(chunk)
    except TemplateError as exc:
        raise NodeFailure(f"template error: {exc}") from exc
    except (NodeFailure, MemoryError):
        raise
    except RecursionError as exc:
        raise NodeFailure("template error: nested too deeply") from exc
    except Exception as exc:  # a template can raise anything (1/0, bad arithmetic...)
        raise NodeFailure(f"template error: {type(exc).__name__}: {exc}") from exc
    return "".join(parts)


class TextTemplate(InlineNode):
    spec = NodeSpec(
        type="TextTemplate",
        version=1,
        category="text",
        title="Text template",
        description="Render a sandboxed Jinja2 template with the input text and run input.",
        inputs=(Input("text", Kind.TEXT, required=False),),
        output=Output(Kind.TEXT),
        params=TextTemplateParams,
        cost=Cost(credits=1),
        uses_run_input=True,
    )

    def run_input_read(
        self, params: TextTemplateParams, run_input: Mapping[str, Any] | None
    ) -> Any:
        # A template that never names `input` cannot read it (the sandbox gives no other
        # way to a variable), so its items stay cached when the rest of the input changes.
        return (run_input or None) if _NAMES_INPUT.search(params.template) else None

    def deep_problems(self, params: TextTemplateParams) -> list[str]:
        problem = check_template(params.template)
        return [problem] if problem else []

    def needs_deep_check(self, params: TextTemplateParams) -> bool:
        # What the substitution parser accepts, Jinja compiles (tests/nodes/test_substitution.py).
        return not self.runs_inline(params)

    def runs_inline(self, params: TextTemplateParams) -> bool:
        return substitution.parse(params.template) is not None

    async def run(
        self, ctx: NodeContext, params: TextTemplateParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        variables = {"text": text, "input": ctx.input or {}}
        simple = substitution.parse(params.template)
        if simple is not None:
            try:
                return Produced.text(substitution.render(simple, variables, MAX_TEMPLATE_OUTPUT))
            except substitution.Ambiguous:
                if ctx.inline:
                    raise  # the executor runs it again in a sandbox, the Jinja way
        return Produced.text(render_template(params.template, variables))


class DelayParams(Params):
    seconds: float = Field(default=1.0, ge=0, le=300, description="How long to wait.")


class Delay(NodeType):
    spec = NodeSpec(
        type="Delay",
        version=1,
        category="utility",
        title="Delay",
        description="Wait, then pass the input text on unchanged.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=DelayParams,
        cost=Cost(credits=0),
        cacheable=False,
        sandboxed=False,  # it only waits
    )

    async def run(
        self, ctx: NodeContext, params: DelayParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        loop = asyncio.get_running_loop()
        start = loop.time()
        end = start + params.seconds
        while (now := loop.time()) < end:
            await asyncio.sleep(min(1.0, end - now))
            if params.seconds > 0:
                await ctx.progress(min(1.0, (loop.time() - start) / params.seconds))
        return Produced.text(input_text(inputs) or "")


NODES: list[NodeType] = [TextInput(), TextTemplate(), Delay()]
