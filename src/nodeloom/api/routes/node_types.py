"""The node catalog, with params as JSON Schema and prices in credits."""

from __future__ import annotations

from fastapi import APIRouter

from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.routing import GuardedRoute
from nodeloom.nodes.registry import package_of
from nodeloom.schemas.nodes import (
    NodeCostOut,
    NodeInputOut,
    NodeOutputOut,
    NodePackageOut,
    NodePortOut,
    NodeTypeOut,
)
from nodeloom.sdk._node import CONTENT_TYPES, DEFAULT_OUTPUT, ERROR_OUTPUT, Kind, NodeType

router = APIRouter(route_class=GuardedRoute, tags=["nodes"])


@router.get("/node-types", response_model=list[NodeTypeOut])
async def list_node_types(principal: PrincipalDep, ctx: CtxDep) -> list[NodeTypeOut]:
    if ctx.node_types is not None:
        return ctx.node_types
    result = []
    for node in ctx.registry:
        spec = node.spec
        reason = node.unavailable_reason(ctx.settings)
        package = package_of(node)
        result.append(
            NodeTypeOut(
                type=spec.type,
                version=spec.version,
                category=spec.category,
                title=spec.title,
                description=spec.description,
                inputs=[
                    NodeInputOut(name=i.name, kind=i.kind, required=i.required, multiple=i.multiple)
                    for i in spec.inputs
                ],
                output=NodeOutputOut(kind=spec.output.kind, content_type=spec.output.content_type),
                outputs=_outputs(node),
                outputs_from_param=spec.branches_from_param,
                params_schema=spec.params.model_json_schema(),
                cost=NodeCostOut(credits=spec.cost.credits, per_second=spec.cost.per_second),
                available=reason is None,
                status="available" if reason is None else "unavailable",
                unavailable_reason=reason,
                package=None
                if package is None
                else NodePackageOut(
                    name=package.name, version=package.version, namespace=package.namespace
                ),
                credential_kinds=list(spec.credential_kinds)
                if "credential" in spec.params.model_fields
                else [],
            )
        )
    ctx.node_types = result
    return result


def _outputs(node: NodeType) -> list[NodePortOut]:
    spec = node.spec
    kind, content_type = spec.output.kind, spec.output.content_type
    ports = [
        NodePortOut(name=name, kind=kind, content_type=content_type, role="branch")
        for name in spec.branches
    ] or [NodePortOut(name=DEFAULT_OUTPUT, kind=kind, content_type=content_type, role="output")]
    error = NodePortOut(
        name=ERROR_OUTPUT, kind=Kind.JSON, content_type=CONTENT_TYPES[Kind.JSON], role="error"
    )
    return [*ports, error]
