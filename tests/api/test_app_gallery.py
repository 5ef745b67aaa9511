"""The gallery of public apps (``GET /api/v1/public/apps``), read with no credential: only
published apps whose access is ``public`` are listed, of every account; private and link
apps never; an app unpublished, made link-only or deleted, or whose workflow is deleted, is
gone from the next read; the list pages newest first with a Link header; each card holds
what the app's page shows before its form and nothing of its workflow or owner. Also on
PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.test_apps import hello_graph, publish
from tests.api.test_auth import assert_problem
from tests.conftest import User
from tests.runs_helpers import create_workflow

LISTING = "/api/v1/public/apps"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def listed(client: httpx.AsyncClient, **params: Any) -> list[str]:
    r = await client.get(LISTING, params=params)
    assert r.status_code == 200, r.text
    return [card["title"] for card in r.json()]


async def test_only_public_published_apps_are_listed(
    client: httpx.AsyncClient, owner: User, other: User
) -> None:
    wf = await create_workflow(client, owner, hello_graph())
    await publish(client, owner, wf, title="Private one", access="private")
    await publish(client, owner, wf, title="Link one", access="link")
    await publish(client, owner, wf, title="Draft", access="public", published=False)
    shown = await publish(
        client, owner, wf, title="Public one", access="public", description="Says hello."
    )
    theirs = await create_workflow(client, other, hello_graph())
    await publish(client, other, theirs, title="Theirs", access="public", password="open sesame")
    await publish(client, other, theirs, title="Their link", access="link")
    assert await listed(client) == ["Theirs", "Public one"]
    cards = (await client.get(LISTING)).json()
    # What the page shows before its form, and nothing of the workflow, the form or the owner.
    assert cards[1] == {
        "slug": shown["slug"],
        "title": "Public one",
        "description": "Says hello.",
        "cover_url": None,
        "url": shown["url"],
        "password_required": False,
    }
    assert cards[0]["password_required"] is True
    # The owner's credential changes nothing: a private app is not listed to its owner either.
    r = await client.get(LISTING, headers=owner.headers)
    assert [c["title"] for c in r.json()] == ["Theirs", "Public one"]


async def test_unpublished_private_or_deleted_apps_are_gone_at_once(
    client: httpx.AsyncClient, owner: User
) -> None:
    wf = await create_workflow(client, owner, hello_graph())
    apps = [await publish(client, owner, wf, title=f"App {i}", access="public") for i in range(4)]
    assert await listed(client) == ["App 3", "App 2", "App 1", "App 0"]
    patch = f"/api/v1/apps/{apps[3]['id']}"
    r = await client.patch(patch, json={"published": False}, headers=owner.headers)
    assert r.status_code == 200
    assert await listed(client) == ["App 2", "App 1", "App 0"]
    r = await client.patch(patch, json={"published": True}, headers=owner.headers)
    assert await listed(client) == ["App 3", "App 2", "App 1", "App 0"]
    r = await client.patch(
        f"/api/v1/apps/{apps[2]['id']}", json={"access": "link"}, headers=owner.headers
    )
    assert r.status_code == 200
    r = await client.patch(
        f"/api/v1/apps/{apps[1]['id']}", json={"access": "private"}, headers=owner.headers
    )
    assert r.status_code == 200
    assert await listed(client) == ["App 3", "App 0"]
    r = await client.delete(f"/api/v1/apps/{apps[0]['id']}", headers=owner.headers)
    assert r.status_code == 204
    assert await listed(client) == ["App 3"]
    # Deleting the workflow closes its apps: the gallery too.
    assert (await client.delete(f"/api/v1/workflows/{wf}", headers=owner.headers)).is_success
    assert await listed(client) == []


async def test_pages_newest_first(client: httpx.AsyncClient, owner: User) -> None:
    wf = await create_workflow(client, owner, hello_graph())
    for i in range(5):
        await publish(client, owner, wf, title=f"App {i}", access="public")
        await publish(client, owner, wf, title=f"Hidden {i}", access="link")
    titles: list[str] = []
    url: str | None = f"{LISTING}?limit=2"
    pages = 0
    while url is not None:
        r = await client.get(url)
        assert r.status_code == 200, r.text
        titles += [card["title"] for card in r.json()]
        pages += 1
        link = r.headers.get("link")
        url = link.split(">")[0].lstrip("<") if link else None
    assert titles == ["App 4", "App 3", "App 2", "App 1", "App 0"]
    assert pages == 3


@pytest.mark.parametrize(
    ("query", "pointer"),
    [("limit=0", "query:limit"), ("limit=201", "query:limit"), ("cursor=nope", "query:cursor")],
)
async def test_bad_paging_is_a_problem(
    client: httpx.AsyncClient, owner: User, query: str, pointer: str
) -> None:
    r = await client.get(f"{LISTING}?{query}")
    assert_problem(r, 400, "invalid_request")
    assert pointer in [e["pointer"] for e in r.json()["errors"]]
