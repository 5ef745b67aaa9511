"""Reading a model's input and output JSON schemas out of the OpenAPI document a provider
publishes for it (Replicate's Cog, fal's per-endpoint documents), for the editor's form."""

from __future__ import annotations

from typing import Any

REF_DEPTH = 8  # nested $ref resolutions followed, no more (a cycle stops here)
COMPONENTS = "#/components/schemas/"


def resolve_refs(node: Any, components: dict[str, Any], depth: int = 0) -> Any:
    """``node`` with local ``#/components/schemas/X`` references replaced by their schema
    (Cog puts each enum in its own component, referenced through ``allOf``; fal names the
    input and output objects), and a one-element ``allOf`` merged into the property that
    holds it."""
    if isinstance(node, list):
        return [resolve_refs(item, components, depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(COMPONENTS):
        target = components.get(ref.removeprefix(COMPONENTS))
        if depth >= REF_DEPTH or not isinstance(target, dict):
            return {k: v for k, v in node.items() if k != "$ref"}
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return resolve_refs(merged, components, depth + 1)
    out = {key: resolve_refs(value, components, depth) for key, value in node.items()}
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        del out["allOf"]
        out = {**all_of[0], **out}
    return out


def json_body(operation: Any, where: str) -> Any:
    """The ``application/json`` schema of an operation's request body (``where`` =
    "request") or of its 200 answer ("response"), None without one."""
    if not isinstance(operation, dict):
        return None
    if where == "request":
        holder = operation.get("requestBody")
    else:
        responses = operation.get("responses")
        holder = responses.get("200") if isinstance(responses, dict) else None
    content = holder.get("content") if isinstance(holder, dict) else None
    media = content.get("application/json") if isinstance(content, dict) else None
    return media.get("schema") if isinstance(media, dict) else None


def ordered(schema: dict[str, Any]) -> dict[str, Any]:
    """fal lists its fields' order in ``x-fal-order-properties``; the editor reads Cog's
    per-field ``x-order``: the one is given as the other."""
    order = schema.get("x-fal-order-properties")
    properties = schema.get("properties")
    if not isinstance(order, list) or not isinstance(properties, dict):
        return schema
    placed = dict(properties)
    for index, name in enumerate(order):
        field = placed.get(name)
        if isinstance(name, str) and isinstance(field, dict) and "x-order" not in field:
            placed[name] = {**field, "x-order": index}
    return {**schema, "properties": placed}
