"""JSON nodes: ``ParseJson`` checks a text is JSON, ``JsonBuild`` renders a template
whose result must be JSON. Both output the ``json`` kind (text/plain, JSON checked).

Both run in a sandbox process: parsing and rendering are CPU work whose cost grows with
their input. The limits of nodes/jsonvalue.py apply (size, depth), each with its code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from nodeloom.nodes import jsonvalue
from nodeloom.nodes.text import check_template, render_template
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


class ParseJsonParams(Params):
    strip_fences: bool = Field(
        default=True,
        description="Accept JSON wrapped in a Markdown code fence (```json ... ```), as LLMs "
        "often answer.",
    )


def _unfenced(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        body = stripped[3:-3]
        first_line, _, rest = body.partition("\n")
        return rest if first_line.strip().isalpha() or not first_line.strip() else body
    return text


class ParseJson(NodeType):
    spec = NodeSpec(
        type="ParseJson",
        version=1,
        category="text",
        title="Parse JSON",
        description="Check that the input text is JSON and pass it on as a json value; "
        "fails with `invalid_json` saying where it is not.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.JSON),
        params=ParseJsonParams,
        cost=Cost(credits=0),
    )

    async def run(
        self, ctx: NodeContext, params: ParseJsonParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        if params.strip_fences:
            text = _unfenced(text)
        return Produced.text(jsonvalue.dump(jsonvalue.parse(text)))


class JsonBuildParams(Params):
    template: str = Field(
        default='{"text": {{ text | tojson }}}',
        max_length=100_000,
        description="Jinja2 template (sandboxed) whose result must be JSON. Variables: `text` "
        "(the input), `json` (the input parsed, or null when it is not JSON) and `input` "
        "(the run's input data); `| tojson` writes any value as JSON.",
    )


class JsonBuild(NodeType):
    spec = NodeSpec(
        type="JsonBuild",
        version=1,
        category="text",
        title="Build JSON",
        description="Render a Jinja template into a JSON value (checked: invalid JSON fails "
        "the node with where it went wrong).",
        inputs=(Input("text", Kind.TEXT, required=False),),
        output=Output(Kind.JSON),
        params=JsonBuildParams,
        cost=Cost(credits=1),
        uses_run_input=True,
    )

    def deep_problems(self, params: JsonBuildParams) -> list[str]:
        problem = check_template(params.template)
        return [problem] if problem else []

    async def run(
        self, ctx: NodeContext, params: JsonBuildParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        text = input_text(inputs) or ""
        parsed: Any = None
        if text.strip():
            try:
                parsed = jsonvalue.parse(text)
            except NodeFailure as exc:
                if exc.code != "invalid_json":
                    raise
        rendered = render_template(
            params.template, {"text": text, "json": parsed, "input": ctx.input or {}}
        )
        try:
            value = jsonvalue.parse(rendered, "the template's result")
        except NodeFailure as exc:
            if exc.code == "invalid_json":
                shown = rendered if len(rendered) <= 200 else rendered[:197] + "..."
                raise NodeFailure(f"{exc.message}; it was: {json.dumps(shown)}", exc.code) from None
            raise
        return Produced.text(jsonvalue.dump(value))


NODES: list[NodeType] = [ParseJson(), JsonBuild()]
