"""``nodeloom workflows list|show|push|pull|delete|versions|restore|estimate``: workflows as
JSON files, like n8n's import and export, their saved versions, and what a run would cost."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from nodeloom.client import load_workflow
from nodeloom.client._resources import looks_like_id
from nodeloom.client.errors import NotFound
from nodeloom.commands.common import (
    ClientTyper,
    LimitOption,
    WorkflowArg,
    client,
    err,
    fail,
    print_json,
    print_listing,
    print_table,
    take,
    wants_json,
    when,
)
from nodeloom.commands.runs import InputFileOption, InputsOption, parse_inputs
from nodeloom.schemas.workflows import WorkflowVersionSummary

app = ClientTyper(
    help="Workflows: list, show, push and pull JSON files, delete; versions, restore, estimate."
)
MessageOption = Annotated[
    str | None, typer.Option("--message", "-m", help="Why: kept with the version this saves.")
]


@app.command("list")
def list_workflows(
    limit: LimitOption = 100,
) -> None:
    """Workflows of the account, newest first."""
    with client() as c:
        found = take(c.workflows.list(page_size=min(limit, 200)), limit)
    print_listing(
        found,
        ("id", "name", "nodes", "created (UTC)"),
        lambda w: (w.id, w.name, w.node_count, when(w.created_at)),
    )


@app.command("show")
def show(
    workflow: WorkflowArg,
) -> None:
    """A workflow's nodes and edges (--json: the whole workflow, graph included)."""
    with client() as c:
        found = c.workflows.find(workflow)
    if wants_json():
        print_json(found)
        return
    graph = found.graph_json
    err().print(f"{found.name} · {found.id} · updated {when(found.updated_at)} UTC")
    edges = [e for e in graph.get("edges", []) if isinstance(e, dict)]
    feeds: dict[str, list[str]] = {}
    for edge in edges:
        target = f"{edge.get('target')}" + (
            f".{edge['targetHandle']}" if edge.get("targetHandle") else ""
        )
        feeds.setdefault(str(edge.get("source")), []).append(target)
    print_table(
        ("node", "type", "feeds", "params"),
        (
            (
                node.get("id"),
                node.get("type"),
                ", ".join(feeds.get(str(node.get("id")), [])) or "(output)",
                json.dumps(node.get("data") or {}, ensure_ascii=False)[:60],
            )
            for node in graph.get("nodes", [])
            if isinstance(node, dict)
        ),
    )


@app.command("push")
def push(
    file: Annotated[Path, typer.Argument(help="A workflow JSON file ('-' reads stdin).")],
    name: Annotated[
        str | None, typer.Option(help="Name (default: the file's, or its stem).")
    ] = None,
    new: Annotated[
        bool,
        typer.Option(
            "--new", help="Always create, even if the file's id or name is an existing workflow."
        ),
    ] = False,
    message: MessageOption = None,
) -> None:
    """Create a workflow from a JSON file, or update the one it names: the "id" the file
    carries, else the one workflow with its name (pushing a file twice updates it, so
    `nodeloom run NAME` stays unambiguous; several of that name is an error naming them).

    The file is {"name", "graph_json"} (what `pull` writes; examples/ holds some) or a bare
    graph {"nodes", "edges", "viewport"}.
    """
    with client() as c:
        data: Any = json.load(sys.stdin) if str(file) == "-" else _read(file)
        if not isinstance(data, dict):
            fail(f"{file} does not hold a JSON object")
        if str(file) != "-" and "graph_json" not in data:
            data = {"name": name or file.stem, "graph_json": data}
        wf_name, graph = load_workflow(data, name)
        existing = data.get("id")
        saved = None
        if not new:
            targets = [existing] if isinstance(existing, str) and looks_like_id(existing) else []
            for target in (*targets, wf_name):
                try:
                    found = c.workflows.find(target)
                    saved = c.workflows.update(
                        found.id, name=wf_name, graph_json=graph, message=message
                    )
                    verb = "updated"
                    break
                except NotFound:
                    continue
        if saved is None:
            saved = c.workflows.create({"name": wf_name, "graph_json": graph}, message=message)
            verb = "created"
    if wants_json():
        print_json(saved)
        return
    err().print(
        f"{verb} workflow {saved.name!r} ({saved.node_count} nodes, version {saved.version})"
    )
    sys.stdout.write(saved.id + "\n")


def _read(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        fail(f"{file} is not valid JSON: {exc}")


@app.command("pull")
def pull(
    workflow: WorkflowArg,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Write a workflow as {"id", "name", "graph_json"} JSON; `push` reads it back."""
    with client() as c:
        found = c.workflows.find(workflow)
    text = json.dumps(
        {"id": found.id, "name": found.name, "graph_json": found.graph_json},
        indent=2,
        ensure_ascii=False,
    )
    if output is None:
        sys.stdout.write(text + "\n")
        return
    output.write_text(text + "\n", encoding="utf-8")
    err().print(f"wrote {output}")


@app.command("delete")
def delete(
    workflow: WorkflowArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
) -> None:
    """Delete a workflow: its running runs are cancelled, its webhooks stop at once."""
    with client() as c:
        found = c.workflows.find(workflow)
        if not yes:
            if not sys.stdin.isatty():
                fail("deleting needs confirmation: pass --yes")
            typer.confirm(f"Delete workflow {found.name!r} ({found.id})?", abort=True)
        c.workflows.delete(found.id)
    err().print(f"deleted workflow {found.name!r} ({found.id})")


def _author(version: WorkflowVersionSummary) -> str:
    by = version.created_by
    who = by.email or by.account_id or "unknown"
    if by.via == "api_key":
        return f"{who} (key {by.api_key_name or by.api_key_id or '?'})"
    if by.via == "jwt":
        return f"{who} (web/JWT)"
    return who


@app.command("versions")
def versions(
    workflow: WorkflowArg,
    limit: LimitOption = 50,
) -> None:
    """A workflow's saved versions, newest first: who saved each, when, and why."""
    with client() as c:
        found = c.workflows.find(workflow)
        listed = take(c.workflows.versions(found.id, page_size=min(limit, 200)), limit)
    if wants_json():
        print_json(listed)
        return
    err().print(f"{found.name} · {found.id} · current version {found.version}")
    print_table(
        ("version", "saved (UTC)", "by", "nodes", "message"),
        (
            (
                f"{v.version}{' (current)' if v.version == found.version else ''}",
                when(v.created_at),
                _author(v),
                v.node_count,
                v.message or (f"restored version {v.restored_from}" if v.restored_from else ""),
            )
            for v in listed
        ),
    )


@app.command("restore")
def restore(
    workflow: WorkflowArg,
    version: Annotated[int, typer.Argument(min=1, help="The version number to restore.")],
    message: MessageOption = None,
) -> None:
    """Save an old version's name and graph again, as a new version (nothing is lost)."""
    with client() as c:
        found = c.workflows.find(workflow)
        saved = c.workflows.restore(
            found.id, version, message=message, expected_version=found.version
        )
    if wants_json():
        print_json(saved)
        return
    err().print(
        f"restored version {version} of {saved.name!r} as version {saved.version} "
        f"({saved.node_count} nodes)"
    )


@app.command("estimate")
def estimate(
    workflow: WorkflowArg,
    inputs: InputsOption = None,
    input_file: InputFileOption = None,
) -> None:
    """The credits a run would hold, per node and in total, without running anything.

    Exit status 1 when the balance does not cover it (the run would be refused).
    """
    with client() as c:
        data = parse_inputs(inputs or [], input_file)
        found = c.workflows.find(workflow)
        answer = c.workflows.estimate(found.id, data)
    if wants_json():
        print_json(answer)
    else:
        print_table(
            ("node", "type", "credits"), ((n.node_id, n.type, n.credits) for n in answer.nodes)
        )
        verdict = "enough" if answer.sufficient else "NOT enough: execute would be refused"
        err().print(
            f"{found.name} (version {answer.workflow_version}): "
            f"{answer.estimated_credits} credits at most; balance {answer.credits_balance} "
            f"({verdict})"
        )
    if not answer.sufficient:
        raise typer.Exit(1)
