"""Workflows: list, create, get, update, delete."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response, status
from sqlalchemy.engine import Connection

from nodeloom.api.body import body_doc, read_json
from nodeloom.api.deps import CtxDep, PrincipalDep
from nodeloom.api.paging import PageDep
from nodeloom.api.preconditions import IF_MATCH_DOC, parse_if_match
from nodeloom.api.responses import OrjsonResponse
from nodeloom.api.routing import GuardedRoute
from nodeloom.api.state import AppContext
from nodeloom.auth.principal import Principal
from nodeloom.budget import Budget
from nodeloom.engine import subworkflows
from nodeloom.engine.graph_checks import deep_checks, unavailable_nodes, validate_graph
from nodeloom.errors import FieldError, InvalidGraph, NotFound
from nodeloom.schemas.workflows import (
    MESSAGE_MAX,
    GraphWarning,
    WorkflowCreate,
    WorkflowOut,
    WorkflowSummary,
    WorkflowUpdate,
)
from nodeloom.sdk._node import NodeFailure
from nodeloom.store import Record, workflows
from nodeloom.store import credentials as credential_store
from nodeloom.store import runs as run_store
from nodeloom.store.workflows import Save, etag, lost_update
from nodeloom.timestamps import format_timestamp

router = APIRouter(route_class=GuardedRoute, tags=["workflows"])

MAX_WORKFLOW_BODY = 8 * 1024 * 1024
IfMatchHeader = Annotated[
    str | None, Header(alias="If-Match", max_length=1000, description=IF_MATCH_DOC)
]
ETAG_HEADER = {
    "ETag": {
        "description": 'The current version, as an entity-tag ("v3") for If-Match.',
        "schema": {"type": "string"},
    }
}
SAVE_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "Invalid graph (invalid_graph) or malformed If-Match"},
    412: {
        "description": "If-Match names a version that is no longer the current one: "
        "another save came first, nothing was saved (precondition_failed)"
    },
}


DETAIL_PROBLEMS = 5


def _invalid_detail(problems: list[FieldError]) -> str:
    """A sentence naming the first few problems; ``errors`` carries every one of them."""
    count = len(problems)
    shown = "; ".join(f"{p.pointer}: {p.message}" for p in problems[:DETAIL_PROBLEMS])
    more = count - DETAIL_PROBLEMS
    rest = f" ... and {more} more, all listed in errors" if more > 0 else ""
    return f"The workflow is invalid ({count} problem{'s' if count != 1 else ''}): {shown}{rest}."


# Template syntax and the like: checked in a sandbox process, within a request's patience.
DEEP_CHECK_BUDGET = Budget(wall_seconds=10, cpu_seconds=10, memory_mb=256)


async def _deep_problems(ctx: AppContext, graph: Any, account_id: str) -> list[FieldError]:
    checks = deep_checks(graph, ctx.registry, max_nodes=ctx.settings.max_graph_nodes)
    if not checks:
        return []
    items = [{"type": c.type, "params": c.params} for c in checks]
    try:
        answers = await ctx.sandbox.check(items, DEEP_CHECK_BUDGET, account_id)
    except NodeFailure as exc:
        return [
            FieldError(checks[0].pointer, f"the parameters could not be checked: {exc.message}")
        ]
    return [
        FieldError(check.pointer, message)
        for check, messages in zip(checks, answers, strict=True)
        for message in messages
    ]


async def _credential_problems(ctx: AppContext, graph: Any, account_id: str) -> list[FieldError]:
    """Credentials the graph names that the account does not have (or of the wrong kind)."""

    def kinds_of(type_name: str) -> tuple[str, ...]:
        node = ctx.registry.get(type_name)
        if node is None or "credential" not in node.spec.params.model_fields:
            return ()
        return node.spec.credential_kinds

    refs = credential_store.refs_in_json(graph, kinds_of)
    if not refs:
        return []
    return await ctx.db.read(lambda c: credential_store.problems(c, account_id, refs))


def check_message(body: Any, problems: list[FieldError]) -> str | None:
    """The optional ``message`` of a save: a string of at most MESSAGE_MAX characters."""
    message = body.get("message")
    if message is None:
        return None
    if not isinstance(message, str) or len(message) > MESSAGE_MAX:
        problems.append(
            FieldError("/message", f"message must be a string of at most {MESSAGE_MAX} characters")
        )
        return None
    return message.strip() or None


def saved_by(principal: Principal, message: str | None, restored_from: int | None = None) -> Save:
    return Save(
        account_id=principal.account_id,
        via=principal.via.value,
        api_key_id=principal.api_key_id,
        message=message,
        restored_from=restored_from,
    )


async def check_body(
    ctx: AppContext, body: Any, account_id: str, *, partial: bool, workflow_id: str | None = None
) -> tuple[str | None, dict[str, Any] | None, str | None]:
    """Name, graph and message from a create/update body, or InvalidGraph naming every
    problem. ``workflow_id``: the workflow being updated (a sub-workflow naming it back is
    a cycle)."""
    problems: list[FieldError] = []
    message = check_message(body, problems)
    name = body.get("name")
    if name is None and not partial:
        problems.append(FieldError("/name", "name is required"))
    elif name is not None and (not isinstance(name, str) or not name.strip() or len(name) > 500):
        problems.append(
            FieldError("/name", "name must be a non-empty string of at most 500 characters")
        )
    graph = body.get("graph_json")
    if graph is None and not partial:
        problems.append(FieldError("/graph_json", "graph_json is required"))
    elif graph is not None:
        children = await ctx.db.read(
            lambda c: ctx.graphs.children(c, account_id, graph, workflow_id)
        )
        checked = validate_graph(graph, ctx.registry, ctx.settings, children)
        if isinstance(checked, list):
            # A node whose package is not installed (now) is no flaw of the graph: it is
            # kept as it is and saved with a warning (``out``), so the rest of the workflow
            # stays editable until the package returns; execute refuses it meanwhile.
            kept = {
                (w.pointer, w.message) for w in unavailable_nodes(graph, ctx.registry, ctx.settings)
            }
            problems.extend(p for p in checked if (p.pointer, p.message) not in kept)
        problems.extend(await _deep_problems(ctx, graph, account_id))
        problems.extend(await _credential_problems(ctx, graph, account_id))
    if problems:
        raise InvalidGraph(_invalid_detail(problems), errors=problems)
    return name, graph, message


@router.get("/workflows", response_model=list[WorkflowSummary])
async def list_workflows(
    principal: PrincipalDep,
    ctx: CtxDep,
    page: PageDep,
    with_last_run: Annotated[
        bool,
        Query(description="Add last_run_status and last_run_at (the newest run) to each item"),
    ] = False,
) -> OrjsonResponse:
    """Newest first; the next page is in the ``Link: <...>; rel="next"`` header. Items have
    the four fields of the published list unless ``?with_last_run=true`` asks for more."""
    rows = await ctx.db.read(
        lambda c: workflows.page(c, principal.account_id, page.limit, page.cursor, with_last_run)
    )
    rows, headers = page.rows_and_headers(rows)
    body: list[dict[str, Any]] = [
        {
            "id": r.id,
            "name": r.name,
            "created_at": format_timestamp(r.created_at),
            "node_count": r.node_count,
        }
        for r in rows
    ]
    if with_last_run:
        for item, r in zip(body, rows, strict=True):
            item["last_run_status"] = r.last_run_status
            item["last_run_at"] = format_timestamp(r.last_run_at) if r.last_run_at else None
    return OrjsonResponse(body, headers=headers)


@router.post(
    "/workflows",
    status_code=status.HTTP_201_CREATED,
    response_model=WorkflowOut,
    openapi_extra=body_doc(WorkflowCreate),
    responses={
        201: {"headers": ETAG_HEADER},
        400: {"description": "Invalid graph or missing fields (invalid_graph)"},
    },
)
async def create_workflow(
    request: Request, response: Response, principal: PrincipalDep, ctx: CtxDep
) -> WorkflowOut:
    """Create a workflow: its version 1 (``message`` optional)."""
    body = await read_json(request, MAX_WORKFLOW_BODY)
    name, graph, message = await check_body(ctx, body, principal.account_id, partial=False)
    assert name is not None and graph is not None
    save = saved_by(principal, message)
    row = await ctx.db.write(
        lambda c: workflows.create(
            c, account_id=principal.account_id, name=name, graph_json=graph, save=save
        )
    )
    return await out(ctx, row, response)


async def out(ctx: AppContext, row: Record, response: Response | None = None) -> WorkflowOut:
    """The full workflow, with what keeps it from running here now as warnings (a node
    unavailable on this server, a credential deleted since the workflow was saved); its
    version's ETag goes on ``response``."""
    if response is not None:
        response.headers["ETag"] = etag(row.version)
    result = WorkflowOut.model_validate(row)
    problems = unavailable_nodes(row.graph_json, ctx.registry, ctx.settings)
    problems += await _credential_problems(ctx, row.graph_json, row.account_id)
    problems += await _child_problems(ctx, row)
    if subworkflows.has_children(row.graph_json):
        # A cycle stored before saves were checked under a lock still shows.
        problems += await ctx.db.read(
            lambda c: subworkflows.cycles(
                c, row.account_id, row.graph_json, ctx.registry, ctx.settings, row.id
            )
        )
    seen: set[tuple[str, str]] = set()
    for problem in problems:
        if (problem.pointer, problem.message) not in seen:
            seen.add((problem.pointer, problem.message))
            result.warnings.append(GraphWarning(pointer=problem.pointer, message=problem.message))
    return result


async def _child_problems(ctx: AppContext, row: Record) -> list[FieldError]:
    """What execute would refuse in a graph that runs other workflows, as they are now (a
    child deleted, its inputs renamed since this one was saved). A graph naming none was
    checked when it was saved, against a catalog that has not changed since."""
    if not subworkflows.workflow_ids_in(row.graph_json):
        return []
    children = await ctx.db.read(
        lambda c: ctx.graphs.children(c, row.account_id, row.graph_json, row.id)
    )
    checked = validate_graph(row.graph_json, ctx.registry, ctx.settings, children)
    return checked if isinstance(checked, list) else []


async def save_version(
    ctx: AppContext,
    account_id: str,
    workflow_id: str,
    name: str | None,
    graph: dict[str, Any] | None,
    save: Save,
    expected: int | None,
    response: Response,
) -> WorkflowOut:
    """Save the workflow's next version (None: the name or graph stays) and answer with it;
    412 when ``expected`` is no longer its version, 404 when it is gone."""

    def write(conn: Connection) -> Record | None:
        if graph is not None:
            subworkflows.save_without_cycle(
                conn, account_id, graph, ctx.registry, ctx.settings, workflow_id
            )
        return workflows.update(
            conn,
            account_id,
            workflow_id,
            name=name,
            graph_json=graph,
            save=save,
            expected_version=expected,
        )

    row = await ctx.db.write(write)
    if row is None:
        raise NotFound("No such workflow.")
    return await out(ctx, row, response)


async def get_or_404(ctx: AppContext, account_id: str, workflow_id: str) -> Record:
    row = await ctx.db.read(lambda c: workflows.get(c, account_id, workflow_id))
    if row is None:
        raise NotFound("No such workflow.")
    return row


@router.get(
    "/workflows/{workflow_id}",
    response_model=WorkflowOut,
    responses={200: {"headers": ETAG_HEADER}},
)
async def get_workflow(
    workflow_id: str, response: Response, principal: PrincipalDep, ctx: CtxDep
) -> WorkflowOut:
    """The workflow as saved now; ``ETag`` names its version, for ``If-Match``."""
    return await out(ctx, await get_or_404(ctx, principal.account_id, workflow_id), response)


def expected_version(if_match: str | None, current: Record) -> int | None:
    """The version an ``If-Match`` save must still find (None: any), or 412 at once when
    it names another one, before the body is even checked (RFC 9110: preconditions are
    evaluated before the request content is processed)."""
    condition = parse_if_match(if_match)
    if condition is None or condition.any:
        return None
    if not condition.matches(etag(current.version)):
        raise lost_update(current.version)
    return int(current.version)


@router.patch(
    "/workflows/{workflow_id}",
    response_model=WorkflowOut,
    openapi_extra=body_doc(WorkflowUpdate),
    responses={200: {"headers": ETAG_HEADER}, **SAVE_RESPONSES},
)
async def update_workflow(
    workflow_id: str,
    request: Request,
    response: Response,
    principal: PrincipalDep,
    ctx: CtxDep,
    if_match: IfMatchHeader = None,
) -> WorkflowOut:
    """Save a new version. With ``If-Match: "vN"`` the save happens only if version N is
    still the current one (else 412, nothing saved); without it, the save overwrites."""
    current = await get_or_404(ctx, principal.account_id, workflow_id)
    expected = expected_version(if_match, current)
    body = await read_json(request, MAX_WORKFLOW_BODY)
    name, graph, message = await check_body(
        ctx, body, principal.account_id, partial=True, workflow_id=workflow_id
    )
    save = saved_by(principal, message)
    return await save_version(
        ctx, principal.account_id, workflow_id, name, graph, save, expected, response
    )


@router.delete(
    "/workflows/{workflow_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response
)
async def delete_workflow(workflow_id: str, principal: PrincipalDep, ctx: CtxDep) -> Response:
    """Delete; its running runs are cancelled and its webhooks stop at once."""

    def delete(conn: Connection) -> list[str]:
        if not workflows.soft_delete(conn, principal.account_id, workflow_id):
            raise NotFound("No such workflow.")
        running = run_store.running_ids_of_workflow(conn, workflow_id)
        run_store.request_cancel(conn, running)
        return running

    running = await ctx.db.write(delete)
    for run_id in running:
        await ctx.dispatcher.cancel(run_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
