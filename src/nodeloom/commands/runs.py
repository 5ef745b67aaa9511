"""``nodeloom run`` and ``nodeloom runs list|show|cancel|retry|events``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from nodeloom.client import Client, Run
from nodeloom.client.errors import NodeloomClientError
from nodeloom.commands.common import (
    ClientTyper,
    LimitOption,
    WorkflowArg,
    client,
    err,
    handled,
    print_json,
    print_listing,
    print_made,
    print_table,
    take,
    wants_json,
    when,
)
from nodeloom.commands.progress import ProgressView, repeat_bounds
from nodeloom.schemas.runs import RunStatusName

app = ClientTyper(help="Runs of a workflow: list, show, cancel, retry, events.")

RunArg = Annotated[str, typer.Argument(help="Run id.")]
InputsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--input",
        "-i",
        help="key=value (text), key:=json, or key=@FILE (uploaded, its asset id); repeat.",
    ),
]
InputFileOption = Annotated[
    str | None, typer.Option("--input-file", help="Input as a JSON object file ('-': stdin).")
]
DownloadOption = Annotated[
    Path | None,
    typer.Option("--download", "-d", help="Save the outputs into this directory (waits)."),
]
AllNodesOption = Annotated[
    bool, typer.Option("--all", help="Every node's artifact, not just the outputs.")
]
TimeoutOption = Annotated[
    float | None, typer.Option(help="Give up waiting after this many seconds.")
]


def parse_inputs(pairs: list[str], input_file: str | None) -> dict[str, Any] | None:
    """``--input-file`` (a JSON object; '-' is stdin), then each ``--input key=value``
    (a string) or ``key:=json`` (any JSON value) on top."""
    data: dict[str, Any] = {}
    if input_file is not None:
        text = sys.stdin.read() if input_file == "-" else Path(input_file).read_text("utf-8")
        loaded = json.loads(text)
        if not isinstance(loaded, dict):
            raise ValueError(f"{input_file} must hold a JSON object")
        data.update(loaded)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--input takes key=value or key:=json, not {pair!r}")
        if key.endswith(":"):
            data[key[:-1]] = json.loads(value)
        else:
            data[key] = value
    return data if (data or input_file is not None) else None


def upload_inputs(c: Client, pairs: list[str], data: dict[str, Any] | None) -> None:
    """Each ``--input key=@FILE``: the file uploaded as an asset (docs/media-inputs.md),
    ``data[key]`` its id. (Text that starts with @ is given as ``key:='"@..."'``.)"""
    for pair in pairs:
        key, _, value = pair.partition("=")
        if data is None or key.endswith(":") or not value.startswith("@"):
            continue
        path = Path(value[1:]).expanduser()
        if not path.is_file():
            raise ValueError(f"--input {key}=@{path}: no such file")
        asset = c.assets.upload(path)
        err().print(f"uploaded {path.name}: {asset.kind} {asset.id}")
        data[key] = asset.id


def run_command(
    workflow: WorkflowArg,
    inputs: InputsOption = None,
    input_file: InputFileOption = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Follow the run live until it ends.")
    ] = False,
    download: DownloadOption = None,
    all_nodes: AllNodesOption = False,
    timeout: TimeoutOption = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Run every node again, even unchanged ones.")
    ] = False,
    callback_url: Annotated[
        str | None,
        typer.Option("--callback-url", help="POST the run's record here, signed, when it ends."),
    ] = None,
) -> None:
    """Run a workflow; with --wait show each node live, then the output artifacts.

    The outputs are the artifacts of the nodes no edge leaves; --all lists every node's.
    Exit status 1 when the run fails or is cancelled.
    """
    with client() as c:
        data = parse_inputs(inputs or [], input_file)
        found = c.workflows.find(workflow)
        upload_inputs(c, inputs or [], data)
        run = c.workflows.execute(found.id, data, cache=not no_cache, callback_url=callback_url)
        note = f"started run of {found.name!r}; follow it with --wait"
        _started(c, run, note, wait, download, all_nodes, timeout)


def parse_params(pairs: list[str]) -> dict[str, dict[str, Any]] | None:
    """Each ``--set node.param=value`` (a string) or ``node.param:=json`` (any JSON value),
    grouped by node. The node id is what comes before the last dot (node ids may hold
    dots, param names do not)."""
    params: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        target, sep, value = pair.partition("=")
        is_json = target.endswith(":")
        node_id, dot, name = target.removesuffix(":").rpartition(".")
        if not sep or not dot or not node_id or not name:
            raise ValueError(f"--set takes node.param=value or node.param:=json, not {pair!r}")
        params.setdefault(node_id, {})[name] = json.loads(value) if is_json else value
    return params or None


def _started(
    c: Client,
    run: Run,
    note: str,
    wait: bool,
    download: Path | None,
    all_nodes: bool,
    timeout: float | None,
) -> None:
    """What ``run`` and ``retry`` do with the run they started: print its id (and ``note``
    on stderr); or, with --wait or --download, follow it live, report its outputs and exit
    with status 1 unless it completed."""
    if not (wait or download):
        print_made(run, note, run.id)
        return
    with ProgressView(run, err(), _repeats(c, run)) as view:
        run = run.wait(timeout, on_event=view.on_event)
    _report(c, run, download, all_nodes)
    if run.status != "completed":
        raise typer.Exit(1)


def _repeats(c: Client, run: Run) -> dict[str, int]:
    """The nodes of the run's Repeat regions with their bound, from the graph the run was
    started from (none when it cannot be read: iterations are then shown without a bound)."""
    try:
        if run.workflow_version is None:
            graph = c.workflows.get(run.workflow_id).graph_json
        else:
            graph = c.workflows.version(run.workflow_id, run.workflow_version).graph_json
    except NodeloomClientError:
        return {}
    return repeat_bounds(graph)


def _report(c: Client, run: Run, download: Path | None, all_nodes: bool) -> None:
    outputs = run.outputs(all_nodes=all_nodes)
    files = run.download(download, all_nodes=all_nodes) if download is not None else {}
    if wants_json():
        print_json({"run": run, "outputs": outputs, "files": {k: str(v) for k, v in files.items()}})
        return
    types = {n.node_id: n.type for n in run.node_runs}
    print_table(
        ("node", "type", "content type", "bytes", "artifact", "file"),
        (
            (
                node_id,
                types.get(node_id),
                meta.content_type,
                meta.size_bytes,
                meta.id,
                files.get(node_id, ""),
            )
            for node_id, meta in outputs.items()
        ),
    )
    if run.error is not None:
        err().print(f"run {run.status}: {run.error.code}: {run.error.message}", markup=False)


@app.command("list")
def list_runs(
    workflow: WorkflowArg,
    status: Annotated[RunStatusName | None, typer.Option(help="Only runs in this state.")] = None,
    limit: LimitOption = 50,
) -> None:
    """A workflow's runs, newest first."""
    with client() as c:
        found = c.workflows.find(workflow)
        runs = take(c.runs.list(found.id, status=status, page_size=min(limit, 200)), limit)
    print_listing(
        runs,
        ("id", "status", "credits", "ms", "created (UTC)", "error"),
        lambda r: (
            r.id,
            r.status,
            r.credits_used,
            r.duration_ms,
            when(r.created_at),
            r.error.code if r.error else "",
        ),
    )


@app.command("show")
def show(
    workflow: WorkflowArg,
    run_id: RunArg,
) -> None:
    """A run and each of its nodes."""
    with client() as c:
        run = c.runs.get(c.workflows.find(workflow).id, run_id)
    if wants_json():
        print_json(run)
        return
    error = f" · {run.error.code}: {run.error.message}" if run.error else ""
    err().print(
        f"run {run.id} · {run.status} · {run.credits_used} credits · {run.duration_ms} ms{error}",
        markup=False,
    )
    if run.retried_from:
        err().print(f"retry of run {run.retried_from}", markup=False)
    if run.retries:
        err().print("retried as run " + ", ".join(run.retries), markup=False)
    print_table(
        ("node", "type", "status", "credits", "ms", "artifact", "error"),
        (
            (
                n.node_id,
                n.type,
                n.status + (" (cached)" if n.cached else ""),
                n.credits_used,
                n.duration_ms,
                n.artifact_id,
                (n.error or {}).get("code", ""),
            )
            for n in run.node_runs
        ),
    )


@app.command("cancel")
def cancel(
    workflow: WorkflowArg,
    run_id: RunArg,
) -> None:
    """Stop a run; it ends failed with error code cancelled."""
    with client() as c:
        c.runs.cancel(c.workflows.find(workflow).id, run_id)
    err().print(f"cancelling run {run_id}")


@app.command("events")
def events(
    workflow: WorkflowArg,
    run_id: RunArg,
) -> None:
    """A run's events, from the first; live until the run ends (--json: one per line)."""
    with client() as c:
        workflow_id = c.workflows.find(workflow).id
        with handled():
            for event in c.runs.events(workflow_id, run_id):
                if wants_json():
                    sys.stdout.write(event.model_dump_json() + "\n")
                else:
                    node = f" {event.node_id}" if event.node_id else ""
                    data = json.dumps(event.data, ensure_ascii=False) if event.data else ""
                    sys.stdout.write(
                        f"{event.seq:>4} {when(event.ts)} {event.type}{node} {data}".rstrip() + "\n"
                    )
                sys.stdout.flush()


@app.command("retry")
def retry(
    workflow: WorkflowArg,
    run_id: RunArg,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            "-s",
            help="New param for a node: node.param=value (text) or node.param:=json; repeat.",
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", "-w", help="Follow the new run live until it ends.")
    ] = False,
    download: DownloadOption = None,
    all_nodes: AllNodesOption = False,
    timeout: TimeoutOption = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Nodes that run again ignore earlier outputs.")
    ] = False,
    current: Annotated[
        bool,
        typer.Option(
            "--current",
            help="Run the workflow as saved now (a fix saved since the run), not the run's graph.",
        ),
    ] = False,
) -> None:
    """Retry a failed or cancelled run from the node that stopped it.

    Every node that completed is reused (its output kept, no credits); the failed node and
    everything after it run again, with the new params given by --set. With --current the
    workflow as saved now runs, and nodes edited since the run run again too. Prints the
    new run's id; with --wait follows it like `nodeloom run --wait`. Exit status 1 when
    the new run fails or is cancelled.
    """
    with client() as c:
        params = parse_params(sets or [])
        found = c.workflows.find(workflow)
        run = c.runs.retry(found.id, run_id, params=params, cache=not no_cache, current=current)
        note = f"retrying run {run_id} as a new run; follow it with --wait"
        _started(c, run, note, wait, download, all_nodes, timeout)
