"""``nodeloom assets upload|list|rm``: the account's own files (docs/media-inputs.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TransferSpeedColumn

from nodeloom.commands.common import (
    ClientTyper,
    LimitOption,
    client,
    err,
    print_json,
    print_listing,
    take,
    wants_json,
    when,
)

app = ClientTyper(help="Files of the account: images, audio and video for input nodes.")


def _size(value: int) -> str:
    size = float(value)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return str(value)


@app.command("upload")
def upload(
    files: Annotated[list[Path], typer.Argument(help="Files to upload.", exists=True)],
    name: Annotated[str | None, typer.Option(help="Name (one file only).")] = None,
) -> None:
    """Upload files; each becomes an asset (converted to PNG, MP3 or MP4 when needed). The
    asset ids are printed, one per line."""
    if name is not None and len(files) != 1:
        raise typer.BadParameter("--name names one file only")
    done = []
    with (
        client() as c,
        Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=err(),
            transient=True,
        ) as bars,
    ):
        for path in files:
            task = bars.add_task(path.name, total=path.stat().st_size)

            def sent(count: int, task: TaskID = task) -> None:
                bars.update(task, completed=count)

            asset = c.assets.upload(path, name=name, on_progress=sent)
            bars.remove_task(task)
            err().print(f"{path.name}: {asset.kind} {asset.id} ({_size(asset.size_bytes)})")
            done.append(asset)
    if wants_json():
        print_json(done)
        return
    for asset in done:
        print(asset.id)


@app.command("list")
def list_assets(
    kind: Annotated[str | None, typer.Option(help="image, audio or video.")] = None,
    search: Annotated[str | None, typer.Option(help="A part of the name or a tag.")] = None,
    limit: LimitOption = 100,
) -> None:
    """The account's assets, newest first."""
    with client() as c:
        assets = take(c.assets.list(kind=kind, search=search), limit)
    print_listing(
        assets,
        ("id", "name", "kind", "size", "created (UTC)"),
        lambda a: (a.id, a.name, a.kind, _size(a.size_bytes), when(a.created_at)),
    )


@app.command("rm")
def remove(
    asset_ids: Annotated[list[str], typer.Argument(help="Asset ids.")],
    force: Annotated[
        bool, typer.Option("--force", help="Delete even if a workflow names it.")
    ] = False,
) -> None:
    """Delete assets. One a workflow names is kept unless --force."""
    with client() as c:
        for asset_id in asset_ids:
            c.assets.delete(asset_id, force=force)
            err().print(f"deleted asset {asset_id}")
