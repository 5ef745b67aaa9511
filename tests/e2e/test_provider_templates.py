"""A template that calls a provider (examples/comfyui-*.json) asks, in its own card, which of
the account's credentials to use, and the workflow is created with it: it was refused with
"no credential REPLACE-WITH-YOUR-COMFYUI-CREDENTIAL-ID in this account" at the page's top."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import api, enter, shot, token
from tests.server import ServerProcess

pytest.importorskip("playwright")
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.slow  # starts server processes, browsers or CLI subprocesses

TEMPLATE = "ComfyUI text to image"


def test_a_provider_template_asks_for_the_credential_in_its_card(
    page: Page, server: ServerProcess
) -> None:
    enter(page, "templates@example.com", "a long password", "Sign up")
    card = page.get_by_role("listitem").filter(has=page.get_by_role("heading", name=TEMPLATE))
    card.get_by_role("button", name=f"Use template {TEMPLATE}").click()
    form = card.get_by_role("form", name=f"Credentials for {TEMPLATE}")
    expect(form).to_contain_text("You have no comfyui credential yet")
    expect(form.get_by_role("button", name="Create workflow")).to_be_disabled()
    expect(form.get_by_role("link", name="Add a credential")).to_be_visible()

    with api(server, token(page)) as client:
        made = client.post(
            "/credentials",
            json={"name": "Studio GPU", "kind": "comfyui",
                  "fields": {"base_url": "http://127.0.0.1:8188"}},
        )  # fmt: skip
        assert made.status_code == 201, made.text
        credential = made.json()["id"]
    page.reload()
    card.get_by_role("button", name=f"Use template {TEMPLATE}").click()
    form.get_by_label("comfyui credential").select_option(label="Studio GPU (…)")
    shot(page, "templates-provider-credential")
    form.get_by_role("button", name="Create workflow").click()
    expect(page.get_by_role("textbox", name="Workflow name")).to_have_value(TEMPLATE)
    wf = page.url.rsplit("/", 1)[1]
    with api(server, token(page)) as client:
        graph = client.get(f"/workflows/{wf}").json()["graph_json"]
    used = {n["data"]["credential"] for n in graph["nodes"] if "credential" in n["data"]}
    assert used == {credential}
