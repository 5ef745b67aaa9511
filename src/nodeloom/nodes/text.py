"""Text nodes: the run's input, templating, and a delay."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Mapping
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import SandboxedEnvironment
from pydantic import Field

from nodeloom.nodes.base import (
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
)

MAX_TEMPLATE_OUTPUT = 1_000_000  # characters
MAX_TEMPLATE_SECONDS = 2.0


def input_text(inputs: Mapping[str, InputValue], name: str = "text") -> str | None:
    value = inputs.get(name)
    if value is None:
        return None
    if isinstance(value, list):
        return "".join(v.read_text() for v in value)
    return value.read_text()


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class TextInputParams(Params):
    key: str | None = Field(default=None, description="Take input[key] from the run's input data.")
    text: str = Field(default="", description="Used when the run has no input data.")


class TextInput(NodeType):
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
    )

    async def run(
        self, ctx: NodeContext, params: TextInputParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        data = ctx.input
        if not data:
            return Produced.text(params.text)
        if params.key is not None:
            if params.key in data:
                return Produced.text(_as_text(data[params.key]))
            if params.text:
                return Produced.text(params.text)
            raise NodeFailure(f"the run's input data has no key {params.key!r}")
        if "text" in data:
            return Produced.text(_as_text(data["text"]))
        return Produced.text(json.dumps(data, ensure_ascii=False))


class TextTemplateParams(Params):
    template: str = Field(
        default="{{ text }}",
        max_length=100_000,
        description="Jinja2 template (sandboxed). Variables: `text` (the input) and `input` "
        "(the run's input data).",
    )


@functools.lru_cache(maxsize=1)
def _environment() -> SandboxedEnvironment:
    return SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)


@functools.lru_cache(maxsize=512)
def _compile(source: str) -> Any:
    return _environment().from_string(source)


def check_template(source: str) -> str | None:
    """A syntax error message, or None; used by graph validation."""
    try:
        _compile(source)
    except TemplateError as exc:
        return f"template error: {exc}"
    return None


def render_template(source: str, variables: Mapping[str, Any]) -> str:
    """Render with bounded output size and time: the sandbox stops attribute abuse, these
    bounds stop a template that tries to exhaust memory or CPU."""
    try:
        template = _compile(source)
        parts: list[str] = []
        size = 0
        deadline = time.monotonic() + MAX_TEMPLATE_SECONDS
        for chunk in template.generate(**variables):
            size += len(chunk)
            if size > MAX_TEMPLATE_OUTPUT:
                raise NodeFailure(f"template output exceeds {MAX_TEMPLATE_OUTPUT} characters")
            if time.monotonic() > deadline:
                raise NodeFailure(f"template took longer than {MAX_TEMPLATE_SECONDS} s")
            parts.append(chunk)
    except TemplateError as exc:
        raise NodeFailure(f"template error: {exc}") from exc
    except NodeFailure:
        raise
    except Exception as exc:  # a template can raise anything (1/0, bad arithmetic...)
        raise NodeFailure(f"template error: {type(exc).__name__}: {exc}") from exc
    return "".join(parts)


class TextTemplate(NodeType):
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

    def param_problems(self, params: TextTemplateParams) -> list[str]:
        problem = check_template(params.template)
        return [problem] if problem else []

    async def run(
        self, ctx: NodeContext, params: TextTemplateParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        rendered = render_template(params.template, {"text": text, "input": ctx.input or {}})
        return Produced.text(rendered)


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
