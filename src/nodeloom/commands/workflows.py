"""``nodeloom workflows list|show|push|pull|delete``: workflows as JSON files, like n8n's
import and export."""

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
    ApiKeyOption,
    JsonOption,
    LimitOption,
    UrlOption,
    WorkflowArg,
    client,
    err,
    fail,
    print_json,
    print_table,
    take,
    when,
)

app = typer.Typer(help="Workflows: list, show, push and pull JSON files, delete.")


@app.command("list")
def list_workflows(
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    as_json: JsonOption = False,
    limit: LimitOption = 100,
) -> None:
    """Workflows of the account, newest first."""
    with client(url, api_key) as c:
        found = take(c.workflows.list(page_size=min(limit, 200)), limit)
    if as_json:
        print_json(found)
        return
    print_table(
        ("id", "name", "nodes", "created (UTC)"),
        ((w.id, w.name, w.node_count, when(w.created_at)) for w in found),
    )


@app.command("show")
def show(
    workflow: WorkflowArg,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """A workflow's nodes and edges (--json: the whole workflow, graph included)."""
    with client(url, api_key) as c:
        found = c.workflows.find(workflow)
    if as_json:
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
        bool, typer.Option("--new", help="Always create, even if the file names an existing id.")
    ] = False,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a workflow from a JSON file, or update the one whose "id" the file carries.

    The file is {"name", "graph_json"} (what `pull` writes; examples/ holds some) or a bare
    graph {"nodes", "edges", "viewport"}.
    """
    with client(url, api_key) as c:
        data: Any = json.load(sys.stdin) if str(file) == "-" else _read(file)
        if not isinstance(data, dict):
            fail(f"{file} does not hold a JSON object")
        if str(file) != "-" and "graph_json" not in data:
            data = {"name": name or file.stem, "graph_json": data}
        wf_name, graph = load_workflow(data, name)
        existing = data.get("id")
        saved = None
        if isinstance(existing, str) and looks_like_id(existing) and not new:
            try:
                saved = c.workflows.update(existing, name=wf_name, graph_json=graph)
                verb = "updated"
            except NotFound:
                saved = None
        if saved is None:
            saved = c.workflows.create({"name": wf_name, "graph_json": graph})
            verb = "created"
    if as_json:
        print_json(saved)
        return
    err().print(f"{verb} workflow {saved.name!r} ({saved.node_count} nodes)")
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
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
) -> None:
    """Write a workflow as {"id", "name", "graph_json"} JSON; `push` reads it back."""
    with client(url, api_key) as c:
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
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
) -> None:
    """Delete a workflow: its running runs are cancelled, its webhooks stop at once."""
    with client(url, api_key) as c:
        found = c.workflows.find(workflow)
        if not yes:
            if not sys.stdin.isatty():
                fail("deleting needs confirmation: pass --yes")
            typer.confirm(f"Delete workflow {found.name!r} ({found.id})?", abort=True)
        c.workflows.delete(found.id)
    err().print(f"deleted workflow {found.name!r} ({found.id})")
