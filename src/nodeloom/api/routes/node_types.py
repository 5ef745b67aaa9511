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
    NodeTypeOut,
)

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
