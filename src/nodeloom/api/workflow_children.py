"""What the routes of things kept under a workflow (its schedules and webhooks) share: the
404 that says which of the two is missing, the paged list and the delete.

The workflow is checked in the same transaction as the child, so a client learns whether
its workflow id or the child's id was wrong, and a deleted workflow's children answer 404.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Response, status
from sqlalchemy.engine import Connection

from nodeloom.api.paging import Page
from nodeloom.api.state import AppContext
from nodeloom.errors import NotFound
from nodeloom.store import Record, workflows

# store.page(conn, account_id, workflow_id, limit, cursor): limit + 1 rows, newest first
PageReader = Callable[[Connection, str, str, int, str | None], list[Record]]
# store.delete(conn, account_id, workflow_id, child_id): whether there was one to delete
Deleter = Callable[[Connection, str, str, str], bool]


def require_workflow(conn: Connection, account_id: str, workflow_id: str) -> None:
    if not workflows.exists(conn, account_id, workflow_id):
        raise NotFound("No such workflow.")


def require_found(
    conn: Connection, found: Record | bool | None, account_id: str, workflow_id: str, what: str
) -> None:
    """404 for a missing workflow, else for a missing ``what`` of it. ``found`` is the
    child's row, or whether a change found it."""
    require_workflow(conn, account_id, workflow_id)
    if found is None or found is False:
        raise NotFound(f"No such {what} of this workflow.")


async def read_page(
    ctx: AppContext, page: Page, account_id: str, workflow_id: str, reader: PageReader
) -> list[Record]:
    """The page of the workflow's children ``reader`` lists; its Link set on the response."""

    def read(conn: Connection) -> list[Record]:
        require_workflow(conn, account_id, workflow_id)
        return reader(conn, account_id, workflow_id, page.limit, page.cursor)

    return page.rows(await ctx.db.read(read))


async def delete(
    ctx: AppContext, account_id: str, workflow_id: str, child_id: str, deleter: Deleter, what: str
) -> Response:
    def write(conn: Connection) -> None:
        deleted = deleter(conn, account_id, workflow_id, child_id)
        require_found(conn, deleted, account_id, workflow_id, what)

    await ctx.db.write(write)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
