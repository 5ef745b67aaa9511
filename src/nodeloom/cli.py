"""The ``nodeloom`` command: serve, db and provider here; the client commands (login,
workflows, run, runs, webhooks, keys) and accounts administration in ``nodeloom.commands``."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer
from rich.console import Console

from nodeloom import commands, logs
from nodeloom.commands.nodes import app as nodes_app
from nodeloom.errors import ConfigurationError
from nodeloom.nodes.provider_cli import provider_app
from nodeloom.settings import Settings

app = typer.Typer(help="Nodeloom: workflow automation for generative media.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(provider_app, name="provider")
app.add_typer(nodes_app, name="nodes")
commands.register(app)
console = Console()


def upgrade(database_url: str) -> None:
    """Migrate ``database_url`` to the newest schema. Alembic is imported here, not above:
    the commands that only talk to a server over HTTP, most of them, skip its import."""
    from nodeloom.db.migrate import upgrade as migrate

    migrate(database_url)


def _settings() -> Settings:
    try:
        return Settings().prepare()
    except ConfigurationError as exc:
        console.print(f"[red]configuration error:[/red] {exc}")
        raise typer.Exit(2) from exc


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    no_worker: Annotated[
        bool,
        typer.Option(
            "--no-worker",
            help="Only serve the API; nodes run in `nodeloom worker` processes (PostgreSQL).",
        ),
    ] = False,
    processes: Annotated[
        int | None,
        typer.Option(
            help="Server processes accepting on one shared listening socket, with one "
            "database (default NODELOOM_PROCESSES, 1).",
            min=1,
            max=64,
        ),
    ] = None,
) -> None:
    """Migrate the database, then serve the API (and, unless --no-worker, run workflows)."""
    from nodeloom.api.urls import base_url_mismatch

    settings = _settings()
    logs.configure(settings.log_level)
    if no_worker and settings.is_sqlite:
        console.print(
            "[red]--no-worker needs PostgreSQL[/red] (NODELOOM_DATABASE_URL): with SQLite, "
            "every `nodeloom serve` runs the workflows it accepts."
        )
        raise typer.Exit(2)
    if processes is not None:
        settings = settings.model_copy(update={"processes": processes})
    mismatch = base_url_mismatch(settings.base_url, host, port)
    if mismatch is not None:
        logging.getLogger("nodeloom").warning(mismatch)
    upgrade(settings.effective_database_url)
    if settings.processes > 1:
        from nodeloom.api.processes import Supervisor

        code = Supervisor(settings, host, port, executes=not no_worker).run()
        raise typer.Exit(code)
    # Imported here, not above: a supervisor of N processes never builds the app itself.
    from nodeloom.api import serving

    serving.serve(settings, host, port, executes=not no_worker)


@app.command()
def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(help="Node jobs run at once (default NODELOOM_WORKER_CONCURRENCY).", min=1),
    ] = None,
    wait_concurrency: Annotated[
        int | None,
        typer.Option(
            help="Jobs of nodes that only wait (provider calls, child runs) run at once, "
            "besides those (default NODELOOM_WORKER_WAIT_CONCURRENCY).",
            min=1,
        ),
    ] = None,
) -> None:
    """Run workflow nodes from the PostgreSQL job queue; serves no HTTP. Stop with SIGTERM:
    running nodes get NODELOOM_SHUTDOWN_GRACE_SECONDS, then go back to the queue."""
    settings = _settings()
    logs.configure(settings.log_level)
    if settings.is_sqlite:
        console.print(
            "[red]nodeloom worker needs PostgreSQL[/red] (NODELOOM_DATABASE_URL); with SQLite, "
            "`nodeloom serve` runs the workflows itself."
        )
        raise typer.Exit(2)
    if concurrency is not None:
        settings.worker_concurrency = concurrency
    if wait_concurrency is not None:
        settings.worker_wait_concurrency = wait_concurrency
    upgrade(settings.effective_database_url)
    # uvloop, as `serve` runs on: a worker's time is mostly socket sends and receives (its
    # database, Procrastinate's connections, Redis), which cost less there than on asyncio's
    # own loop.
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_work(settings))


async def _work(settings: Settings) -> None:
    import signal

    from nodeloom.engine.graph_cache import GraphCache
    from nodeloom.runtime import Runtime

    runtime = Runtime.build(settings, executes=True)
    # A worker executes Workflow nodes too: it starts their child runs like any process.
    runtime.build_acceptor(GraphCache(runtime.registry, settings))
    await runtime.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    logging.getLogger("nodeloom").info(
        "worker %s running up to %d nodes at once, and waiting on up to %d more",
        runtime.identity.token,
        settings.worker_concurrency,
        settings.worker_wait_concurrency,
    )
    try:
        await stop.wait()
    finally:
        await runtime.stop()


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration."""
    settings = _settings()
    upgrade(settings.effective_database_url)
    console.print("database is up to date")


@db_app.command("copy-to")
def db_copy_to(
    target: Annotated[str, typer.Argument(help="postgresql+asyncpg://user@host/db (empty)")],
    artifacts_to_s3: Annotated[
        bool,
        typer.Option(
            "--artifacts-to-s3",
            help="Also upload the artifact files to the NODELOOM_S3_* bucket.",
        ),
    ] = False,
) -> None:
    """Copy this installation's database (NODELOOM_DATA_DIR / NODELOOM_DATABASE_URL) into an
    empty PostgreSQL database, ids kept; stop the server first. See docs/operations.md."""
    from rich.progress import Progress
    from sqlalchemy.ext.asyncio import create_async_engine

    from nodeloom.db.copy import CopyRefused, copy_database

    settings = _settings()
    upgrade(settings.effective_database_url)
    upgrade(target)

    async def copy() -> None:
        source = create_async_engine(settings.effective_database_url)
        destination = create_async_engine(target)
        try:
            with Progress(console=console, transient=True) as bar:
                tasks: dict[str, object] = {}

                def progress(table: str, rows: int) -> None:
                    if table not in tasks:
                        tasks[table] = bar.add_task(table, total=None)
                    bar.update(tasks[table], completed=rows)  # type: ignore[arg-type]

                copied = await copy_database(source, destination, progress)
        finally:
            await source.dispose()
            await destination.dispose()
        for table, rows in copied.rows.items():
            console.print(f"{table}: {rows} rows")

    try:
        asyncio.run(copy())
    except CopyRefused as exc:
        console.print(f"[red]not copied:[/red] {exc}")
        raise typer.Exit(1) from exc
    if artifacts_to_s3:
        asyncio.run(_upload_artifacts(settings))
    console.print(f"copied into {_masked(target)}")


async def _upload_artifacts(settings: Settings) -> None:
    from nodeloom.artifacts.s3 import S3ArtifactStore, upload_tree

    store = S3ArtifactStore(settings)
    count = size = 0
    async for _, nbytes in upload_tree(store, settings.artifacts_dir):
        count += 1
        size += nbytes
    console.print(f"artifacts: {count} files ({size / 1e6:.1f} MB) uploaded")


def _masked(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@db_app.command("prune")
def db_prune() -> None:
    """Remove now what retention removes: finished runs older than NODELOOM_RETENTION_DAYS
    with their artifacts, and unreferenced files. The credit ledger is kept."""
    from nodeloom.artifacts.store import LocalArtifactStore
    from nodeloom.db.engine import Database
    from nodeloom.engine.retention import PruneReport, Retention

    settings = _settings()
    upgrade(settings.effective_database_url)

    async def prune() -> PruneReport:
        db = Database(settings)
        try:
            return await Retention(settings, db, LocalArtifactStore(settings.artifacts_dir)).prune()
        finally:
            await db.dispose()

    console.print(f"removed {asyncio.run(prune())}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
